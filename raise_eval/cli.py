"""The `raise-eval` command line."""

from __future__ import annotations

import argparse
import decimal
import math
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Optional

import torch

from raise_eval._version import __version__
from raise_eval.adaptive import DEFAULT_PILOT_CHAINS, DEFAULT_PILOT_GRID
from raise_eval.cost import estimate_cost
from raise_eval.datasets import (
    DATASET_SPECS,
    DATASETS,
    PIXEL_ORDERS,
    DataError,
    check_binary,
    check_dataset_request,
    dataset_files,
    load_array_file,
    load_dataset,
)
from raise_eval.distributed import init_from_env, launched_by_torchrun, rank_and_world
from raise_eval.distributed import shutdown as shutdown_process_group
from raise_eval.evaluate import (
    EVALUATE_SCHEDULES,
    EXACT_MODES,
    INITS,
    LOG_F_METHODS,
    EvaluationInterrupted,
    plan_evaluation,
    recognition_means,
    run_evaluation,
)
from raise_eval.outputs import Output, OutputError, OutputWarning, OutputWriteError, check_output_path, check_outputs
from raise_eval.results import dump_json
from raise_eval.resume import DEFAULT_INTERVAL as DEFAULT_RESUME_INTERVAL
from raise_eval.resume import rank_resume_file
from raise_eval.schedules import SCHEDULES
from raise_eval.sharding import parse_size
from raise_eval.threads import default_threads

EVALUATE_DESCRIPTION = """\
Estimate the average test log-likelihood of an RBM, DBM or DBN checkpoint three ways:

  AIS    log Z by annealed importance sampling, a stochastic lower bound on log Z, so the log-likelihood
         mean log f(v) - log Z-hat is optimistic (it tends to overestimate). log f(v) is exact for an RBM, exact
         for a DBM or DBN when enumeration is cheap (--exact), else estimated (--log-f: per-vector AIS or
         importance sampling, checked for bias by --log-f-check); a DBN's log Z is its top RBM's.
  RAISE  reverse AIS from each test vector: a stochastic lower bound on the log-likelihood of the annealing
         model, in practice a conservative estimate (DBMs: heating; DBNs: unrolling). Run on a random subset
         of the test set and extended to the whole set with the control variate log f(v).
  exact  by enumeration, when at most 25 units must be enumerated (an RBM's smaller layer, a DBM's or DBN's
         narrow first hidden layer) and, beyond 10 to 20 s of work, it costs no more than the estimators.

AIS and RAISE agreeing is evidence that both are accurate; a large gap means at least one is not (raise K).
--until-gap TOL turns this into a verdict: K grows until the sandwich closes within TOL nats, or the run says why
it is still open.

Checkpoints: raise-eval .pt files (RBM, DBM, DBN), .npz files with W, vbias, hbias (RBM) or with model_type,
weights_l, biases_l (DBM, DBN), or MATLAB .mat RBMs with vishid, hidbiases, visbiases (see docs/checkpoints.md).
"""

OVERWRITE_HELP = (
    "replace an existing --json or --plot file that raise-eval did not write (without it such a file is refused "
    "before any work; raise-eval's own results are replaced without asking). The run's inputs (the checkpoint, the "
    "data) are never overwritten"
)

THREADS_HELP = (
    "torch threads (default: auto, the cores no other process is using right now; results are bit-identical for "
    "the same seed, device, dtype and thread count)"
)

LONG_RUN_SECONDS = 60  # a run predicted to take longer prints its cost estimate (stderr) before it starts

EVALUATE_EPILOG = """\
examples:
  raise-eval evaluate checkpoints/rbm_digits_64-16.pt
  raise-eval evaluate ../shared/data/checkpoints/rbm_mnist_small_grosse_salakhutdinov_2015.npz --data mnist14
  raise-eval evaluate model.npz --data binarized_mnist --steps 10000 --json result.json
  raise-eval evaluate model.npz --data test.npy --train-data train.npy --device cuda
  raise-eval evaluate checkpoints/rbm_digits_64-16.pt --until-gap 0.05 --steps 50 --time-budget 5m --json cert.json
"""


def _count(text: str) -> int:
    """A whole-number option: digits, or a whole number in scientific notation (1e6), so that a size written 1e12
    reaches the size checks (which say what it would cost) rather than 'invalid int value'."""
    try:
        value = decimal.Decimal(text.strip().replace("_", ""))
    except decimal.InvalidOperation:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not value.is_finite() or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(value)


