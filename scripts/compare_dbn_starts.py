"""RAISE minus the exact log-likelihood on a DBN whose log p(v) is enumerable, for unrolled and heated starts.

For a random subset of the test set (seed `--seed`) it computes the exact log p(v) of each vector (enumeration over
the narrow layer), then runs RAISE (`raise_eval.raise_log_likelihood`) at each K with each DBN start, and prints
per K and start: the mean over the vectors of RAISE_i - exact_i (RAISE's estimate of each vector, log mean w over
its chains, minus the truth) with its standard error over vectors, the most negative difference, and the wall time.
The schedule is linear from the top RBM's data base rates (the recognition means of the training set, as
`raise-eval evaluate --init base-rates` starts a DBN), as in the certified runs.

    python scripts/compare_dbn_starts.py checkpoints/dbn_mnist_20-500.pt --vectors 100 --chains 20 \\
        --steps 1000 2000 4000 8000 16000 --json results/dbn_starts/dbn_mnist_20-500.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch

from raise_eval import (
    BoltzmannPath,
    data_base_rates,
    exact,
    linear_schedule,
    load_checkpoint,
    load_dataset,
    raise_log_likelihood,
    recognition_means,
)

from _products import random_subset
from _common import add_overwrite_argument, check_outputs_first, write_output


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--vectors", type=int, default=100, help="test vectors (a random subset)")
    p.add_argument("--chains", type=int, default=20, help="RAISE chains per vector")
    p.add_argument("--steps", type=int, nargs="+", default=[1000, 2000, 4000, 8000, 16000])
    p.add_argument("--starts", nargs="+", default=["unrolled", "heated"], choices=["unrolled", "heated"])
    p.add_argument("--init", choices=["base-rates", "uniform"], default="base-rates")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-root", default=None)
    p.add_argument("--json", default=None)
    add_overwrite_argument(p, "the --json file")
    args = p.parse_args(argv)
    outputs = [("--json", args.json)] if args.json else []
    check_outputs_first(p, outputs, [("the checkpoint", args.checkpoint)], args.overwrite)

    torch.set_num_threads(args.threads)
    model = load_checkpoint(args.checkpoint).model
    test = load_dataset("binarized_mnist", "test", args.data_root)
    v, pick = random_subset(test, args.vectors, args.seed)
    v = v.to(model.dtype)
    base = None
    if args.init == "base-rates":
        train = load_dataset("binarized_mnist", "train", args.data_root)
        base = data_base_rates(model.top, recognition_means(model, train).unsqueeze(0))
    path = BoltzmannPath(model.top, base)
    t0 = time.perf_counter()
    truth = exact.log_likelihood(model, v, max_units=30)
    print(f"{args.checkpoint}: {model}; {v.shape[0]} test vectors (seed {args.seed}), {args.chains} chains each; "
          f"exact mean log p(v) {float(truth.mean()):.4f} ({time.perf_counter() - t0:.1f} s); init {args.init}; "
          f"{args.threads} thread(s)", flush=True)
    print(f"{'K':>6} {'start':>9} {'RAISE - exact':>14} {'s.e.':>7} {'worst':>8} {'seconds':>8}")
    rows = []
    for k in args.steps:
        for start in args.starts:
            g = torch.Generator().manual_seed(args.seed + k)
            began = time.perf_counter()
            r = raise_log_likelihood(path, v, linear_schedule(k), args.chains, generator=g, unroll=model,
                                     dbn_start=start)  # fmt: skip
            seconds = time.perf_counter() - began
            diff = r.log_likelihood - truth
            row = {
                "steps": k,
                "start": start,
                "raise_minus_exact": float(diff.mean()),
                "stderr": float(diff.std() / math.sqrt(diff.numel())),
                "worst": float(diff.min()),
                "best": float(diff.max()),
                "raise_mean": r.mean,
                "exact_mean": float(truth.mean()),
                "seconds": seconds,
            }
            rows.append(row)
            print(f"{k:>6} {start:>9} {row['raise_minus_exact']:>+14.4f} {row['stderr']:>7.4f} {row['worst']:>+8.3f} "
                  f"{seconds:>8.1f}", flush=True)
    if args.json:
        doc = {"checkpoint": args.checkpoint, "model": repr(model), "vectors": v.shape[0], "chains": args.chains,
               "seed": args.seed, "init": args.init, "threads": args.threads, "test_indices": pick.tolist(),
               "rows": rows}  # fmt: skip
        write_output(args.json, json.dumps(doc, indent=2) + "\n", what="the results")
        print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
