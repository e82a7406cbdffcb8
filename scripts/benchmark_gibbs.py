"""Time AIS steps for a 784-500 RBM against the bare matrix products one step needs.

One AIS step with block Gibbs needs two products: h W^T (to sample v given h) and v W (the hidden input of the
new v, which serves both the weight update and the next step). Everything else (sampling, softplus for the weight
update) is overhead. This script times the library's own annealing loop (`raise_eval.anneal`) and the two bare
products on the same shapes, interleaved: each repeat times one run of each back to back and takes their ratio,
so that both see the same machine load. It prints the medians; the last line is the median ratio of the AIS step
time to the bare-product time (torch.mm, float32) on the first device (CPU).

On the CPU the library sends large float32 products to oneDNN rather than torch.mm (MKL), which is faster on some
CPUs (see docs/speed.md); the script also times the two products as the library computes them, so the second
ratio printed per device is the step's cost over its own products (the elementwise work and sampling).

    python scripts/benchmark_gibbs.py                 # CPU, and CUDA when present; threads: the idle cores
    python scripts/benchmark_gibbs.py --devices cpu --chains 1000 --steps 100 --repeats 7 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from raise_eval import RBM, BoltzmannPath, anneal, linear_schedule
from raise_eval.runtime.threads import default_threads


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def benchmark(device: torch.device, chains: int, steps: int, repeats: int, dtype: torch.dtype) -> dict:
    g = torch.Generator(device=device).manual_seed(0)
    model = RBM.random(784, 500, weight_std=0.05, generator=g, dtype=dtype, device=device)
    path = BoltzmannPath(model)
    betas = linear_schedule(steps)
    state = path.sample_initial(chains, g)
    h = (torch.rand(chains, 500, generator=g, device=device, dtype=dtype) < 0.5).to(dtype)
    v = state.visible
    W = model.W

    def run_ais():
        anneal(path, state, betas, generator=g)

    def run_bare():
        for _ in range(steps):
            torch.mm(h, W.t())
            torch.mm(v, W)

    def run_library_products():  # the same two products as the library computes them (oneDNN when it takes them)
        for _ in range(steps):
            model.unscaled_input([None, h], 0)
            model.unscaled_input([v, None], 1)

    runs = {"ais": run_ais, "bare": run_bare, "library": run_library_products}
    for fn in runs.values():  # warm up
        fn()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append((time.perf_counter() - start) / steps)
    ratios = sorted(a / b for a, b in zip(times["ais"], times["bare"]))
    own = sorted(a / b for a, b in zip(times["ais"], times["library"]))
    return {
        "device": str(device),
        "ais_step_ms": 1e3 * statistics.median(times["ais"]),
        "bare_matmul_ms": 1e3 * statistics.median(times["bare"]),
        "library_matmul_ms": 1e3 * statistics.median(times["library"]),
        "ratio": statistics.median(ratios),
        "ratio_range": (ratios[0], ratios[-1]),
        "ratio_to_library_products": statistics.median(own),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--devices", nargs="+", default=None, help="devices to time (default: cpu, and cuda if present)"
    )
    parser.add_argument("--chains", type=int, default=1000, help="AIS chains in the batch (default 1000)")
    parser.add_argument("--steps", type=int, default=100, help="annealing steps per timed run (default 100)")
    parser.add_argument("--repeats", type=int, default=9, help="timed pairs of runs per device; medians are reported")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: the idle cores, as `raise-eval` chooses; torch's own default is one "
        "per core, which stalls on a core another process keeps busy)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads or default_threads(torch.get_num_threads()))
    devices = args.devices or (["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    dtype = getattr(torch, args.dtype)
    print(
        f"784-500 RBM, {args.chains} chains, {args.steps} steps x {args.repeats} repeats, {args.dtype}, "
        f"CPU threads: {torch.get_num_threads()}, torch {torch.__version__}"
    )
    results = []
    for name in devices:
        r = benchmark(torch.device(name), args.chains, args.steps, args.repeats, dtype)
        results.append(r)
        print(
            f"{r['device']:>6}: AIS step {r['ais_step_ms']:.3f} ms, bare matrix products {r['bare_matmul_ms']:.3f} ms, "
            f"ratio {r['ratio']:.2f} (range over repeats {r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f}); "
            f"the products as the library computes them {r['library_matmul_ms']:.3f} ms, "
            f"ratio {r['ratio_to_library_products']:.2f}"
        )
    print(f"ratio (AIS step / bare matrix products, {results[0]['device']}, median): {results[0]['ratio']:.2f}")


if __name__ == "__main__":
    main()
