"""Measure the estimators of log f(v) against exact values on a DBM or DBN whose log f(v) is enumerable.

For each estimator setting (importance sampling with S samples, per-vector AIS with K steps x C chains) it prints
the error log f-hat(v) - log f(v) per test vector (mean, 5% quantile, worst), its mean reported standard error,
the wall time, and the estimator's time over the bare matrix products it needs (the same products timed alone,
with torch.mm), so that estimators are compared at equal time and their overhead is visible.

    python scripts/measure_log_f.py checkpoints/dbn_mnist_20-500.pt --vectors 1000 \\
        --importance 500 2000 --ais 100x10 300x10 --json results/log_f/dbn.json

The test vectors are a fixed random subset (seed 0) of binarized MNIST's test split.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from raise_eval import exact, load_checkpoint, log_unnormalized_estimate
from raise_eval.io.datasets import load_dataset
from raise_eval.models.boltzmann.dbn import DBN

from _products import bare_products_seconds, random_subset
from _common import add_overwrite_argument, check_outputs_first, write_output


def error_summary(err: torch.Tensor) -> dict:
    return {
        "mean": float(err.mean()),
        "q05": float(torch.quantile(err, 0.05)),
        "median": float(err.median()),
        "worst": float(err.min()),
        "best": float(err.max()),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--vectors", type=int, default=1000, help="test vectors (a fixed random subset; default 1000)")
    p.add_argument("--importance", type=int, nargs="*", default=[500], metavar="S", help="importance sample counts")
    p.add_argument("--ais", nargs="*", default=["100x10"], metavar="KxC", help="per-vector AIS settings, K x chains")
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
    v = random_subset(test, args.vectors, seed=0)[0].to(model.dtype)
    t0 = time.perf_counter()
    truth = exact.log_unnormalized_visible(model, v, max_units=30)
    exact_seconds = time.perf_counter() - t0
    print(f"{args.checkpoint}: {model}; {v.shape[0]} test vectors; exact log f(v) in {exact_seconds:.1f} s "
          f"(mean {float(truth.mean()):.4f})")
    rows = []
    settings = [("importance", dict(num_samples=s), s, 1) for s in args.importance]
    for spec in args.ais:
        k, c = (int(x) for x in spec.lower().split("x"))
        settings.append(("ais", dict(ais_steps=k, ais_chains=c), c, k))
    width = max(model.layer_sizes)
    for method, kwargs, per_vector, steps in settings:
        g = torch.Generator().manual_seed(args.seed + 2)
        est = log_unnormalized_estimate(model, v, method=method, generator=g, **kwargs)
        err = est.log_unnormalized - truth
        # the bare products: one round per sample (importance) or per step and chain (AIS), all vectors at once
        chunk_rows = min(v.shape[0] * per_vector, max(1, 2**23 // width))
        rounds = v.shape[0] * per_vector / chunk_rows * steps
        bare = bare_products_seconds(model, chunk_rows, max(1, round(rounds)))
        row = {
            "method": method,
            **kwargs,
            "seconds": est.seconds,
            "bare_products_seconds": bare,
            "ratio_to_bare_products": est.seconds / bare,
            "error": error_summary(err),
            "mean_reported_stderr": float(est.stderr.nanmean()),
        }
        rows.append(row)
        what = f"importance S={kwargs['num_samples']}" if method == "importance" else (
            f"ais K={kwargs['ais_steps']} C={kwargs['ais_chains']}")
        e = row["error"]
        print(f"  {what:24} {est.seconds:7.1f} s (x{row['ratio_to_bare_products']:.2f} bare products)  error: mean "
              f"{e['mean']:+.4f}, 5% {e['q05']:+.4f}, worst {e['worst']:+.4f}; mean reported s.e. "
              f"{row['mean_reported_stderr']:.4f}", flush=True)
    if args.json:
        doc = {"checkpoint": args.checkpoint, "model": repr(model), "vectors": v.shape[0], "threads": args.threads,
               "family": "DBN" if isinstance(model, DBN) else "DBM", "exact_seconds": exact_seconds, "rows": rows}
        write_output(args.json, json.dumps(doc, indent=2) + "\n", what="the results")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