def _splits_help() -> str:
    """The splits of the named datasets, e.g. "train, valid (binarized_mnist) or test": a split that not every
    dataset has names the ones that do."""
    rank = {"train": 0, "valid": 1, "test": 2}  # the usual order; any other split goes last
    splits = dict.fromkeys(s for spec in DATASET_SPECS.values() for s in spec.splits)
    splits = sorted(splits, key=lambda s: rank.get(s, len(rank)))
    words = []
    for split in splits:
        owners = [name for name, spec in DATASET_SPECS.items() if split in spec.splits]
        words.append(split if len(owners) == len(DATASET_SPECS) else f"{split} ({', '.join(owners)})")
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raise-eval",
        description="Log-likelihoods of deep generative models that can be trusted: AIS, RAISE and BDMC.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"raise-eval {__version__} (torch {torch.__version__}, Python {sys.version.split()[0]})",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    ev = sub.add_parser(
        "evaluate",
        help="AIS, RAISE and exact test log-likelihoods of an RBM, DBM or DBN checkpoint",
        description=EVALUATE_DESCRIPTION,
        epilog=EVALUATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ev.add_argument(
        "checkpoint", metavar="CHECKPOINT", help="RBM, DBM or DBN checkpoint: .pt (raise-eval), .npz or .mat"
    )
    data = ev.add_argument_group("data")
    data.add_argument(
        "--data",
        metavar="NAME|FILE",
        help=f"test data: a named dataset ({', '.join(DATASET_SPECS)}) or a .npy/.npz file of binary vectors "
        "shaped (N, n_visible). Default: the dataset recorded in the checkpoint's metadata",
    )
    data.add_argument(
        "--split",
        default="test",
        help=f"split of a named dataset: {_splits_help()} (default: test)",
    )
    data.add_argument(
        "--pixel-order",
        choices=PIXEL_ORDERS,
        default="row-major",
        help="how a named dataset's images are flattened: row-major, or fortran (column-major, each image "
        "transposed), the order of Burda's 28x28 Omniglot and so of the Grosse & Salakhutdinov Omniglot RBMs "
        "(rbm_omniglot_*.npz): use fortran with those and --data omniglot. Files are used as stored "
        "(default: row-major)",
    )
    data.add_argument(
        "--data-root",
        metavar="DIR",
        help="folder with MNIST/raw, binarized_mnist and omniglot (default: $RAISE_EVAL_DATA, else ../shared/data)",
    )
    data.add_argument(
        "--test-subset",
        type=_count,
        metavar="N",
        help="evaluate on a fixed random subset of N test vectors (drawn with seed + 6, its indices in the JSON; all "
        "when N is at least the test set's size): trades precision for time where the time grows with the test set, "
        "as a DBM's or DBN's log f(v) estimates do (they do not depend on --steps)",
    )
    data.add_argument(
        "--train-data",
        metavar="FILE",
        help="binary training vectors (.npy/.npz) for the data base rates; when given they are used instead of "
        "the checkpoint's train_pixel_means or the named dataset's training split",
    )
    anneal = ev.add_argument_group("annealing")
    anneal.add_argument(
        "--init",
        choices=INITS,
        default="base-rates",
        help="initial distribution of AIS and RAISE: "
        "data base rates (visible biases = logit of clipped training pixel means, hidden uniform) or "
        "uniform (default: base-rates)",
    )
    anneal.add_argument(
        "--schedule",
        choices=EVALUATE_SCHEDULES,
        default="linear",
        help="spacing of the inverse temperatures "
        "(default: linear; sigmoid is the BDMC paper's, salakhutdinov the piecewise-linear one of "
        "Salakhutdinov & Murray). adaptive chooses them in a short pilot run with its own chains and seed "
        "(seed + 4) so that neighbouring distributions are equally far apart (constant conditional ESS); AIS and "
        "RAISE then run, unbiased, on that fixed schedule, which the JSON records",
    )
    anneal.add_argument(
        "--steps",
        "-K",
        type=_count,
        default=1000,
        metavar="K",
        help="number of intermediate distributions K (default: 1000); accuracy grows with K",
    )
    anneal.add_argument(
        "--pilot-chains",
        type=_count,
        metavar="M",
        help=f"--schedule adaptive: chains of the pilot run (default: the AIS chains, at most {DEFAULT_PILOT_CHAINS})",
    )
    anneal.add_argument(
        "--pilot-grid",
        type=_count,
        metavar="G",
        help=f"--schedule adaptive: grid cells the pilot measures, whatever K is (default: {DEFAULT_PILOT_GRID})",
    )
    anneal.add_argument("--ais-chains", type=_count, default=1000, metavar="M", help="AIS chains (default: 1000)")
    anneal.add_argument(
        "--raise-examples",
        type=_count,
        default=100,
        metavar="N",
        help="test vectors RAISE runs on, a random subset (default: 100; all if fewer)",
    )
    anneal.add_argument(
        "--raise-chains", type=_count, default=20, metavar="C", help="RAISE chains per test vector (default: 20)"
    )
    anneal.add_argument(
        "--cv-alpha",
        default="1",
        metavar="ALPHA",
        help="coefficient of the control variate log f(v) in the RAISE average: a number, or 'optimal' for "
        "Cov(Y, X) / Var(X) estimated on the subset (default: 1, the paper's choice)",
    )
    deep = ev.add_argument_group("DBMs and DBNs")
    deep.add_argument(
        "--log-f",
        choices=LOG_F_METHODS,
        default="auto",
        help="estimator of log f(v) for DBMs and DBNs when it is not exact: auto (ais for DBMs; for DBNs ais "
        "unless its unit-wise sweeps would take more than a few minutes, then importance), importance sampling (DBM: mean-field "
        "proposal over the even hidden layers, odd layers summed out; DBN: recognition proposal), ais (per test "
        "vector, AIS from that proposal to the posterior with v clamped: --log-f-steps x --log-f-chains; unbiased for "
        "f(v) and not fooled by modes the proposal misses, as importance sampling can be) or the DBM mean-field bound "
        "(default: auto, chosen by measured error against exact values at equal time; RBMs always use the exact "
        "value, and DBMs and DBNs the exact one whenever --exact computes it)",
    )
    deep.add_argument(
        "--log-f-samples",
        type=_count,
        default=None,
        metavar="S",
        help="importance samples per test vector for log f(v) (default: 500; with --log-f auto, giving it chooses "
        "importance sampling)",
    )
    deep.add_argument(
        "--log-f-steps",
        type=_count,
        default=None,
        metavar="K",
        help="--log-f ais: steps K of each vector's AIS (default: 100; with --log-f auto, giving it chooses ais)",
    )
    deep.add_argument(
        "--log-f-chains",
        type=_count,
        default=None,
        metavar="C",
        help="--log-f ais: chains per test vector (default: 10; with --log-f auto, giving it chooses ais)",
    )
    deep.add_argument(
        "--log-f-check",
        type=_count,
        default=100,
        metavar="N",
        help="re-estimate log f(v) 4 times longer on N test vectors (a fixed random subset) and warn "
        "[log-f-biased] when the estimates rise: an estimator that misses posterior modes is confidently wrong and "
        "its own standard errors cannot show it (default: 100; 0 skips the check)",
    )
    run = ev.add_argument_group("run")
    run.add_argument("--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1 (default: cpu)")
    run.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="precision of states and model (log-weights are always float64; default: float32)",
    )
    run.add_argument(
        "--seed", type=int, default=0, help="random seed; the same seed and device give the same numbers (default: 0)"
    )
    run.add_argument(
        "--exact",
        choices=EXACT_MODES,
        default="auto",
        help="exact log Z and log-likelihood by "
        "enumeration (for DBMs and DBNs also their log f(v), which then replaces the estimate): auto (if at most 25 "
        "units must be enumerated and, beyond 10 to 20 s of work, it costs no more than the estimators), always (up "
        "to 30 units), never "
        "(default: auto). It runs in chunks within --max-memory",
    )
    run.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    run.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    run.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    run.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help=THREADS_HELP,
    )
    scale = ev.add_argument_group("large runs")
    scale.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="bound on the run's peak memory, e.g. 512MB, 8GB, 1.5GiB (default: half the memory free now, on the GPU "
        "for --device cuda). The work is cut into fixed shards (--shard-size) that run one batch at a time, so a large "
        "run takes many batches within the bound; every stage's peak (its batch, log-weights, schedule, the pilot's "
        "grid, the exact enumeration's chunks) is estimated before any work and a run that cannot fit is refused, "
        "naming the option to lower. It never changes the numbers",
    )
    scale.add_argument(
        "--shard-size",
        type=_count,
        metavar="CHAINS",
        help="chains per shard: AIS chains, and RAISE chains of whole test vectors (--shard-size // --raise-chains "
        "vectors, at least one); each shard has its own random stream, so this (unlike --max-memory or the number "
        "of processes) changes the numbers (default: as many as keep chains x units within 2^23, e.g. 6,533 for a "
        "784-500 RBM: the default runs are one shard per stage)",
    )
    scale.add_argument(
        "--resume-file",
        metavar="FILE",
        help="save every finished shard to FILE (atomically), and the annealing state of the shard in progress "
        "every --resume-interval seconds and at Ctrl-C (which then stops after the current step; press it twice to "
        "stop at once), and continue from it when the same command is run again: the final numbers equal an "
        "uninterrupted run's (a finished run's file is read back: delete it to recompute). A file from other "
        "settings is refused, naming what differs. Under torchrun each rank keeps FILE.rank<r>-of-<N>: continue "
        "with the same number of processes",
    )
    scale.add_argument(
        "--resume-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --resume-file: seconds between saves of the annealing state inside a shard (default: 60). Each "
        "save rewrites the whole file: 0 saves after every step (a 64-16 RBM run at K = 2,000 then took 4 times as "
        "long)",
    )
    cert = ev.add_argument_group(
        "certified evaluation",
        "with --until-gap, run the sandwich at K = --steps, 2K, 4K, ... (reusing log f(v) and the exact values) until "
        "AIS - RAISE <= TOL with small standard errors and no warning that undermines either side, or until the "
        "next K would not fit --time-budget or --max-steps; the verdict says closed (with the interval) or open "
        "(why, and the K the trend needs)",
    )
    cert.add_argument(
        "--until-gap",
        type=float,
        metavar="TOL",
        help="certify the sandwich to TOL nats (AIS - RAISE <= TOL; the reported interval adds ±2 standard errors). "
        "Exit status: 0 closed, 3 open",
    )
    cert.add_argument(
        "--time-budget", metavar="DURATION", help="with --until-gap: wall-time budget, e.g. 600, 90s, 30m, 1.5h"
    )
    cert.add_argument("--max-steps", type=_count, metavar="K", help="with --until-gap: the largest K to try")
    cert.add_argument(
        "--plot",
        metavar="PNG",
        help="with --until-gap: plot AIS and RAISE against K (needs matplotlib); with --json OUT and matplotlib "
        "installed the plot is written next to OUT by default",
    )
    _add_bdmc_parser(sub)
    return parser


