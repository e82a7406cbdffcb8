"""Log Z along a saved training run against exact values: the trajectory command at its defaults, with adaptive links,
annealing each checkpoint in temperature, and the tracking monitor during the same training, each timed.

For a folder of one 784-20 RBM run's checkpoints (`scripts/train_rbm_paper.py mnistPCD-20 --save-trajectory DIR
--trajectory-every 500`), every checkpoint enumerable. One part per call (the machine is shared: one heavy process
at a time), each writing --out/PART.json:

- exact: exact log Z of every checkpoint (enumerating the 20 hidden units), cached in --out/exact.json; resumable
  (--exact-budget SECONDS stops after the checkpoint that passes it, a later call goes on) and, with --exact-every N,
  of every Nth checkpoint only (and the last): the other parts compare the checkpoints whose exact value is known;
- compare: the checkpoints of a `raise-eval trajectory ... --json FILE` run (--json) against the exact values known:
  mean / max error, within 0.1 nats and 2 s.e., the last checkpoint's sandwich and verdict, the stages' seconds;
- defaults: `evaluate_trajectory` at the command's defaults (the exact values given, not recomputed): every
  checkpoint's log Z against exact, the last checkpoint's sandwich and verdict, wall time;
- adaptive: the same with --links adaptive (and the SMC settings given);
- temperature: SMC along each checkpoint's own temperature path (1,000 chains in 10 replicates, resampling below
  half, K sub-steps for each K given): errors and total wall time, for the cost of the same accuracy (any RBM's
  run: a Potts or Gaussian visible layer's start is fitted to --train-data FILE, which every part of such a run needs);
- monitor: the same training (the script's model, seed and epochs) with the tracking monitor at every epoch (exact
  values off during training; the epoch models are the saved checkpoints, checked bit for bit, so their exact log Z
  come from the cache): log Z per epoch against exact and the monitor's share of training time.

    python scripts/measure_trajectory_adaptive.py runs/pcd20/traj --out results/trajectory/pcd20 --part exact
    python scripts/measure_trajectory_adaptive.py runs/pcd20/traj --out results/trajectory/pcd20 --part defaults
    python scripts/measure_trajectory_adaptive.py runs/potts_traj --out results/trajectory/potts --part compare \
        --json runs/potts_defaults.json --tag _defaults
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from _common import add_overwrite_argument, check_outputs_first, load_splits, write_output
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm

from raise_eval import LikelihoodMonitor, exact
from raise_eval.estimators.smc import smc_ladder_pass
from raise_eval.evaluation.plan import _start_biases
from raise_eval.io.trajectory_files import TrajectoryInputSettings, load_trajectory_inputs
from raise_eval.paths.trajectory import trajectory_path
from raise_eval.trajectory import TrackSettings, evaluate_trajectory


def errors_summary(estimates, truth, seconds: float, stderrs=None) -> dict:
    err = [e - t for e, t in zip(estimates, truth)]
    out = {
        "seconds": seconds, "errors": err, "mean_abs": sum(map(abs, err)) / len(err), "max_abs": max(map(abs, err)),
        "within_0.1": sum(abs(e) <= 0.1 for e in err), "count": len(err),
    }  # fmt: skip
    if stderrs is not None:
        out["within_2se"] = sum(abs(e) <= 2 * s for e, s in zip(err, stderrs))
    return out


def read_exact(cache: Path, steps: list) -> list:
    """The cached exact log Z of each checkpoint at `steps` (None where not computed yet)."""
    saved = json.loads(cache.read_text())
    by_step = dict(zip(saved["steps"], saved["log_z"]))
    return [by_step.get(step) for step in steps]


def exact_part(models, steps, cache: Path, every: int, budget: float) -> None:
    """Exact log Z of every `every`th checkpoint (and the last) not yet in `cache`, written after each one."""
    truth = read_exact(cache, steps) if cache.exists() else [None] * len(steps)
    seconds = json.loads(cache.read_text()).get("seconds", 0.0) if cache.exists() else 0.0
    wanted = sorted(set(range(0, len(models), every)) | {len(models) - 1})
    start = time.perf_counter()
    for i in wanted:
        if truth[i] is not None:
            continue
        t0 = time.perf_counter()
        truth[i] = float(exact.log_partition(models[i], max_units=20))
        seconds += time.perf_counter() - t0
        write_output(cache, json.dumps({"log_z": truth, "seconds": seconds, "steps": steps}))
        if time.perf_counter() - start > budget:
            break
    missing = sum(truth[i] is None for i in wanted)
    print(f"exact log Z: {len(wanted) - missing} of the {len(wanted)} wanted checkpoints known ({seconds:.0f} s)")


def compare_part(run: dict, exact_by_step: dict) -> dict:
    """A `trajectory --json` run's log Z at the checkpoints whose exact value is known, and its last sandwich."""
    known = [c for c in run["checkpoints"] if exact_by_step.get(c["step"]) is not None]
    out = errors_summary(
        [c["log_z"] for c in known], [exact_by_step[c["step"]] for c in known], run["timing"]["seconds"],
        [c["log_z_stderr"] for c in known],
    )  # fmt: skip
    last = run["checkpoints"][-1]
    truth = exact_by_step.get(last["step"])
    exact_ll = last["exact_mean"]
    if exact_ll is None and truth is not None and last["log_f_method"] == "exact":
        exact_ll = last["log_f_mean"] - truth  # the run was told --exact never: its log f(v) is exact all the same
    out.update(
        checkpoints=len(run["checkpoints"]), compared_steps=[c["step"] for c in known], timing=run["timing"],
        verdict=run["verdict"], interval=run["interval"], reasons=run["reasons_open"], notes=run.get("notes"),
        final={"step": last["step"], "ais": last["ais_mean"], "raise": last["raise_mean"],
               "raise_se": last["raise_stderr"], "exact": exact_ll, "log_z": last["log_z"],
               "log_z_exact": truth, "log_z_se": last["log_z_stderr"], "ess": last["ess"]},
    )  # fmt: skip
    return out


