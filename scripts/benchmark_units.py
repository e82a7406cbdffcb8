"""Time AIS steps of RBMs of typed layers against the bare matrix products one step needs, beside the binary RBM's
ratio measured the same way in the same run.

Models (random weights, float32, `--chains` chains):
- potts: a Potts-Bernoulli RBM, L = 100 sites with q = 21 states (one-hot, 2,100 visible entries), 200 hidden units;
- gaussian: a 784-500 Gaussian-Bernoulli RBM;
- binary: the 784-500 binary RBM of scripts/benchmark_gibbs.py (its own fast path, `BoltzmannPath`).

One AIS step with block Gibbs needs two products, h W^T (the visible layer's input) and v W (the hidden layer's
input of the new v, which serves the weight update and the next step); everything else (sampling the categorical,
Gaussian or binary units, the log-normalizers of the weight update) is overhead. Each repeat times the library's
annealing loop (`raise_eval.anneal`) and the two bare torch.mm products on the same shapes back to back, so that
both see the same machine load; the medians of the per-repeat ratios are printed, the last lines per model.

    python scripts/benchmark_units.py --threads 1
    python scripts/benchmark_units.py --models potts gaussian --chains 1000 --steps 50 --repeats 7 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from raise_eval.models.boltzmann.mixed import random_mixed_machine
from raise_eval.models.boltzmann.units import BernoulliLayer, CategoricalLayer, GaussianLayer

from raise_eval import RBM, BoltzmannPath, MixedPath, anneal, linear_schedule

MODELS = ("potts", "gaussian", "binary")


def build(name: str, generator: torch.Generator):
    """(path, description, width of the visible layer, width of the hidden layer, W)."""
    if name == "binary":
        model = RBM.random(784, 500, weight_std=0.05, generator=generator)
        return BoltzmannPath(model), "binary 784-500", 784, 500, model.W
    if name == "potts":
        layers = [CategoricalLayer(100, 21), BernoulliLayer(200)]
    else:
        layers = [GaussianLayer(784), BernoulliLayer(500)]
    model = random_mixed_machine(layers, weight_std=0.05, bias_std=0.5, generator=generator)
    return MixedPath(model), model.describe(), layers[0].width, layers[1].width, model.weights[0]


def benchmark(name: str, chains: int, steps: int, repeats: int) -> dict:
    g = torch.Generator().manual_seed(0)
    path, description, n_v, n_h, W = build(name, g)
    betas = linear_schedule(steps)
    state = path.sample_initial(chains, g)
    h = (torch.rand(chains, n_h, generator=g) < 0.5).float()
    v = state.visible.contiguous()

    def run_ais():
        anneal(path, state, betas, generator=g)

    def run_bare():
        for _ in range(steps):
            torch.mm(h, W.t())
            torch.mm(v, W)

    runs = {"ais": run_ais, "bare": run_bare}
    for fn in runs.values():  # warm up
        fn()
    times = {k: [] for k in runs}
    for _ in range(repeats):
        for k, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - start) / steps)
    ratios = sorted(a / b for a, b in zip(times["ais"], times["bare"]))
    return {
        "model": description,
        "ais_step_ms": 1e3 * statistics.median(times["ais"]),
        "bare_matmul_ms": 1e3 * statistics.median(times["bare"]),
        "ratio": statistics.median(ratios),
        "ratio_range": (ratios[0], ratios[-1]),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=50, help="annealing steps per timed run")
    parser.add_argument("--repeats", type=int, default=7, help="timed pairs of runs per model; medians are reported")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"{args.chains} chains, {args.steps} steps x {args.repeats} repeats, float32, CPU threads "
        f"{torch.get_num_threads()}, torch {torch.__version__}"
    )
    for name in args.models:
        r = benchmark(name, args.chains, args.steps, args.repeats)
        print(
            f"{r['model']}: AIS step {r['ais_step_ms']:.2f} ms, bare products {r['bare_matmul_ms']:.2f} ms, ratio "
            f"{r['ratio']:.2f} (range {r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