BDMC_DESCRIPTION = """\
Sandwich the log marginal likelihood of a directed model (a VAE) with bidirectional Monte Carlo.

Simulate examples from the model, keeping their latents as exact posterior samples; forward AIS from the prior
gives a stochastic lower bound on log p(x), reverse AIS from the exact sample a stochastic upper bound. Their gap
(BREAD: the per-chain gap) bounds the Jeffreys divergence between AIS's approximate posterior and the true one.
The ELBO and IWAE-k of the encoder are reported on the same examples for comparison; --real-data adds the same
estimators (and forward AIS) on real test vectors, and --aide measures the encoder against AIS.

HMC step sizes are tuned in a pilot run and then frozen, so the bounds keep their guarantees.

The model: a raise-eval VAE checkpoint, or --model FILE.py:FACTORY, a function in your own file that returns your
decoder (and encoder) wrapped in raise_eval.DecoderModel, with a likelihood by name: bernoulli, gaussian,
discretized_logistic (8-bit pixels) or discretized_logistic_mixture. --real-data must then lie in the likelihood's
support (e.g. integers 0..255 for the discretized logistic).
"""


def _add_bdmc_parser(sub) -> None:
    bd = sub.add_parser(
        "bdmc",
        help="BDMC sandwich, ELBO, IWAE-k and AIDE for a VAE checkpoint or your own decoder (--model)",
        description=BDMC_DESCRIPTION,
        epilog="examples:\n  raise-eval bdmc checkpoints/vae_mnist_z10.pt --steps 100 1000 --plot bounds.png\n"
        "  raise-eval bdmc --model examples/plain_vae_factory.py:make_model --steps 100 1000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bd.add_argument(
        "checkpoint", metavar="CHECKPOINT", nargs="?", help="a raise-eval VAE checkpoint (.pt); or give --model"
    )
    bd.add_argument(
        "--model",
        metavar="FILE.py:FACTORY",
        help="your own model instead of a checkpoint: FACTORY() in FILE.py returns it, e.g. your decoder wrapped "
        "in raise_eval.DecoderModel (moved to --device and --dtype)",
    )
    bd.add_argument("--examples", type=int, default=100, help="simulated examples (default: 100)")
    bd.add_argument("--chains", type=int, default=4, help="forward and reverse AIS chains per example (default: 4)")
    bd.add_argument(
        "--steps",
        "-K",
        type=int,
        nargs="+",
        default=[100, 1000, 10000],
        metavar="K",
        help="numbers of intermediate distributions (default: 100 1000 10000)",
    )
    bd.add_argument("--schedule", choices=SCHEDULES, default="sigmoid", help="default: sigmoid (BDMC paper)")
    bd.add_argument("--leapfrog", type=int, default=10, help="HMC leapfrog steps per transition (default: 10)")
    bd.add_argument(
        "--target-accept",
        type=float,
        default=0.65,
        help="HMC pilot's target acceptance rate, strictly between 0 and 1 (default: 0.65)",
    )
    bd.add_argument("--pilot-chains", type=int, default=4, help="chains per example in the HMC pilot (default: 4)")
    bd.add_argument(
        "--iwae",
        type=int,
        nargs="+",
        default=[1, 100, 1000],
        metavar="k",
        help="IWAE sample sizes (default: 1 100 1000)",
    )
    bd.add_argument("--elbo-samples", type=int, default=100, help="samples for the ELBO (default: 100)")
    bd.add_argument(
        "--real-data",
        metavar="NAME|FILE",
        help="also run ELBO, IWAE and forward AIS on real vectors (e.g. binarized_mnist)",
    )
    bd.add_argument(
        "--real-examples",
        type=int,
        help=f"with --real-data: real test vectors used, a random subset (default: {DEFAULT_REAL_EXAMPLES}; all if "
        "fewer)",
    )
    bd.add_argument("--data-root", metavar="DIR", help="with --real-data NAME: the data root")
    bd.add_argument("--aide", action="store_true", help="run AIDE: the encoder against AIS as the gold standard")
    # The AIDE options default to None so that one given without --aide is refused, not ignored.
    bd.add_argument(
        "--aide-examples",
        type=int,
        help="with --aide: simulated examples AIDE runs on, at most --examples (default: 20, or --examples if fewer)",
    )
    bd.add_argument("--aide-steps", type=int, help="with --aide: K of AIDE's AIS (default: the largest --steps)")
    for flag, default, what in (
        ("--aide-ng", 20, "Ng, AIS runs per example"),
        ("--aide-nt", 20, "Nt, encoder draws per example"),
        ("--aide-mg", 2, "Mg, AIS meta-inference traces"),
        ("--aide-mt", 1, "Mt, encoder meta-inference traces (exact: 1 suffices)"),
    ):
        bd.add_argument(flag, type=int, help=f"with --aide: {what} (default: {default})")
    bd.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    bd.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="default: float32")
    bd.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    bd.add_argument(
        "--json",
        metavar="OUT",
        help="also write the results as JSON to OUT (at Ctrl-C or an error: the stages that finished, marked "
        "incomplete)",
    )
    bd.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    bd.add_argument(
        "--plot",
        metavar="PNG",
        help="plot the bounds against K (needs matplotlib: pip install .[plot]); "
        "with --json OUT and matplotlib installed the plot is written next to OUT by default",
    )
    bd.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    bd.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help=THREADS_HELP,
    )