def trajectory_part(models, steps, test, means, truth, overrides: dict) -> dict:
    start = time.perf_counter()
    report = evaluate_trajectory(
        models, test, training_steps=steps, train_pixel_means=means, exact_log_z=truth, threads=1, **overrides
    )
    seconds = time.perf_counter() - start
    last = report.checkpoints[-1]
    out = errors_summary(
        [c.log_z for c in report.checkpoints], truth, seconds, [c.log_z_stderr for c in report.checkpoints]
    )
    out.update(
        settings=overrides, timing=report.timing, notes=report.notes, verdict=report.verdict, reasons=report.reasons,
        final={"ais": last.ais_mean, "raise": last.raise_mean, "raise_se": last.raise_stderr, "exact": last.exact_mean,
               "log_z_se": last.log_z_stderr, "ess": last.ess},
        anchors=report.settings.get("anchors"), num_steps=report.settings["num_steps"],
        flagged_links=[link.link for link in report.links if link.problems],
    )  # fmt: skip
    return out


def temperature_part(models, base, truth, ks) -> dict:
    out = {}
    for k in ks:
        start = time.perf_counter()
        estimates, errors = [], []
        for i, model in enumerate(models):
            path = trajectory_path([model], base)
            run = smc_ladder_pass(
                path, path.schedule(k), 1000, rungs=[k], generator=torch.Generator().manual_seed(1000 + i),
                resample_ess=0.5, replicates=10, sweeps=1,
            )  # fmt: skip
            s = run.summary(len(run.rungs) - 1)
            estimates.append(float(s.estimate))
            errors.append(float(s.stderr))
        out[str(k)] = errors_summary(estimates, truth, time.perf_counter() - start, errors)
        print(f"temperature K={k}: {out[str(k)]['mean_abs']:.3f} / {out[str(k)]['max_abs']:.3f} nats, "
              f"{out[str(k)]['seconds']:.1f} s", flush=True)  # fmt: skip
    return out


