"""`raise-eval evaluate`: AIS, RAISE and exact test log-likelihoods of an RBM, DBM or DBN checkpoint, and with
--until-gap a certified verdict. The options are the declarations of `InputSettings`, `EvaluateSettings`,
`OutputSettings` and `CertifySettings`; this module builds those values once, loads the inputs once, and renders
the report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from raise_eval.annealing import NonFiniteLogWeightError
from raise_eval.certification.report import CertifyFailed, CertifyInterrupted
from raise_eval.certification.run import certify
from raise_eval.certification.settings import CERTIFY_HELP, CertifySettings
from raise_eval.cli.common import announce_null_outputs, check_environment, configure_threads, write_report
from raise_eval.cli.options import add_subcommand, die, flags, given, settings_from
from raise_eval.evaluation.energy import EnergySettings
from raise_eval.evaluation.plan import plan_evaluation
from raise_eval.evaluation.report import EvaluationFailed, EvaluationInterrupted
from raise_eval.evaluation.run import run_evaluation
from raise_eval.evaluation.settings import EvaluateSettings
from raise_eval.evaluation.timing import estimate_cost
from raise_eval.io.inputs import InputSettings, load_evaluation_inputs, load_model
from raise_eval.io.run_files import OutputSettings
from raise_eval.runtime.distributed import init_from_env, launched_by_torchrun, rank_and_world
from raise_eval.runtime.resume import rank_resume_file
from raise_eval.settings import declarations

DESCRIPTION = """\
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

Your own energy-based model: --model FILE.py:FACTORY, a function in your file that returns it wrapped in
raise_eval.EnergyModel, with --data (and --train-data for the base) .npy/.npz files of its examples (see
docs/energy.md).

Checkpoints: raise-eval .pt files (RBM, DBM, DBN), .npz files with W, vbias, hbias (RBM) or with model_type,
weights_l, biases_l (DBM, DBN), or MATLAB .mat RBMs with vishid, hidbiases, visbiases (see docs/checkpoints.md).
RBMs of Gaussian, Potts (categorical) or spin units: .npz files that name the unit types (visible, hidden) and
test data as real vectors, integer codes or an alignment read with --alphabet (see docs/units.md).
"""

EPILOG = """\
examples:
  raise-eval evaluate checkpoints/rbm_digits_64-16.pt
  raise-eval evaluate ../shared/data/checkpoints/rbm_mnist_small_grosse_salakhutdinov_2015.npz --data mnist14
  raise-eval evaluate model.npz --data binarized_mnist --steps 10000 --json result.json
  raise-eval evaluate model.npz --data test.npy --train-data train.npy --device cuda
  raise-eval evaluate potts.npz --data test.fasta --train-data train.fasta --until-gap 0.1
  raise-eval evaluate checkpoints/rbm_digits_64-16.pt --until-gap 0.05 --steps 50 --time-budget 5m --json cert.json
  raise-eval evaluate --model my_ebm.py:make_model --data test.npy --train-data train.npy --steps 500
"""

LONG_RUN_SECONDS = 60  # a run predicted to take longer prints its cost estimate (stderr) before it starts
EXIT_OPEN = 3  # a certified run that stays open (0 closed, 2 usage error, 130 Ctrl-C)
EXIT_FAILED = 1  # a stage stopped on log-weights that turned NaN or +inf (what finished is shown and kept)
SETTINGS = (InputSettings, EvaluateSettings, EnergySettings, OutputSettings, CertifySettings)
FLAGS = flags(*SETTINGS)
_EVALUATE_FIELDS = {spec.name for spec in declarations(EvaluateSettings)}
# An energy model's own options (--kernel, --leapfrog, --pilot-steps): a checkpoint's evaluation refuses them.
_ENERGY_OPTIONS = tuple(name for name in flags(EnergySettings))
CERTIFY_ONLY = ("max_steps", "time_budget", "plot")  # evaluate's --plot draws the certified run


def add_parser(sub) -> None:
    add_subcommand(
        sub,
        "evaluate",
        help="AIS, RAISE and exact test log-likelihoods of an RBM, DBM, DBN or fully visible model",
        description=DESCRIPTION,
        epilog=EPILOG,
        options=SETTINGS,
        run=run,
        descriptions={"certified evaluation": CERTIFY_HELP},
    )


def _settings(args: argparse.Namespace):
    """The four settings values of this command, each built (and checked) once from the options given."""
    options = given(args, CertifySettings)
    certified = "tolerance" in options
    if not certified:
        extra = [name for name in CERTIFY_ONLY if name in vars(args)]
        if extra:
            die(f"{FLAGS[extra[0]]} belongs to a certified run: give --until-gap TOL too")
    if "resume_interval" in vars(args) and "resume_file" not in vars(args):
        die("--resume-interval sets how often --resume-file saves; give --resume-file too")
    evaluation = settings_from(args, EvaluateSettings)
    cert = settings_from(args, CertifySettings, evaluation=evaluation) if certified else None
    return settings_from(args, InputSettings), evaluation, settings_from(args, OutputSettings), cert


def _refuse_what_an_energy_model_does_not_take(args: argparse.Namespace) -> None:
    """With --model: the checkpoints' evaluation options, refused by name before any of them is checked (a
    checkpoint's --pilot-chains would otherwise be told about --schedule, which --model refuses too)."""
    foreign = [FLAGS[name] for name in vars(args) if name in _EVALUATE_FIELDS and name not in ENERGY_FIELDS]
    if foreign:
        takes = ", ".join(FLAGS[n] for n in ENERGY_FIELDS if n in FLAGS)
        takes += ", " + ", ".join(FLAGS[n] for n in _ENERGY_OPTIONS)
        takes += (" (with --model, --data, --train-data, --device, --dtype, --json, --overwrite, --resume-file and "
                  "--until-gap with its --max-steps, --time-budget and --plot)")  # fmt: skip
        verb = "does" if len(foreign) == 1 else "do"
        listed = ", ".join(sorted(foreign))
        die(f"{listed} {verb} not apply to an energy model (--model), whose evaluation takes {takes}")