def cmd_bdmc(args) -> int:
    from raise_eval.bdmc_report import BDMCFailed, BDMCInterrupted, check_bdmc_model, evaluate_bdmc

    device = _setup_run(
        args,
        ("examples", "chains", "leapfrog", "pilot_chains", "elbo_samples", "steps", "iwae"),
        outputs=("json", "plot"),
    )
    bdmc_settings = _check_bdmc_options(args)
    plot_path = _plot_path(args)
    model = _load_bdmc_model(args, device)
    if args.aide:
        try:
            check_bdmc_model(model, aide=True)
        except ValueError:
            source = args.checkpoint or args.model
            _die(f"--aide measures the encoder against AIS, but {source} holds a model without one; drop --aide")
    _check_outputs(args, _bdmc_inputs(args), plot_path)
    real = None
    if args.real_data:
        data = (
            load_array_file(args.real_data)
            if Path(args.real_data).suffix in (".npy", ".npz")
            else load_dataset(args.real_data, "test", args.data_root)
        )
        data = _check_real_data(model, data)
        if args.real_examples is not None and args.real_examples > len(data):
            _die(f"--real-examples {args.real_examples}: --real-data {args.real_data} has only {len(data)} vectors")
        real_examples = DEFAULT_REAL_EXAMPLES if args.real_examples is None else args.real_examples
        real = data[torch.randperm(len(data), generator=torch.Generator().manual_seed(args.seed))[:real_examples]]
    try:
        report = evaluate_bdmc(
            model,
            **bdmc_settings,
            real_data=real,
            seed=args.seed,
            progress=not args.no_progress,
            settings={
                "checkpoint": args.checkpoint,
                "model_factory": args.model,
                "real_data": args.real_data,
                "real_examples": None if real is None else len(real),
            },
            threads=None,  # _setup_run chose them
        )
    except (BDMCInterrupted, BDMCFailed) as stop:
        # Ctrl-C or an error part-way: no traceback; show and keep what finished, as evaluate does.
        report = stop.report
        print(report.format_table())
        if args.json:
            dump_json(report, args.json)
            print(f"wrote {args.json} (marked incomplete: the stages that finished)")
        if plot_path and report.sandwich:
            report.plot(plot_path)
            print(f"wrote {plot_path}")
        if isinstance(stop, BDMCInterrupted):
            print(f"raise-eval: interrupted during {report.interrupted}", file=sys.stderr)
            return 130
        print(f"raise-eval: error: {report.interrupted} failed: {report.error}", file=sys.stderr)
        return 1
    print(report.format_table())
    if args.json:
        dump_json(report, args.json)
        print(f"wrote {args.json}")
    if plot_path:
        report.plot(plot_path)
        print(f"wrote {plot_path}")
    elif args.json:
        print("note: no plot of the bounds against K (matplotlib is not installed; pip install -e .[plot])")
    return 0


DEFAULT_REAL_EXAMPLES = 100
# bdmc's options by the names of evaluate_bdmc's settings, for check_bdmc_settings' messages.
BDMC_OPTIONS = {
    "num_examples": "--examples",
    "chains": "--chains",
    "steps": "--steps",
    "schedule": "--schedule",
    "num_leapfrog": "--leapfrog",
    "target_accept": "--target-accept",
    "pilot_chains": "--pilot-chains",
    "iwae_samples": "--iwae",
    "elbo_samples": "--elbo-samples",
    "aide_num_examples": "--aide-examples",
    "aide_steps": "--aide-steps",
    "aide_Ng": "--aide-ng",
    "aide_Nt": "--aide-nt",
    "aide_Mg": "--aide-mg",
    "aide_Mt": "--aide-mt",
}