def monitor_part(models, steps, truth, args, track: dict) -> dict:
    train, test = load_splits("binarized_mnist", args.data_root, None)
    # train_rbm_paper.py's mnistPCD-20
    config = RBMTrainingConfig(20, epochs=args.epochs, learning_rate=0.01, method="pcd")
    timings = {}
    for kind in ("off", "track"):
        monitor = None
        if kind == "track":
            monitor = LikelihoodMonitor(
                test[:500], every=1, init="base-rates", train_pixel_means=train.mean(0), exact="never", seed=0,
                raise_examples=50, raise_chains=10, track=TrackSettings(**track),
            )  # fmt: skip
        start = time.perf_counter()
        model = train_rbm(train, config, generator=torch.Generator().manual_seed(0), callback=monitor)
        if monitor is not None:
            monitor.final(config.epochs - 1, model)  # RAISE back along the trajectory and the verdict
        timings[kind] = time.perf_counter() - start
    by_step = dict(zip(steps, range(len(steps))))
    updates = len(train) // config.batch_size
    records, same = [], True
    for r, model in zip(monitor.history[: len(monitor.tracker.models)], monitor.tracker.models):
        i = by_step.get((r.epoch + 1) * updates)
        if i is None:
            continue
        same &= all(torch.equal(a.to(b.dtype), b) for a, b in zip(model.weights, models[i].weights))
        records.append({"epoch": r.epoch, "log_z": r.log_z, "se": r.log_z_stderr, "exact": truth[i],
                        "error": r.log_z - truth[i], "seconds": r.seconds})  # fmt: skip
    errs = [x["error"] for x in records]
    final = monitor.history[-1]
    return {
        "track": track, "training_seconds_without": timings["off"], "training_seconds_with": timings["track"],
        "monitor_share": (timings["track"] - timings["off"]) / timings["off"],
        "monitor_seconds_recorded": sum(x["seconds"] for x in records), "records": records,
        "epoch_models_equal_checkpoints": bool(same), "mean_abs": sum(map(abs, errs)) / max(len(errs), 1),
        "max_abs": max(map(abs, errs), default=math.nan), "within_0.1": sum(abs(e) <= 0.1 for e in errs),
        "anchors": monitor.tracker.anchors,
        "final": {"log_z": final.log_z, "ais": final.ais, "raise": final.raise_, "raise_se": final.raise_se,
                  "verdict": final.verdict, "exact_log_z": truth[-1]},
    }  # fmt: skip


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--part", required=True, choices=["exact", "compare", "defaults", "adaptive", "temperature", "monitor"]
    )
    parser.add_argument("--json", default=None, help="compare: the trajectory command's --json output")
    parser.add_argument("--exact-every", type=int, default=1, help="exact: every Nth checkpoint (and the last)")
    parser.add_argument("--exact-budget", type=float, default=math.inf, help="exact: stop after this many seconds")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--data", default=None, help="the test data (NAME or FILE) when the checkpoints name none")
    parser.add_argument("--train-data", default=None, help="a typed run's training data FILE (its start)")
    parser.add_argument("--target-cess", type=float, default=0.99)
    parser.add_argument("--sweeps", type=int, default=1, help="adaptive: --rejuvenation-sweeps")
    parser.add_argument("--max-sweeps", type=int, default=None, help="adaptive: --max-sweeps")
    parser.add_argument("--temperature-steps", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--track", default='{"chains": 1000, "steps": 20, "start_steps": 100}',
                        help="the monitor's TrackSettings as JSON")  # fmt: skip
    parser.add_argument("--tag", default="", help="appended to the part's file name")
    add_overwrite_argument(parser, "the part's JSON file, and exact.json with --part exact")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    cache = out / "exact.json"
    written = cache if args.part == "exact" else out / f"{args.part}{args.tag}.json"
    if args.part == "compare" and args.json is None:
        parser.error("--part compare reads a trajectory run's --json FILE: pass --json")
    # the exact part resumes its own cache
    check_outputs_first(parser, [("--out", written)], overwrite=args.overwrite or args.part == "exact")
    inputs = TrajectoryInputSettings(
        folder=args.folder, data=args.data, data_root=args.data_root, train_data=args.train_data, dtype="float64"
    )
    loaded = load_trajectory_inputs(inputs, "base-rates")
    models, steps = loaded.models, loaded.steps
    if args.part == "exact":
        exact_part(models, steps, cache, args.exact_every, args.exact_budget)
        return
    if not cache.exists():
        parser.error(f"{cache} is missing: run --part exact first (it enumerates every checkpoint once)")
    truth = read_exact(cache, steps)
    if args.part == "compare":
        result = compare_part(json.loads(Path(args.json).read_text()), dict(zip(steps, truth)))
        write_output(written, json.dumps(result, indent=1, default=str))
        print(json.dumps({k: v for k, v in result.items() if k != "errors"}, default=str))
        return
    if None in truth:
        parser.error(f"{cache} lacks some checkpoints' exact values: run --part exact until it has them all")
    means = loaded.train_pixel_means
    if args.part == "temperature":  # any RBM's run: a typed visible layer's start is fitted to --train-data
        result = temperature_part(models, _start_biases(models[-1], "RBM", "base-rates", means), truth,
                                  args.temperature_steps)  # fmt: skip
    elif args.part == "monitor":
        result = monitor_part(models, steps, truth, args, json.loads(args.track))
    else:
        _, test = load_splits("binarized_mnist", args.data_root, None)
        overrides = {}
        if args.part == "adaptive":
            overrides = dict(links="adaptive", resample_ess=0.5, target_cess=args.target_cess,
                             rejuvenation_sweeps=args.sweeps, max_sweeps=args.max_sweeps)  # fmt: skip
        result = trajectory_part(models, steps, test, means, truth, overrides)
    result["exact_log_z"] = truth
    write_output(written, json.dumps(result, indent=1, default=str))
    print(json.dumps({k: v for k, v in result.items() if k not in ("errors", "records", "exact_log_z")}, default=str))


if __name__ == "__main__":
    main()