def run(args: argparse.Namespace) -> int:
    check_environment()
    if "model" in vars(args):
        _refuse_what_an_energy_model_does_not_take(args)
    inputs, evaluation, outputs, cert_settings = _settings(args)
    announce_null_outputs(outputs, FLAGS)
    evaluation = evaluation.replace(threads=configure_threads(evaluation.threads))
    if inputs.model is not None:
        return _run_energy(args, inputs, evaluation, outputs, cert_settings)
    shown = str(inputs.checkpoint or "")
    if ".py:" in shown:  # a user's model file and factory where a checkpoint goes: --model forgotten
        die(f"{shown} names a Python file, not a checkpoint: give your own model as --model {shown}")
    if shown.endswith(".py"):
        die(f"{shown} is a Python file, not a checkpoint: give your own model as --model FILE.py:FACTORY (the "
            "function in the file that returns it)")  # fmt: skip
    energy_only = [FLAGS[name] for name in _ENERGY_OPTIONS if name in vars(args)]
    if energy_only:
        die(f"{', '.join(energy_only)} {'sets' if len(energy_only) == 1 else 'set'} the kernel of your own energy "
            "model (--model FILE.py:FACTORY); a checkpoint's evaluation chooses its own Gibbs kernels: drop "
            f"{'it' if len(energy_only) == 1 else 'them'}")  # fmt: skip
    device = torch.device(inputs.device)
    rank = 0
    if launched_by_torchrun():
        if cert_settings is not None and rank_and_world()[1] > 1:
            die("--until-gap runs in one process; run it without torchrun")
        # One process per rank (torchrun): the ranks share out the shards; only rank 0 prints and writes --json
        # (each rank writes its own --resume-file, FILE.rank<r>-of-<N>).
        device = init_from_env(device)
        rank = rank_and_world()[0]
        inputs = inputs.replace(device=str(device))
    ckpt = load_model(inputs)
    _refuse_options_an_rbm_ignores(args, ckpt.model)
    loaded = load_evaluation_inputs(inputs, evaluation.init, ckpt)
    outputs.check_against(loaded.files)
    evaluation = evaluation.replace(progress=evaluation.progress and rank == 0)
    plan = plan_evaluation(
        loaded.model, loaded.test, evaluation, train_pixel_means=loaded.train_pixel_means, labels=loaded.labels
    )
    try:
        estimate = estimate_cost(plan)
    except NonFiniteLogWeightError as e:  # its trial steps on the model went NaN: the run would too
        print(f"raise-eval: error: the cost estimate's trial steps (before the run): {e}", file=sys.stderr)
        return EXIT_FAILED
    if rank == 0 and estimate.seconds >= LONG_RUN_SECONDS:
        first = f"the first K ({evaluation.steps:,}): " if cert_settings is not None else ""
        print(f"raise-eval: {first}{estimate.format(FLAGS)}", file=sys.stderr, flush=True)
    if cert_settings is not None:

        def run_certify(settings, **keywords):
            return certify(loaded.model, loaded.test, settings, train_pixel_means=loaded.train_pixel_means,
                           labels=loaded.labels, **keywords)  # fmt: skip

        return _run_certified(run_certify, cert_settings, outputs)
    try:
        report = run_evaluation(plan, resume_file=outputs.resume_file, cost_estimate=estimate)
    except EvaluationInterrupted as stop:
        if rank != 0:
            return 130
        # Ctrl-C: no traceback; show and keep what finished.
        print("\n" + stop.report.format_table(FLAGS))
        if outputs.resume_file:
            world = rank_and_world()[1]
            kept = outputs.resume_file if world == 1 else f"{outputs.resume_file}.rank*-of-{world}"
            first_file = outputs.resume_file if world == 1 else rank_resume_file(outputs.resume_file, 0, world)
            if Path(first_file).exists():
                print(f"the run so far is kept in {kept}: run the same command to continue")
            else:  # e.g. a second Ctrl-C before the first save
                print(f"nothing was saved to {kept} yet: running the same command starts over")
        write_report(stop.report, outputs.json, None, FLAGS, "marked incomplete")
        print(f"raise-eval: interrupted during {stop.report.interrupted}", file=sys.stderr)
        return 130
    except EvaluationFailed as stop:
        if rank != 0:
            return EXIT_FAILED
        # Log-weights that turned NaN: no number of that stage; show and keep what finished, as at Ctrl-C.
        print("\n" + stop.report.format_table(FLAGS))
        write_report(stop.report, outputs.json, None, FLAGS, "marked incomplete: the stages that finished")
        print(f"raise-eval: error: {stop.report.interrupted} failed: {stop.report.error}", file=sys.stderr)
        return EXIT_FAILED
    if loaded.metadata.get("ignored_variables"):
        report.notes.append(f"ignored variables of the checkpoint: {', '.join(loaded.metadata['ignored_variables'])}")
    if rank != 0:
        return 0  # every rank holds the same report; rank 0 shows it
    print(report.format_table(FLAGS))
    write_report(report, outputs.json, None, FLAGS)
    return 0