def _check_bdmc_options(args) -> dict:
    """bdmc's options, all checked before any work (check_bdmc_settings, with the options' names); returns the
    settings `evaluate_bdmc` takes from them (`_bdmc_settings`)."""
    from raise_eval.bdmc_report import check_bdmc_settings

    aide_options = {key[len("aide_"):]: option for key, option in BDMC_OPTIONS.items() if key.startswith("aide_")}
    given = {key: getattr(args, option[2:].replace("-", "_")) for key, option in aide_options.items()}
    given = {key: value for key, value in given.items() if value is not None}
    if given and not args.aide:
        options = ", ".join(aide_options[key] for key in given)
        _die(f"{options} belong{'s' if len(given) == 1 else ''} to AIDE: give --aide too")
    if args.real_data is None:
        for option in ("--real-examples", "--data-root"):
            if getattr(args, option[2:].replace("-", "_")) is not None:
                _die(f"{option} belongs to --real-data: give --real-data NAME|FILE too")
    else:
        if args.real_examples is not None and args.real_examples < 1:
            _die(f"--real-examples must be at least 1, got {args.real_examples}")
        if not _is_file(args.real_data):
            try:
                check_dataset_request(args.real_data, "test")
            except DataError as e:
                _die(f"--real-data {args.real_data}: {e}")
        elif not Path(args.real_data).is_file():
            _die(f"--real-data {args.real_data}: no such file")
    settings = _bdmc_settings(args, aide_settings=given if args.aide else None)
    try:
        check_bdmc_settings(**settings, names=BDMC_OPTIONS)
    except ValueError as e:
        _die(str(e))
    return settings


def _bdmc_settings(args, aide_settings: Optional[dict]) -> dict:
    """The keyword arguments that `check_bdmc_settings` and `evaluate_bdmc` share, from the parsed options."""
    return dict(
        num_examples=args.examples,
        chains=args.chains,
        steps=tuple(args.steps),
        schedule=args.schedule,
        num_leapfrog=args.leapfrog,
        target_accept=args.target_accept,
        pilot_chains=args.pilot_chains,
        iwae_samples=tuple(args.iwae),
        elbo_samples=args.elbo_samples,
        aide_settings=aide_settings,
    )


def _evaluate_inputs(args, metadata: dict) -> list[tuple[str, Optional[str]]]:
    """The files an evaluate run reads, which no output may name: the checkpoint, the data files, or the files of
    a named dataset (every split: the training split may give the base rates)."""
    inputs = [("the checkpoint", args.checkpoint), ("the --train-data file", args.train_data)]
    data = args.data or metadata.get("dataset")
    if data is not None and _is_file(data):
        inputs.append(("the --data file", data))
    elif data in DATASET_SPECS:
        for split in DATASET_SPECS[data].splits:
            inputs += [(f"a file of the {data} dataset", file) for file in dataset_files(data, split, args.data_root)]
    return inputs


def _bdmc_inputs(args) -> list[tuple[str, Optional[str]]]:
    """The files a bdmc run reads, which no output may name."""
    inputs = [("the checkpoint", args.checkpoint), ("the --model file", args.model and args.model.rpartition(":")[0])]
    if args.real_data and _is_file(args.real_data):
        inputs.append(("the --real-data file", args.real_data))
    elif args.real_data:
        files = dataset_files(args.real_data, "test", args.data_root)
        inputs += [(f"a file of the {args.real_data} dataset", file) for file in files]
    return inputs


def _check_outputs(args, inputs: list[tuple[str, Optional[str]]], plot_path: Optional[str] = None) -> None:
    """The files this run will write, against its inputs and what exists (`raise_eval.outputs`), before any work."""
    outputs = [
        Output("--json", args.json, "json"),
        Output("--resume-file", getattr(args, "resume_file", None), "resume"),
    ]
    if plot_path:
        outputs.append(Output("--plot" if args.plot else "--json's plot (name it with --plot)", plot_path, "plot"))
    try:
        check_outputs(outputs, inputs, overwrite=args.overwrite)
    except OutputError as e:
        _die(str(e))


def _load_bdmc_model(args, device: torch.device):
    """The model of `bdmc`: the CHECKPOINT or --model FILE.py:FACTORY (exactly one), on the device and dtype."""
    from raise_eval.models.io.checkpoints import load_checkpoint
    from raise_eval.user_model import UserCodeError, build_user_model

    if (args.checkpoint is None) == (args.model is None):
        _die("give a CHECKPOINT or --model FILE.py:FACTORY (one of the two)")
    dtype = getattr(torch, args.dtype)
    if args.model is not None:
        try:
            model = build_user_model(args.model)
        except UserCodeError as e:
            _die(str(e))
        if isinstance(model, torch.nn.Module):
            model.to(device=device, dtype=dtype).requires_grad_(False)  # HMC differentiates in z only
        return model
    model = load_checkpoint(args.checkpoint, dtype=dtype, device=device).model
    if not hasattr(model, "sample_joint"):
        _die(
            f"{args.checkpoint} holds an {type(model).__name__}; raise-eval bdmc evaluates directed models "
            "(VAEs); use raise-eval evaluate for RBMs"
        )
    return model


def _check_real_data(model, data: torch.Tensor) -> torch.Tensor:
    """--real-data against the model: its likelihood's support when it says (DecoderModel.check_data), else
    binary vectors (raise-eval's VAEs)."""
    if hasattr(model, "check_data"):
        return model.check_data(data if data.is_floating_point() else data.float(), "real data")
    return check_binary(data, model.data_dim, "real data")


