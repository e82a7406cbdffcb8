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

    python scripts/benchmark_log_f.py checkpoints/dbn_mnist_20-500.pt --vectors 100 --steps 20 --chains 10
    python scripts/benchmark_log_f.py --sizes 784 500 2000 --vectors 20 --steps 5 --chains 10   # random DBN

The test vectors are a fixed random subset (seed 0) of binarized MNIST's test split when the data root has it
(784 visible units), else random binary vectors.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from raise_eval import load_checkpoint, log_unnormalized_estimate
from raise_eval.models import DBN

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
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="layer sizes of a random DBN (weights ~ N(0, 0.1^2))")
    p.add_argument("--vectors", type=int, default=100)
    p.add_argument("--steps", type=int, default=20, help="K of the per-vector AIS")
    p.add_argument("--chains", type=int, default=10, help="chains per vector")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-root", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.checkpoint is not None:
        model = load_checkpoint(args.checkpoint).model
    elif args.sizes is not None:
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
    # Warm up both (allocations, oneDNN primitives) on the timed shapes: all the vectors, so that the estimator's
    # chunks have their timed sizes and the library times its product routes for them here (once per process and
    # shape, about 0.3 s each for this DBN's) rather than inside the first timed repeat.
    start = time.perf_counter()
    log_unnormalized_estimate(model, v, method="ais", ais_steps=2, ais_chains=args.chains,
                              generator=torch.Generator().manual_seed(0))
    bare_products_seconds(model, rows, 1)
    print(f"warm-up (K = 2 on the same vectors, and one round of bare products): {time.perf_counter() - start:.1f} s")
    ais_times, bare_times, ratios = [], [], []
    meter = LoadMeter()
    meter.start()
    for rep in range(args.repeats):
        g = torch.Generator().manual_seed(rep)
        t0 = time.perf_counter()
        log_unnormalized_estimate(model, v, method="ais", ais_steps=args.steps, ais_chains=args.chains, generator=g)
        ais = time.perf_counter() - t0
        bare = bare_products_seconds(model, rows, rounds)
        ais_times.append(ais)
        bare_times.append(bare)
        ratios.append(ais / bare)
        print(f"repeat {rep + 1}: AIS {ais:.3f} s ({1e6 * ais / chain_steps:.2f} us per chain-step), bare products "
              f"{bare:.3f} s ({1e6 * bare / (rounds * rows):.2f} us per chain-step); ratio {ais / bare:.2f}", flush=True)
    others = meter.stop()
    print(f"other processes used {'?' if others is None else f'{100 * others:.0f}%'} of the CPUs meanwhile; "
          f"load average after: {loadavg()}")
    result = {
        "machine": machine,
        "others_cpu_share": others,
        "model": repr(model),
        "ais_seconds": statistics.median(ais_times),
        "bare_seconds": statistics.median(bare_times),
        "ratio": statistics.median(ratios),
    }
    print(f"median ratio (per-vector AIS for log f(v) / its bare matrix products): {result['ratio']:.2f}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
