"""Where the remaining error of log Z along a training run comes from: bias or variance, and at which beta it enters.

For a folder of one 784-20 RBM run's checkpoints (`scripts/train_rbm_paper.py mnistPCD-20 --save-trajectory DIR
--trajectory-every 500`) and the exact log Z of each (`scripts/measure_trajectory_adaptive.py --part exact`, its
exact.json), anneals chosen checkpoints in temperature from the base-rate start (the link the adaptive plan uses for
every anchored checkpoint) by SMC (resampling below half the ESS, 10 replicate groups, one sweep after a
resampling), as `measure_trajectory_adaptive.py --part temperature` does:

- chains: for each checkpoint, each number of chains and each seed, the error (estimate minus exact) and the
  replicates' standard error. An error whose sign holds across seeds and shrinks with more chains is bias (chains
  missing a mode); one whose sign changes across seeds and shrinks like 1 / sqrt(chains) is variance.
- along: for the last checkpoint listed, SMC's running log Z at intermediate inverse temperatures against exact log
  Z there (the 2^20 hidden states enumerated at each), so the beta where the error enters shows.
- variants: a few cheap changes (more sub-steps, more sweeps, more chains) at the same checkpoints, timed.

    python scripts/diagnose_trajectory_error.py runs/pcd20 \
        --exact results/trajectory/rbm_mnist_pcd20_adaptive/exact.json \
        --out results/trajectory/rbm_mnist_pcd20_diagnosis --part chains
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _common import check_outputs_first, write_output

from raise_eval import exact
from raise_eval.estimators.smc import smc_ladder_pass
from raise_eval.evaluation.plan import _start_biases
from raise_eval.io.trajectory_files import TrajectoryInputSettings, load_trajectory_inputs
from raise_eval.paths.trajectory import trajectory_path


def temperature_smc(model, base, steps: int, chains: int, seed: int, sweeps: int = 1, betas=()) -> dict:
    """One temperature SMC run to `model`; log Z-hat and its s.e. at the end and at the schedule's points nearest
    `betas`."""
    path = trajectory_path([model], base)
    schedule = path.schedule(steps)
    rungs = sorted({int(torch.argmin((schedule - b).abs())) for b in betas} | {steps})
    start = time.perf_counter()
    run = smc_ladder_pass(
        path, schedule, chains, rungs=rungs, generator=torch.Generator().manual_seed(seed),
        resample_ess=0.5, replicates=10, sweeps=sweeps,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    out = {"seconds": seconds, "rungs": []}
    for r, index in enumerate(run.rungs):
        s = run.summary(r)
        out["rungs"].append({"beta": float(schedule[index]), "log_z": float(s.estimate), "se": float(s.stderr),
                             "ess": float(run.ess[r]), "resamplings": int(run.resamplings[r])})  # fmt: skip
    out.update(log_z=out["rungs"][-1]["log_z"], se=out["rungs"][-1]["se"])
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--exact", required=True, help="exact.json of measure_trajectory_adaptive.py --part exact")
    parser.add_argument("--out", required=True)
    parser.add_argument("--part", required=True, choices=["chains", "along", "variants"])
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[14, 26, 29, 30])
    parser.add_argument("--chains", type=int, nargs="+", default=[250, 1000, 4000])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--betas", type=float, nargs="+", default=[0.5, 0.7, 0.8, 0.9, 0.95])
    parser.add_argument("--data", default=None, help="the test data (NAME or FILE) when the checkpoints name none")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    bad = [m for m in args.chains if m < 20 or m % 10]
    if bad:
        parser.error(f"--chains must be multiples of the 10 replicate groups, at least 20; got {bad}")
    if min(args.seeds, args.steps) < 1 or not all(0.0 < b < 1.0 for b in args.betas):
        parser.error("--seeds and --steps must be positive and --betas inside (0, 1)")
    out = Path(args.out) / f"{args.part}.json"
    check_outputs_first(parser, [("--out", out)], overwrite=args.overwrite)
    try:
        truth = json.loads(Path(args.exact).read_text())["log_z"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        parser.error(f"--exact {args.exact}: not an exact.json of measure_trajectory_adaptive.py ({error})")
    inputs = TrajectoryInputSettings(folder=args.folder, data=args.data, data_root=None, dtype="float64")
    loaded = load_trajectory_inputs(inputs, "base-rates")
    models = loaded.models
    if len(truth) != len(models):
        parser.error(f"--exact has {len(truth)} values for {len(models)} checkpoints: not this run's exact.json")
    if not all(0 <= i < len(models) for i in args.checkpoints):
        parser.error(f"--checkpoints are indices 0 .. {len(models) - 1} into the run's checkpoints")
    base = _start_biases(models[-1], "RBM", "base-rates", loaded.train_pixel_means)
    result = {"steps": args.steps, "checkpoints": args.checkpoints}
    if args.part == "chains":
        for i in args.checkpoints:
            for m in args.chains:
                runs = [temperature_smc(models[i], base, args.steps, m, 1000 * seed + i) for seed in range(args.seeds)]
                errors = [r["log_z"] - truth[i] for r in runs]
                result[f"{i}/{m}"] = {"errors": errors, "se": [r["se"] for r in runs],
                                      "seconds": [r["seconds"] for r in runs]}  # fmt: skip
                print(
                    f"checkpoint {i} chains {m}: errors {[round(e, 3) for e in errors]} "
                    f"s.e. {[round(r['se'], 3) for r in runs]} {sum(r['seconds'] for r in runs):.1f} s",
                    flush=True,
                )
    elif args.part == "along":
        i = args.checkpoints[-1]
        run = temperature_smc(models[i], base, args.steps, max(args.chains), 0 + i, betas=args.betas)
        path = trajectory_path([models[i]], base)
        for rung in run["rungs"]:
            beta = rung["beta"]
            t0 = time.perf_counter()
            rung["exact"] = truth[i] if beta == 1.0 else float(exact.log_partition(path.at(beta), max_units=20))
            rung["error"] = rung["log_z"] - rung["exact"]
            print(
                f"checkpoint {i} beta {beta:.3f}: SMC {rung['log_z']:.3f} (s.e. {rung['se']:.3f}, ESS "
                f"{rung['ess']:.0f}, {rung['resamplings']} resamplings) exact {rung['exact']:.3f} error "
                f"{rung['error']:+.3f} ({time.perf_counter() - t0:.1f} s exact)",
                flush=True,
            )
        result["along"] = run
    else:
        variants = {"K300 M1000 s1": (300, 1000, 1), "K300 M1000 s5": (300, 1000, 5), "K1000 M1000 s1": (1000, 1000, 1),
                    "K100 M4000 s3": (100, 4000, 3)}  # fmt: skip
        for name, (k, m, s) in variants.items():
            errors, seconds = [], 0.0
            for i in args.checkpoints:
                runs = [temperature_smc(models[i], base, k, m, 1000 * seed + i, sweeps=s) for seed in range(args.seeds)]
                errors.append([r["log_z"] - truth[i] for r in runs])
                seconds += sum(r["seconds"] for r in runs)
            flat = [abs(e) for row in errors for e in row]
            result[name] = {"errors": errors, "seconds": seconds, "max_abs": max(flat),
                            "mean_abs": sum(flat) / len(flat)}  # fmt: skip
            print(
                f"{name}: mean |err| {result[name]['mean_abs']:.3f} max {max(flat):.3f} "
                f"{[[round(e, 2) for e in row] for row in errors]} {seconds:.1f} s",
                flush=True,
            )
    write_output(out, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
