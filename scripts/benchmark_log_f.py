"""Time per-vector AIS for a DBN's (or DBM's) log f(v) against the bare matrix products its steps need.

One step of per-vector AIS on a two-hidden-layer DBN moves the posterior over the hidden layers with the visible
vector clamped. Its irreducible work is the products of the chains' layers with the weight matrices; the unit-wise
Gibbs sweep over x_1 (the DBN's posterior does not factorize) is overhead on top of them. This script times the
library's estimator (`raise_eval.log_unnormalized_estimate`, method 'ais') and, interleaved with it in the same
process, the bare products one step needs per chain: every weight matrix once forward and once transposed, with
torch.mm on `rows` chains at once (rows = min(vectors x chains, 2^23 / the widest layer), the definition of
scripts/measure_log_f.py). Each repeat times one estimate and one run of the bare products back to back and takes
their ratio, so both see the same machine load; the last line is the median ratio. The first line names the machine
(the CPU's model, family and model: the ratio differs between CPU models, docs/deep-models.md), and the load average
before and after and the share of the CPUs other processes used while it timed are printed. The script uses only the
estimator's public interface, so it runs unchanged on older versions of the library (before/after comparisons).

On the CPU a DBN's sweep runs in the library's C kernel where a C compiler works (`raise_eval.models.native`), else in
PyTorch; the header says which. With --pytorch-too each repeat also times the estimate with the kernel turned off
(RAISE_EVAL_NATIVE=0: the PyTorch sweep, what ran before the kernel existed), between the other two, so the
before/after ratio comes from one run.

    python scripts/benchmark_log_f.py checkpoints/dbn_mnist_20-500.pt --vectors 100 --steps 20 --chains 10
    python scripts/benchmark_log_f.py --sizes 784 500 2000 --vectors 20 --steps 5 --chains 10   # random DBN
    python scripts/benchmark_log_f.py checkpoints/dbn_mnist_500-2000.pt --vectors 400 --steps 5 --pytorch-too

The test vectors are a fixed random subset (seed 0) of binarized MNIST's test split when the data root has it
(784 visible units), else random binary vectors.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from raise_eval import load_checkpoint, log_unnormalized_estimate
from raise_eval.models import DBN

from _common import positive_int
from _machine import LoadMeter, cpu_description, loadavg
from _products import bare_products_seconds, random_subset


def test_vectors(n_visible: int, count: int, data_root) -> tuple[torch.Tensor, str]:
    if n_visible == 784:
        try:
            from raise_eval.datasets import load_dataset

            test = load_dataset("binarized_mnist", "test", data_root)
            return random_subset(test, count, seed=0)[0], "binarized MNIST test vectors"
        except (FileNotFoundError, OSError, ValueError):
            pass
    g = torch.Generator().manual_seed(0)
    return (torch.rand(count, n_visible, generator=g) < 0.3).float(), "random binary vectors"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", nargs="?", default=None, help="a DBN or DBM checkpoint (else --sizes)")
    p.add_argument("--sizes", type=positive_int, nargs="+", default=None, help="layer sizes of a random DBN (weights ~ N(0, 0.1^2))")
    p.add_argument("--vectors", type=positive_int, default=100)
    p.add_argument("--steps", type=positive_int, default=20, help="K of the per-vector AIS")
    p.add_argument("--chains", type=positive_int, default=10, help="chains per vector")
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--data-root", default=None)
    p.add_argument("--pytorch-too", action="store_true",
                   help="also time each repeat with the C kernel turned off (RAISE_EVAL_NATIVE=0)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.checkpoint is not None:
        try:
            model = load_checkpoint(args.checkpoint).model
        except (OSError, ValueError) as e:
            p.error(f"cannot load {args.checkpoint}: {e}")
        if type(model).__name__ not in ("DBN", "DBM"):
            p.error(f"{args.checkpoint} holds a model of type {type(model).__name__}; this script times a DBN's "
                    "or DBM's log f(v)")
    elif args.sizes is not None:
        if len(args.sizes) < 3:
            p.error(f"--sizes: a DBN has a visible and at least two hidden layers, got {len(args.sizes)} sizes")
        model = DBN.random(args.sizes, weight_std=0.1, bias_std=1.0, generator=torch.Generator().manual_seed(0))
    else:
        p.error("give a checkpoint or --sizes")
    v, what = test_vectors(model.n_visible, args.vectors, args.data_root)
    v = v.to(model.dtype)
    chain_steps = v.shape[0] * args.chains * args.steps
    rows = min(v.shape[0] * args.chains, max(1, 2**23 // max(model.layer_sizes)))
    rounds = max(1, round(chain_steps / rows))
    machine = cpu_description()
    print(f"machine: {machine}; torch {torch.__version__}; load average before: {loadavg()}")
    print(f"{args.checkpoint or 'random'}: {model}; {v.shape[0]} {what}; K = {args.steps}, {args.chains} chains; "
          f"{args.threads} thread(s); bare products on {rows} rows x {rounds} rounds")
    print(f"sweep: {_sweep_description()}")
    # Warm up both (allocations, oneDNN primitives) on the timed shapes: all the vectors, so that the estimator's
    # chunks have their timed sizes and the library times its product routes for them here (once per process and
    # shape, about 0.3 s each for this DBN's) rather than inside the first timed repeat.
    start = time.perf_counter()
    kinds = ["AIS", "AIS (PyTorch sweep)"] if args.pytorch_too else ["AIS"]
    for kind in kinds:
        with _kernel(kind):
            log_unnormalized_estimate(model, v, method="ais", ais_steps=2, ais_chains=args.chains,
                                      generator=torch.Generator().manual_seed(0))
    bare_products_seconds(model, rows, 1)
    print(f"warm-up (K = 2 on the same vectors, and one round of bare products): {time.perf_counter() - start:.1f} s")
    times = {kind: [] for kind in kinds + ["bare"]}
    meter = LoadMeter()
    meter.start()
    for rep in range(args.repeats):
        # the kernel's estimate, the PyTorch sweep's, then the products: each repeat's ratios see the same load
        for kind in kinds:
            g = torch.Generator().manual_seed(rep)
            with _kernel(kind):
                t0 = time.perf_counter()
                log_unnormalized_estimate(model, v, method="ais", ais_steps=args.steps, ais_chains=args.chains,
                                          generator=g)
                times[kind].append(time.perf_counter() - t0)
        bare = bare_products_seconds(model, rows, rounds)
        times["bare"].append(bare)
        parts = [f"{kind} {times[kind][-1]:.3f} s ({1e6 * times[kind][-1] / chain_steps:.2f} us per chain-step)"
                 for kind in kinds]
        ratios = "; ".join(f"ratio {times[kind][-1] / bare:.2f}" + ("" if kind == "AIS" else " (PyTorch sweep)")
                           for kind in kinds)
        print(f"repeat {rep + 1}: {', '.join(parts)}, bare products {bare:.3f} s "
              f"({1e6 * bare / (rounds * rows):.2f} us per chain-step); {ratios}", flush=True)
    others = meter.stop()
    print(f"other processes used {'?' if others is None else f'{100 * others:.0f}%'} of the CPUs meanwhile; "
          f"load average after: {loadavg()}")
    ratio = [a / b for a, b in zip(times["AIS"], times["bare"])]
    result = {
        "machine": machine,
        "others_cpu_share": others,
        "model": repr(model),
        "sweep": _sweep_description(),
        "ais_seconds": statistics.median(times["AIS"]),
        "bare_seconds": statistics.median(times["bare"]),
        "ratio": statistics.median(ratio),
    }
    if args.pytorch_too:
        pytorch = [a / b for a, b in zip(times["AIS (PyTorch sweep)"], times["bare"])]
        result["pytorch_sweep_ratio"] = statistics.median(pytorch)
        result["speedup"] = statistics.median(b / a for a, b in zip(times["AIS"], times["AIS (PyTorch sweep)"]))
        print(f"median ratio with the PyTorch sweep: {result['pytorch_sweep_ratio']:.2f}; the kernel's estimate "
              f"took 1/{result['speedup']:.2f} of its time (median over the repeats)")
    print(f"median ratio (per-vector AIS for log f(v) / its bare matrix products): {result['ratio']:.2f}")
    return result


def _sweep_description() -> str:
    """Which DBN sweep the CPU takes here (older versions of the library have no native kernel)."""
    try:
        from raise_eval.models import native
    except ImportError:
        return "PyTorch (this version of the library has no native kernel)"
    if native.library() is None:
        return f"PyTorch (the C kernel is unavailable: {native.unavailable_reason()})"
    return "the C kernel (raise_eval.models.native), where the weights allow"


class _kernel:
    """Within it, the estimates run with the C kernel on ("AIS") or off ("AIS (PyTorch sweep)")."""

    def __init__(self, kind: str):
        self.off = kind != "AIS"

    def __enter__(self):
        self.saved = os.environ.get("RAISE_EVAL_NATIVE")
        if self.off:
            os.environ["RAISE_EVAL_NATIVE"] = "0"

    def __exit__(self, *exc):
        if self.saved is None:
            os.environ.pop("RAISE_EVAL_NATIVE", None)
        else:
            os.environ["RAISE_EVAL_NATIVE"] = self.saved


if __name__ == "__main__":
    main()
    sys.exit(0)
