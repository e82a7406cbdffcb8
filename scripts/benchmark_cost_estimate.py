"""Compare `raise_eval.estimate_cost`'s prediction with the measured time of the same evaluation, stage by stage.

For each case the script plans the run (`plan_evaluation`), estimates it (`estimate_cost`, timing a few steps of each
stage), runs it (`run_evaluation`) and prints, per stage, the predicted and the measured seconds and their ratio
(measured / predicted), then the whole run's. Both run in this process one after the other, so they see about the
same machine load; on a shared machine the load can change between them, which the ratio then shows too.

    python scripts/benchmark_cost_estimate.py                      # the cases below (about 10 minutes on one core)
    python scripts/benchmark_cost_estimate.py --cases digits dbm   # some of them
    python scripts/benchmark_cost_estimate.py --threads 1 --json /tmp/cost.json

Cases (checkpoints/ and binarized MNIST from the data root: $RAISE_EVAL_DATA or ../shared/data):
  digits    the 64-16 RBM at the defaults (K = 1,000, 1,000 AIS chains, RAISE 100 x 20), exact log Z
  adaptive  the same RBM with the adaptive schedule (pilot 200 chains x 200 cells)
  dbm       the 784-500-1000 DBM, 500 test vectors (--test-subset 500), K = 300: per-vector AIS for log f(v)
  dbn       the 784-500-2000 DBN, 500 test vectors, K = 300: importance-sampled log f(v)
  exact     the 784-20-500 DBM, 300 test vectors, K = 200: exact log Z and log f(v) by enumeration
  rbm500    the 784-500 PCD RBM, K = 20,000, 5,000 AIS chains, RAISE 100 x 50 (only when named: minutes on a CPU;
            for a GPU, where a step's fixed cost dominates: --device cuda --cases rbm500)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from raise_eval import DBN, estimate_cost, load_checkpoint, plan_evaluation, run_evaluation
from raise_eval.io.datasets import load_dataset
from raise_eval.runtime.threads import default_threads
from _common import add_overwrite_argument, check_outputs_first, write_output

ROOT = Path(__file__).resolve().parents[1]
TIMING_KEYS = {
    "pilot": "pilot_seconds",
    "ais": "ais_seconds",
    "exact": "exact_seconds",
    "log_f": "log_f_seconds",
    "raise": "raise_seconds",
    "log_f_check": "log_f_check_seconds",
}
CASES = {
    "digits": ("rbm_digits_64-16.pt", "digits", {}),
    "adaptive": ("rbm_digits_64-16.pt", "digits", {"schedule": "adaptive"}),
    "dbm": ("dbm_mnist_500-1000.pt", "binarized_mnist", {"test_subset": 500, "steps": 300}),
    "dbn": ("dbn_mnist_500-2000.pt", "binarized_mnist", {"test_subset": 500, "steps": 300}),
    "exact": ("dbm_mnist_20-500.pt", "binarized_mnist", {"test_subset": 300, "steps": 200}),
    "rbm500": (
        "rbm_mnistPCD-500.pt",
        "binarized_mnist",
        {"steps": 20000, "ais_chains": 5000, "raise_examples": 100, "raise_chains": 50, "exact": "never"},
    ),
}
DEFAULT_CASES = ["digits", "adaptive", "dbm", "dbn", "exact"]


def run_case(name: str, steps: int | None = None, device: str = "cpu") -> dict:
    checkpoint, dataset, settings = CASES[name]
    settings = {**settings, **({} if steps is None else {"steps": steps})}
    ckpt = load_checkpoint(ROOT / "checkpoints" / checkpoint)
    model = ckpt.model.to(device=torch.device(device))
    test = load_dataset(dataset, "test").to(device)
    if ckpt.train_pixel_means is not None and not isinstance(ckpt.model, DBN):
        settings = {"train_pixel_means": ckpt.train_pixel_means, **settings}
    else:  # a DBN's base rates are its top RBM's (recognition means over training data): the uniform start here
        settings = {"init": "uniform", **settings}
    plan = plan_evaluation(model, test, **settings)
    estimate = estimate_cost(plan)
    start = time.perf_counter()
    report = run_evaluation(plan, cost_estimate=estimate)
    total = time.perf_counter() - start
    rows = []
    for stage in estimate.stages:
        measured = report.timing.get(TIMING_KEYS[stage.name])
        rows.append({"stage": stage.name, "predicted": stage.seconds, "measured": measured})
    rows.append({"stage": "total", "predicted": estimate.seconds, "measured": total})
    return {
        "case": name,
        "model": plan.report_settings["model"],
        "timing_seconds": estimate.measured_in,
        "stages": rows,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=DEFAULT_CASES)
    parser.add_argument("--device", default="cpu", help="torch device of the model and data (default: cpu)")
    parser.add_argument("--steps", type=int, help="K for every case (default: each case's own)")
    parser.add_argument("--threads", type=int, help="torch threads (default: the idle cores)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    add_overwrite_argument(parser, "the --json file")
    args = parser.parse_args(argv)
    outputs = [("--json", args.json)] if args.json else []
    check_outputs_first(parser, outputs, (), args.overwrite)

    torch.set_num_threads(args.threads or default_threads(torch.get_num_threads()))
    results = []
    print(f"{args.device}, threads {torch.get_num_threads()}; ratio = measured / predicted")
    print(f"{'case':10}{'stage':14}{'predicted s':>13}{'measured s':>12}{'ratio':>8}")
    for name in args.cases:
        result = run_case(name, args.steps, args.device)
        results.append(result)
        for row in result["stages"]:
            p, m = row["predicted"], row["measured"]
            ratio = f"{m / p:8.2f}" if p and m is not None else f"{'':8}"
            print(f"{name:10}{row['stage']:14}{p:13.2f}{m if m is not None else float('nan'):12.2f}{ratio}")
        print(f"{name:10}{'(estimating took ' + format(result['timing_seconds'], '.2f') + ' s)'}", flush=True)
    if args.json:
        write_output(args.json, json.dumps(results, indent=1), what="the results")
    return results


if __name__ == "__main__":
    main()