# The options an energy model's evaluation (--model) takes; the others are refused by name, never ignored.
ENERGY_FIELDS = ("steps", "ais_chains", "raise_chains", "seed", "progress", "threads", "resume_interval")


def _run_energy(args: argparse.Namespace, inputs, evaluation, outputs, cert_settings) -> int:
    """`--model FILE.py:FACTORY`: the user's energy model through `evaluate_energy` (AIS and RAISE, the kernel its
    support takes), its table and --json."""
    from raise_eval.evaluation.energy import (
        EnergyInterrupted,
        check_base_source,
        check_kernel_options,
        evaluate_energy,
        kernel_kind,
    )
    from raise_eval.evaluation.energy_cost import estimate_energy_cost
    from raise_eval.io.energy_inputs import load_energy_inputs

    loaded = load_energy_inputs(inputs)
    outputs.check_against(loaded.files)
    check_base_source(loaded.model, loaded.train, None)  # before the cost estimate, which fits the base
    settings = settings_from(args, EnergySettings, steps=evaluation.steps, ais_chains=evaluation.ais_chains,
                             raise_chains=evaluation.raise_chains, seed=evaluation.seed)  # fmt: skip
    kind = kernel_kind(loaded.model, settings.kernel)
    # --leapfrog or --pilot-steps that this kernel would not read, given at any value
    check_kernel_options(kind, settings, given=[name for name in _ENERGY_OPTIONS if name in vars(args)])
    # Its cost before the work (the first K's, for a certified run), printed when long, as for a checkpoint.
    estimate = estimate_energy_cost(loaded.model, loaded.test, settings, kind, train_data=loaded.train)
    if estimate.seconds >= LONG_RUN_SECONDS:
        first = f"the first K ({evaluation.steps:,}): " if cert_settings is not None else ""
        print(f"raise-eval: {first}{estimate.format(FLAGS)}", file=sys.stderr, flush=True)
    if cert_settings is not None:

        own = {name: getattr(settings, name) for name in _ENERGY_OPTIONS}  # --kernel, --leapfrog, --pilot-steps

        def run_certify(settings, **keywords):
            return certify(loaded.model, loaded.test, settings, train_data=loaded.train, **own, **keywords)

        return _run_certified(run_certify, cert_settings, outputs, inputs)
    try:
        report = evaluate_energy(loaded.model, loaded.test, settings, train_data=loaded.train,
                                 progress=evaluation.progress, resume_file=outputs.resume_file,
                                 resume_interval=evaluation.resume_interval, cost_estimate=estimate)  # fmt: skip
    except NonFiniteLogWeightError as e:
        print(f"raise-eval: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except EnergyInterrupted as stop:  # Ctrl-C: no traceback; show and keep what finished, say what is kept
        if stop.partial is not None:
            stop.partial.data.update(test_file=inputs.data, train_file=inputs.train_data)
            print("\n" + stop.partial.format_table(FLAGS))
            write_report(stop.partial, outputs.json, None, FLAGS, "marked incomplete")
        if outputs.resume_file:
            if stop.saved:
                print(f"the run so far is kept in {outputs.resume_file}: run the same command to continue")
            else:  # e.g. a Ctrl-C during the pilot, before the first save
                print(f"nothing was saved to {outputs.resume_file} yet: running the same command starts over")
        print(f"raise-eval: interrupted during {stop.stage}", file=sys.stderr)
        return 130
    report.data.update(test_file=inputs.data, train_file=inputs.train_data)  # the table and JSON name the files
    print(report.format_table(FLAGS))
    write_report(report, outputs.json, None, FLAGS)
    return 0


LOG_F_FIELDS = ("log_f_method", "log_f_samples", "log_f_ais_steps", "log_f_ais_chains", "log_f_check")


def _refuse_options_an_rbm_ignores(args: argparse.Namespace, model) -> None:
    """The log f(v) options given for an RBM or a fully visible model, whose log f(v) is exact (closed form):
    refused, never ignored."""
    from raise_eval.evaluation.plan import model_family

    given_here = [FLAGS[name] for name in LOG_F_FIELDS if name in vars(args)]
    family = model_family(model) if given_here else None
    if family in ("RBM", "fully-visible"):
        whose = "an RBM's" if family == "RBM" else "a fully visible model's"
        die(
            f"{', '.join(given_here)} {'sets' if len(given_here) == 1 else 'set'} how a DBM's or DBN's log f(v) is "
            f"estimated; {whose} is exact (closed form), so nothing would use "
            f"{'it' if len(given_here) == 1 else 'them'}: "
            "drop it (nothing was computed)"
        )


def _run_certified(run_certify, settings: CertifySettings, outputs: OutputSettings, energy_inputs=None) -> int:
    """The certified run `run_certify(settings, resume_file=..., on_step=...)` (`certify` on the loaded model), its
    lines per K, tables, --json and --plot; `energy_inputs`: an energy model's `InputSettings` (the files its
    report names)."""

    def show(step) -> None:
        gap = "—" if step.gap is None else f"{step.gap:.4f}"
        state = "closed" if not step.reasons_open else "open"
        print(
            f"K = {step.steps:,}: AIS {step.ais_mean:.4f}, RAISE {step.raise_mean:.4f}, gap {gap} ({state}, "
            f"{step.seconds:.1f} s)",
            flush=True,
        )

    plot_path = outputs.plot_path
    try:
        cert = run_certify(settings, resume_file=outputs.resume_file, on_step=show)
    except CertifyInterrupted as stop:
        # Ctrl-C: no traceback; show and keep the finished Ks (JSON and plot) and the K in progress's table.
        if stop.report is not None:  # an energy model's evaluation keeps no partial report
            print("\n" + stop.report.format_table(FLAGS))
        print()
        print(stop.certificate.format_table(FLAGS))
        interrupted = " (interrupted: the finished Ks)"
        write_report(stop.certificate, outputs.json, plot_path if stop.certificate.history else None, FLAGS,
                     interrupted.strip(" ()"))  # fmt: skip
        if outputs.resume_file:
            print(f"the finished Ks (and the K in progress) are kept in {outputs.resume_file}: run the same command "
                  "to continue")  # fmt: skip
        where = f"during {stop.report.interrupted}" if stop.report is not None else f"({stop.certificate.reasons[0]})"
        print(f"raise-eval: interrupted {where}", file=sys.stderr)
        return 130
    except CertifyFailed as stop:
        # Log-weights that turned NaN at some K: show and keep the finished Ks, and the failed K's table.
        if stop.report is not None:
            print("\n" + stop.report.format_table(FLAGS))
        print()
        print(stop.certificate.format_table(FLAGS))
        write_report(stop.certificate, outputs.json, plot_path if stop.certificate.history else None, FLAGS,
                     "failed: the finished Ks")  # fmt: skip
        print(f"raise-eval: error: {stop.certificate.reasons[0]}", file=sys.stderr)
        return EXIT_FAILED
    if cert.report is not None:
        if energy_inputs is not None:  # the table and JSON name the files
            cert.report.data.update(test_file=energy_inputs.data, train_file=energy_inputs.train_data)
        print()
        print(cert.report.format_table(FLAGS))
    print()
    print(cert.format_table(FLAGS))
    write_report(cert, outputs.json, plot_path if cert.history else None, FLAGS)
    if outputs.json and plot_path is None:
        print("note: no plot of AIS and RAISE against K (matplotlib is not installed; pip install -e .[plot])")
    # The exit status carries the verdict, for scripts: 0 closed, 3 open (2 is a usage error, 130 Ctrl-C).
    return 0 if cert.closed else EXIT_OPEN