def _setup_run(
    args, positive: tuple[str, ...], outputs: tuple[str, ...], at_least_two: tuple[str, ...] = ()
) -> torch.device:
    """Checks that need no computation, done before any: option values (named as on the command line), the
    device, the output paths; then the thread count."""
    for name in positive:
        value = getattr(args, name)
        values = value if isinstance(value, list) else [value]
        least = 2 if name in at_least_two else 1
        if any(v < least for v in values):
            why = " (a standard error needs two)" if least == 2 else ""
            _die(f"--{name.replace('_', '-')} must be at least {least}{why}, got {value}")
    if not SEED_RANGE[0] <= args.seed <= SEED_RANGE[1]:
        _die(
            f"--seed must be an integer from {SEED_RANGE[0]} to {SEED_RANGE[1]} (the run seeds torch generators with "
            f"seed to seed + {SEED_OFFSETS}), got {args.seed}"
        )
    try:
        device = torch.device(args.device)
    except RuntimeError:
        _die(f"--device {args.device!r} is not a torch device; use cpu, cuda or cuda:N")
    if device.type not in ("cpu", "cuda"):
        _die(f"--device {args.device}: raise-eval runs on cpu or cuda, not {device.type}")
    if device.type == "cuda" and not torch.cuda.is_available():
        _die(f"--device {args.device} was asked for but torch.cuda.is_available() is False")
    for name in outputs:
        path = getattr(args, name)
        if path and not _check_output(Path(path), f"--{name}"):
            setattr(args, name, None)  # the null device: no output
    if args.threads is not None and args.threads < 1:
        _die(f"--threads must be at least 1, got {args.threads}")
    cores = os.cpu_count() or 1
    if args.threads is not None and args.threads > cores:
        print(
            f"raise-eval: note: --threads {args.threads} exceeds the {cores} cores of this machine; the threads "
            "will fight for cores and the run will be slower",
            file=sys.stderr,
        )
    torch.set_num_threads(args.threads or default_threads(torch.get_num_threads()))
    return device


# torch.Generator.manual_seed takes -2^63 .. 2^64 - 1, and evaluate seeds its streams with seed .. seed + 6 (see
# its docstring): a seed beyond would fail only at a later stage, after the work before it.
SEED_OFFSETS = 6
SEED_RANGE = (-(2**63), 2**64 - 1 - SEED_OFFSETS)


def _check_output(path: Path, option: str) -> bool:
    """`raise_eval.outputs.check_output_path`, before any work; False (said on stderr) for the null device."""
    try:
        if check_output_path(path, option):
            return True
    except OutputError as e:
        _die(str(e))
    print(f"raise-eval: note: {option} {path} is the null device: nothing will be written", file=sys.stderr)
    return False


