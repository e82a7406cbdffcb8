"""Parallel tempering along a saved training run against exact log Z: every checkpoint's error, swap acceptance and
wall time (one thread), for the settings given.

For a folder of one 784-20 RBM run's checkpoints (`scripts/train_rbm_paper.py mnistPCD-20 --save-trajectory DIR
--trajectory-every 500`) and the exact log Z of each (`measure_trajectory_adaptive.py --part exact`'s exact.json):
the trajectory path (data base rates, then the checkpoints), a ladder of its knots with --between rungs inserted in
every link, --chains chains per rung in --replicates groups, --rounds rounds after --burn-in rounds
(`raise_eval.estimators.tempering.parallel_tempering`). Writes --out/tempering_b{between}_c{chains}_r{rounds}
_s{seed}.json.

    python scripts/measure_trajectory_tempering.py /tmp/smc44_runs/pcd20 \
        --exact results/trajectory/rbm_mnist_pcd20_adaptive/exact.json \
        --out results/trajectory/rbm_mnist_pcd20_tempering --between 3 --chains 100 --rounds 500 --burn-in 100
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from raise_eval.estimators.tempering import knot_rungs, ladder_with_rungs_between, parallel_tempering
from raise_eval.evaluation.plan import _start_biases
from raise_eval.io.trajectory_files import TrajectoryInputSettings, load_trajectory_inputs
from raise_eval.paths.trajectory import trajectory_path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--exact", required=True, help="exact.json (log_z and steps of every checkpoint)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--between", type=int, default=3, help="rungs inserted inside every link")
    parser.add_argument("--chains", type=int, default=100, help="chains per rung")
    parser.add_argument("--replicates", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--burn-in", type=int, default=100)
    parser.add_argument("--record-every", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", help="the checkpoints' dtype for the kernel (log-ratios float64)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    inputs = TrajectoryInputSettings(folder=args.folder, data="binarized_mnist", dtype=args.dtype)
    loaded = load_trajectory_inputs(inputs, "base-rates")
    models, steps = loaded.models, loaded.steps
    exact = json.loads(Path(args.exact).read_text())
    if exact.get("steps") is None:  # an exact.json of every checkpoint in training order, without their steps
        if len(exact["log_z"]) != len(steps):
            parser.error(f"{args.exact} has {len(exact['log_z'])} values and no steps; the folder has {len(steps)}")
        truth = list(exact["log_z"])
    else:
        by_step = dict(zip(exact["steps"], exact["log_z"]))
        truth = [by_step[s] for s in steps]
    base = _start_biases(models[-1], "RBM", "base-rates", loaded.train_pixel_means)
    path = trajectory_path(models, base)
    betas = ladder_with_rungs_between(path.knots, args.between)
    rungs = knot_rungs(betas, [path.knots[p] for p in path.checkpoint_points])
    start = time.perf_counter()
    result = parallel_tempering(
        path, betas, args.chains, args.rounds + args.burn_in, torch.Generator().manual_seed(args.seed),
        burn_in=args.burn_in, replicates=args.replicates, record_every=args.record_every,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    est = [float(result.log_z[r]) for r in rungs]
    se = [float(result.log_z_stderr[r]) for r in rungs]
    known = [i for i, t in enumerate(truth) if t is not None]  # exact.json may hold null for checkpoints not enumerated
    err = [est[i] - truth[i] for i in known]
    se_known = [se[i] for i in known]
    out = {
        "settings": vars(args), "rungs": len(betas), "seconds": seconds, "steps": steps, "log_z": est,
        "log_z_stderr": se, "exact_log_z": truth, "errors": err,
        "mean_abs": sum(map(abs, err)) / len(err), "max_abs": max(map(abs, err)),
        "within_0.1": sum(abs(e) <= 0.1 for e in err),
        "within_2se": sum(abs(e) <= 2 * s for e, s in zip(err, se_known)), "compared_steps": [steps[i] for i in known],
        "count": len(err), "swap_acceptance": result.swap_acceptance.tolist(),
        "swap_acceptance_min": float(result.swap_acceptance.min()),
        "chain_sweeps": len(betas) * args.chains * (args.rounds + args.burn_in),
    }  # fmt: skip
    name = f"tempering_b{args.between}_c{args.chains}_r{args.rounds}_i{args.burn_in}_s{args.seed}.json"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / name).write_text(json.dumps(out, indent=1))
    summary = {k: out[k] for k in ("rungs", "seconds", "mean_abs", "max_abs", "within_0.1", "within_2se", "count",
                                   "swap_acceptance_min", "chain_sweeps")}  # fmt: skip
    print(json.dumps(summary))
    print(" ".join(f"{steps[i]}:{e:+.2f}" for i, e in zip(known, err)))


if __name__ == "__main__":
    main()