def _die(message: str) -> None:
    print(f"raise-eval: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_pilot_options(args) -> None:
    """--pilot-chains and --pilot-grid belong to --schedule adaptive; checked before any work."""
    for name, least in (("pilot_chains", 2), ("pilot_grid", 1)):
        value = getattr(args, name)
        if value is None:
            continue
        option = f"--{name.replace('_', '-')}"
        if args.schedule != "adaptive":
            _die(f"{option} sets the pilot of --schedule adaptive; this run uses --schedule {args.schedule}")
        if value < least:
            _die(f"{option} must be at least {least}, got {value}")


def _is_file(data: str) -> bool:
    return Path(data).suffix in (".npy", ".npz")


def _check_data_options(data: Optional[str], args) -> None:
    """The data options, checked before any work (for --data NAME; the checkpoint's dataset when it names it)."""
    if data is None:
        return
    if _is_file(data):
        if args.pixel_order != "row-major":
            _die(
                f"--pixel-order {args.pixel_order} reorders the images of named datasets; the vectors of "
                f"{data} are used as stored (reorder them before saving)"
            )
        return
    try:
        check_dataset_request(data, args.split, args.pixel_order)
    except DataError as e:
        _die(f"--data {data}: {e}")


def _load_data(args, metadata: dict) -> tuple[torch.Tensor, str]:
    data = args.data or metadata.get("dataset")
    if data is None:
        _die("this checkpoint does not say which data it was trained on: pass --data NAME or --data FILE")
    _check_data_options(data, args)
    if _is_file(data):
        return load_array_file(data), data
    return load_dataset(data, args.split, args.data_root, args.pixel_order), data


def _train_pixel_means(args, ckpt, data_name: str) -> Optional[torch.Tensor]:
    """The base rates of the annealed machine's visible layer: pixel means (RBM, DBM), or for a DBN the
    recognition means of its top RBM's visible layer over the training data."""
    from raise_eval.models.boltzmann.dbn import DBN

    if args.init != "base-rates":
        return None
    is_dbn = isinstance(ckpt.model, DBN)
    train = None
    if args.train_data:
        train = check_binary(load_array_file(args.train_data), ckpt.model.n_visible, "training data")
        args.base_rates_from = f"--train-data {args.train_data}"
    elif ckpt.train_pixel_means is not None and not is_dbn:
        args.base_rates_from = "the checkpoint's train_pixel_means"
        return ckpt.train_pixel_means
    elif data_name in DATASETS:
        train = load_dataset(data_name, "train", args.data_root, args.pixel_order)
        train = check_binary(train, ckpt.model.n_visible, f"{data_name} training data")
        args.base_rates_from = f"the {data_name} training split"
    if train is None:
        why = (
            " (a DBN's base rates are the recognition means of its top RBM's visible layer over the training vectors, "
            "so the pixel means a checkpoint keeps are not enough)"
            if is_dbn
            else ""
        )
        _die(f"--init base-rates needs training data{why}: pass --train-data FILE (or --init uniform)")
    return recognition_means(ckpt.model, train) if is_dbn else train.double().mean(0)


def cmd_evaluate(args) -> int:
    from raise_eval.models.boltzmann.dbn import DBN
    from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
    from raise_eval.models.io.checkpoints import load_checkpoint

    _resolve_log_f_options(args)
    device = _setup_run(
        args,
        ("steps", "ais_chains", "raise_examples", "raise_chains", "log_f_samples", "log_f_steps", "log_f_chains"),
        outputs=("json", "plot"),
        at_least_two=("ais_chains", "raise_examples"),
    )
    _check_data_options(args.data, args)
    _check_pilot_options(args)
    if args.test_subset is not None and args.test_subset < 2:
        _die(f"--test-subset must be at least 2 (a standard error needs two), got {args.test_subset}")
    max_memory = _check_scale_options(args)
    time_budget, plot_path = _check_certify_options(args)
    rank = 0
    if launched_by_torchrun():
        # One process per rank (torchrun): the ranks share out the shards; only rank 0 prints and writes --json
        # (each rank writes its own --resume-file, FILE.rank<r>-of-<N>).
        device = init_from_env(device)
        rank = rank_and_world()[0]
    if Path(args.checkpoint).is_dir():
        _die(f"{args.checkpoint} is a folder; give the checkpoint file")
    ckpt = load_checkpoint(args.checkpoint, dtype=getattr(torch, args.dtype), device=device)
    if not isinstance(ckpt.model, (LayeredBoltzmannMachine, DBN)):
        _die(
            f"{args.checkpoint} holds a {type(ckpt.model).__name__}; raise-eval evaluate evaluates RBMs, DBMs and "
            "DBNs (use raise-eval bdmc for VAEs)"
        )
    _check_outputs(args, _evaluate_inputs(args, ckpt.metadata), plot_path)
    if args.cv_alpha == "optimal":
        cv_alpha = "optimal"
    else:
        try:
            cv_alpha = float(args.cv_alpha)
        except ValueError:
            cv_alpha = float("nan")
        if not math.isfinite(cv_alpha):
            _die(f"--cv-alpha takes a finite number or 'optimal', got {args.cv_alpha!r}")
    test, data_name = _load_data(args, ckpt.metadata)
    means = _train_pixel_means(args, ckpt, data_name)
    options = dict(
        init=args.init,
        train_pixel_means=means,
        schedule=args.schedule,
        ais_chains=args.ais_chains,
            raise_examples=args.raise_examples,
            raise_chains=args.raise_chains,
        seed=args.seed,
        exact=args.exact,
        log_f_method=args.log_f,
        log_f_samples=args.log_f_samples,
        log_f_ais_steps=args.log_f_steps,
        log_f_ais_chains=args.log_f_chains,
        log_f_check=args.log_f_check,
        cv_alpha=cv_alpha,
        pilot_chains=args.pilot_chains,
        pilot_grid=args.pilot_grid,
        max_memory=max_memory,
        shard_size=args.shard_size,
        resume_interval=DEFAULT_RESUME_INTERVAL if args.resume_interval is None else args.resume_interval,
        progress=not args.no_progress and rank == 0,
        settings={
            "checkpoint": str(args.checkpoint),
            "data": data_name,
            "split": args.split if data_name in DATASETS else "file",
            "pixel_order": args.pixel_order if data_name in DATASETS else "as stored",
            "base_rates_from": getattr(args, "base_rates_from", None),
        },
    )
    options["test_subset"] = args.test_subset
    # Every stage's memory is checked here (refused, naming the option, before any work) and its time measured.
    planned = {k: v for k, v in options.items() if k != "resume_interval"}
    plan = plan_evaluation(ckpt.model, test, steps=args.steps, **planned)
    estimate = estimate_cost(plan)
    if rank == 0 and estimate.seconds >= LONG_RUN_SECONDS:
        first = f"the first K ({args.steps:,}): " if args.until_gap is not None else ""
        print(f"raise-eval: {first}{estimate.format()}", file=sys.stderr, flush=True)
    if args.until_gap is not None:
        return _run_certified(args, ckpt, test, options, time_budget, plot_path, rank)
    try:
        report = run_evaluation(
            plan, resume_file=args.resume_file, resume_interval=options["resume_interval"], cost_estimate=estimate
        )
    except EvaluationInterrupted as stop:
        if rank != 0:
            return 130
        # Ctrl-C: no traceback; show and keep what finished.
        print("\n" + stop.report.format_table())
        if args.resume_file:
            world = rank_and_world()[1]
            kept = args.resume_file if world == 1 else f"{args.resume_file}.rank*-of-{world}"
            if Path(args.resume_file if world == 1 else rank_resume_file(args.resume_file, 0, world)).exists():
                print(f"the run so far is kept in {kept}: run the same command to continue")
            else:  # e.g. a second Ctrl-C before the first save
                print(f"nothing was saved to {kept} yet: running the same command starts over")
        if args.json:
            dump_json(stop.report, args.json)
            print(f"wrote {args.json} (marked incomplete)")
        print(f"raise-eval: interrupted during {stop.report.interrupted}", file=sys.stderr)
        return 130
    if ckpt.metadata.get("ignored_variables"):
        report.notes.append(f"ignored variables of the checkpoint: {', '.join(ckpt.metadata['ignored_variables'])}")
    if rank != 0:
        return 0  # every rank holds the same report; rank 0 shows it
    print(report.format_table())
    if args.json:
        dump_json(report, args.json)
        print(f"wrote {args.json}")
    return 0


def _resolve_log_f_options(args) -> None:
    """--log-f and its budget options: an option given for one estimator chooses it under --log-f auto, and one
    given for another estimator than the --log-f named is refused (never silently ignored)."""
    if args.log_f_check < 0:
        _die(f"--log-f-check must be at least 0 (0 turns the check off), got {args.log_f_check}")
    args.log_f_explicit = args.log_f != "auto"
    importance = args.log_f_samples is not None
    ais = args.log_f_steps is not None or args.log_f_chains is not None
    if args.log_f == "auto":
        if importance and ais:
            _die("--log-f-samples sets importance sampling, --log-f-steps/--log-f-chains per-vector AIS: choose one "
                 "with --log-f importance or --log-f ais")
        if importance:
            args.log_f = "importance"
        elif ais:
            args.log_f = "ais"
    elif importance and args.log_f != "importance":
        _die(f"--log-f-samples sets importance sampling, but --log-f is {args.log_f}; drop it or use --log-f importance")
    elif ais and args.log_f != "ais":
        _die(f"--log-f-steps and --log-f-chains set per-vector AIS, but --log-f is {args.log_f}; use --log-f ais")
    args.log_f_samples = 500 if args.log_f_samples is None else args.log_f_samples
    args.log_f_steps = 100 if args.log_f_steps is None else args.log_f_steps
    args.log_f_chains = 10 if args.log_f_chains is None else args.log_f_chains


def _plot_path(args) -> Optional[str]:
    """--plot, checked before any work (matplotlib installed, a picture format), or by default a PNG next to
    --json when matplotlib is installed; None for no plot."""
    try:
        import matplotlib  # noqa: F401

        have_matplotlib = True
    except ImportError:
        have_matplotlib = False
    if args.plot and not have_matplotlib:
        _die("--plot needs matplotlib: pip install matplotlib (or the extra: pip install -e .[plot])")
    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".pdf", ".svg", ".jpg", ".jpeg"):
        _die(f"--plot {args.plot}: name a .png, .pdf, .svg or .jpg file")
    return args.plot or (str(Path(args.json).with_suffix(".png")) if args.json and have_matplotlib else None)


def _check_certify_options(args) -> tuple[Optional[float], Optional[str]]:
    """--until-gap and its companions, before any work: (time budget in seconds, plot path)."""
    from raise_eval.certify import parse_duration

    if args.until_gap is None:
        for name in ("time_budget", "max_steps", "plot"):
            if getattr(args, name) is not None:
                _die(f"--{name.replace('_', '-')} belongs to a certified run: give --until-gap TOL too")
        return None, None
    if not (math.isfinite(args.until_gap) and args.until_gap > 0):
        _die(f"--until-gap must be a positive number of nats, got {args.until_gap:g}")
    time_budget = None
    if args.time_budget is not None:
        try:
            time_budget = parse_duration(args.time_budget)
        except ValueError as e:
            _die(f"--time-budget: {e}")
    if args.max_steps is not None and args.max_steps < args.steps:
        _die(f"--max-steps ({args.max_steps}) must be at least the first K, --steps ({args.steps})")
    return time_budget, _plot_path(args)


def _run_certified(args, ckpt, test, options: dict, time_budget, plot_path, rank: int) -> int:
    from raise_eval.certify import CertifyInterrupted, certify

    if launched_by_torchrun() and rank_and_world()[1] > 1:
        _die("--until-gap runs in one process; run it without torchrun")

    def show(step) -> None:
        gap = "—" if step.gap is None else f"{step.gap:.4f}"
        state = "closed" if not step.reasons_open else "open"
        print(
            f"K = {step.steps:,}: AIS {step.ais_mean:.4f}, RAISE {step.raise_mean:.4f}, gap {gap} ({state}, "
            f"{step.seconds:.1f} s)",
            flush=True,
        )

    try:
        cert = certify(
            ckpt.model,
            test,
            tolerance=args.until_gap,
            steps=args.steps,
            max_steps=args.max_steps,
            time_budget=time_budget,
            resume_file=args.resume_file,
            on_step=show,
            threads=None,  # _setup_run chose them
            **options,
        )
    except CertifyInterrupted as stop:
        # Ctrl-C: no traceback; show and keep the finished Ks (JSON and plot) and the K in progress's table.
        print("\n" + stop.report.format_table())
        print()
        print(stop.certificate.format_table())
        _write_certificate(args, stop.certificate, plot_path)
        if args.resume_file:
            print(f"the finished Ks (and the K in progress) are kept in {args.resume_file}: run the same command to "
                  "continue")
        print(f"raise-eval: interrupted during {stop.report.interrupted}", file=sys.stderr)
        return 130
    if cert.report is not None:
        print()
        print(cert.report.format_table())
    print()
    print(cert.format_table())
    _write_certificate(args, cert, plot_path)
    # The exit status carries the verdict, for scripts: 0 closed, 3 open (2 is a usage error, 130 Ctrl-C).
    return 0 if cert.closed else EXIT_OPEN


EXIT_OPEN = 3


def _write_certificate(args, cert, plot_path) -> None:
    if args.json:
        dump_json(cert, args.json)
        print(f"wrote {args.json}{' (interrupted: the finished Ks)' if cert.verdict == 'interrupted' else ''}")
    if plot_path and cert.history:
        cert.plot(plot_path)
        print(f"wrote {plot_path}")
    elif args.json and not plot_path:
        print("note: no plot of AIS and RAISE against K (matplotlib is not installed; pip install -e .[plot])")


def _check_scale_options(args) -> Optional[int]:
    """--max-memory (bytes, None for the default), --shard-size and --resume-file's folder, before any work."""
    max_memory = None
    if args.max_memory is not None:
        try:
            max_memory = parse_size(args.max_memory)
        except ValueError as e:
            _die(f"--max-memory: {e}")
    if args.shard_size is not None and args.shard_size < 1:
        _die(f"--shard-size must be at least 1, got {args.shard_size}")
    if args.resume_file and not _check_output(Path(args.resume_file), "--resume-file"):
        args.resume_file = None
    if args.resume_interval is not None:
        if not args.resume_file:
            _die("--resume-interval sets how often --resume-file saves; give --resume-file too")
        if not args.resume_interval >= 0:
            _die(f"--resume-interval must be a number of seconds >= 0, got {args.resume_interval:g}")
    return max_memory


# A value that starts with '-' but is not a plain negative number ('-1GB', '-5m', '-1e3'): argparse takes it for an
# option and says only "expected one argument".
_DASH_VALUE = re.compile(r"-\.?\d")


def _attach_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--max-memory -1GB` read as `--max-memory=-1GB`, for every option that takes one value, so that the option's
    own check says what is wrong with the value."""
    takes_value = set()
    parsers = [parser]
    while parsers:
        for action in parsers.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            elif action.option_strings and action.nargs is None:
                takes_value.update(action.option_strings)
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--":  # what follows is positional
            return out + argv[i:]
        if argv[i] in takes_value and i + 1 < len(argv) and _DASH_VALUE.match(argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """raise-eval's own warnings (a save that failed while the run went on) as one line, without a source line."""
    if issubclass(category, OutputWarning):
        print(f"raise-eval: warning: {message}", file=sys.stderr if file is None else file)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


_default_showwarning = warnings.showwarning


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_dash_values(parser, list(sys.argv[1:] if argv is None else argv)))
    warnings.showwarning = _show_warning
    try:
        if args.command == "evaluate":
            code = cmd_evaluate(args)
            if code in (0, EXIT_OPEN):  # a finished run (not Ctrl-C): leave a torchrun process group cleanly
                shutdown_process_group()
            return code
        if args.command == "bdmc":
            return cmd_bdmc(args)
    except (DataError, FileNotFoundError, ValueError, NotImplementedError) as e:
        _die(str(e))
    except OutputWriteError as e:  # a result computed but not written: where it is kept, or the JSON itself
        print(f"raise-eval: error: {e}", file=sys.stderr)
        if e.kept is None and e.text is not None:
            print(e.text, end="")
        return 1
    except KeyboardInterrupt:
        # Ctrl-C outside the stages that keep partial results (loading, bdmc): a clean exit, no traceback.
        print("raise-eval: interrupted", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
