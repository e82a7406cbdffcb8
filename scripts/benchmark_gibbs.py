"""Time AIS steps for a 784-500 RBM against the bare matrix products one step needs, at 1 and 2 threads.

One AIS step with block Gibbs needs two products: h W^T (to sample v given h) and v W (the hidden input of the
new v, which serves both the weight update and the next step). Everything else (sampling, the weight update's
transcendental functions) is overhead. For each thread count this script times, interleaved (each repeat runs every
kind once, back to back, so that all see the same machine load):

- the library's annealing loop (`raise_eval.anneal`), its products on the route the library chose by timing
  (`raise_eval.runtime.product_routes`; with --all-routes also forced through each route);
- the two bare products through torch.mm (MKL) and through oneDNN (`torch.ops.mkldnn._linear_pointwise`);
- the two products as the library computes them (its chosen route).

It prints the medians, the ratios of the step to each pair of bare products (median and range over the repeats),
the route the library chose with the timings it chose by, and the machine: CPU model and family/model from lscpu,
/proc/loadavg before and after, and the share of the CPUs that other processes used while it ran (from /proc/stat,
less this process's own time). With --breakdown it also profiles the step (torch.profiler) into products, random
numbers, transcendental functions, other ops and the Python between them. The last line is the headline: the step
over the bare torch.mm products at the first thread count.

    python scripts/benchmark_gibbs.py                              # CPU at 1 and 2 threads
    python scripts/benchmark_gibbs.py --threads 1 --all-routes --breakdown
    python scripts/benchmark_gibbs.py --devices cuda               # CUDA: the step against torch.mm
    python scripts/benchmark_gibbs.py --threads 1 --units potts gaussian   # typed layers too, in the same run
    python scripts/benchmark_gibbs.py --threads 1 --model checkpoints/rbm_mnistCD25-500.pt --beta 0.9

The random RBM's states hold about as many ones as zeros at every beta; a trained model's can be sparse (MNIST's
pixels: about 12% on at beta 0.9), which the library's table route turns into fewer lookups. --model times the
step of a trained RBM instead, and --beta B the steps of a long run near B: the chains are first annealed from the
base to B (200 steps, untimed), then each timed run takes --steps steps of 1e-4 (the spacing of a K = 10,000 linear
schedule) from B on; the library's own products are timed on the states reached there.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from contextlib import nullcontext

import torch
from _common import positive_int
from _machine import LoadMeter, cpu_description, loadavg
from raise_eval.models import sampling
from raise_eval.models.boltzmann import layered, products

from raise_eval import RBM, BoltzmannPath, anneal, linear_schedule, load_checkpoint, native
from raise_eval.runtime import product_routes


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------------- timing
def make_rbm(model_path, g: torch.Generator, dtype: torch.dtype, device: torch.device):
    """The random 784-500 RBM (weights N(0, 0.05^2)), or the RBM saved at `model_path`."""
    if model_path is None:
        return RBM.random(784, 500, weight_std=0.05, generator=g, dtype=dtype, device=device)
    model = load_checkpoint(model_path)
    model = getattr(model, "model", model)
    if not isinstance(model, RBM):
        raise SystemExit(f"--model {model_path}: expected an RBM of binary units, got {type(model).__name__}")
    return model.to(device=device, dtype=dtype)


def timed_path(model, chains: int, steps: int, beta, g: torch.Generator):
    """(path, the state the timed runs start from, their betas): 0 to 1 in `steps` steps, or `steps` steps of 1e-4
    from `beta` after an untimed annealing of 200 steps from the base to it."""
    path = BoltzmannPath(model)
    state = path.sample_initial(chains, g)
    if beta is None:
        return path, state, linear_schedule(steps)
    state, _ = anneal(path, state, torch.linspace(0.0, beta, 201, dtype=torch.float64), generator=g)
    end = min(1.0, beta + 1e-4 * steps)
    return path, state, torch.linspace(end - 1e-4 * steps, end, steps + 1, dtype=torch.float64)


def benchmark(
    device: torch.device,
    chains: int,
    steps: int,
    repeats: int,
    dtype: torch.dtype,
    all_routes: bool,
    model_path=None,
    beta=None,
) -> dict:
    g = torch.Generator(device=device).manual_seed(0)
    model = make_rbm(model_path, g, dtype, device)
    path, state, betas = timed_path(model, chains, steps, beta, g)
    n_visible, n_hidden = model.layer_sizes
    # the states of the timed runs' start: a visible sample and a hidden sample given it (binary, as in a step)
    v = state.visible.contiguous()
    h = torch.rand(chains, n_hidden, generator=g, device=device, dtype=dtype) < model.layer_probs([v, None], 1)
    h = h.to(dtype)
    W = model.W
    cpu = device.type == "cpu"
    onednn = cpu and dtype == torch.float32 and products.onednn_available()

    def ais(route=None):
        def run():
            with product_routes.forced_route(route) if route else nullcontext():
                anneal(path, state, betas, generator=g)

        return run

    def bare_mm():
        for _ in range(steps):
            torch.mm(h, W.t())
            torch.mm(v, W)

    def bare_onednn():
        for _ in range(steps):
            torch.ops.mkldnn._linear_pointwise(h, W, None, "none", [], "")
            torch.ops.mkldnn._linear_pointwise(v, W.t(), None, "none", [], "")

    def own_products():  # the two products as the library computes them (its chosen route)
        for _ in range(steps):
            model.unscaled_input([None, h], 0, sampled=True)
            model.unscaled_input([v, None], 1, sampled=True)

    runs = {"ais": ais()}
    if cpu and all_routes:
        for route in products.ROUTES:
            if route != "onednn" or onednn:
                runs[f"ais[{route}]"] = ais(route)
    runs["mm"] = bare_mm
    if onednn:
        runs["onednn"] = bare_onednn
    runs["own"] = own_products
    for fn in runs.values():  # warm up (and let the library time its routes)
        fn()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append((time.perf_counter() - start) / steps)
    result = {"device": str(device), "ms": {k: 1e3 * statistics.median(t) for k, t in times.items()}, "ratios": {}}
    for base in ("mm", "onednn", "own"):
        if base in times:
            ratios = sorted(a / b for a, b in zip(times["ais"], times[base]))
            result["ratios"][base] = (statistics.median(ratios), ratios[0], ratios[-1])
    shapes = {((n_hidden,), n_visible), ((n_visible,), n_hidden)}
    threads = torch.get_num_threads()
    # The routes the plain runs took: timed at start, or forced for the whole process (RAISE_EVAL_PRODUCT_ROUTE; the
    # --all-routes runs force each route in turn, and those choices are not the plain runs')
    forced = product_routes.requested_route()
    routes = {}
    for c in product_routes.route_choices():
        if (c.inner, c.cols) not in shapes or not c.binary or c.threads != threads:
            continue
        if forced is None:
            plain = c.how == "measured"
        else:
            plain = c.how == "forced-unavailable" or (c.how == "forced" and c.route == forced)
        if plain:
            routes.setdefault((c.inner, c.cols), c)
    result["routes"] = list(routes.values())
    return result


# ------------------------------------------------------------------------------------------- CUDA loops
CUDA_LOOPS = {
    "eager loop": {"programs": "never"},
    "step program, graphs": {"fuse": "none"},
    "graphs, half-split products": {"products": "half-split", "fuse": "none"},
    "graphs, compiled elementwise": {"fuse": "compile"},
    "graphs, half-split, compiled": {"products": "half-split", "fuse": "compile"},
    "graphs, TF32-split, compiled": {"products": "tf32-split", "fuse": "compile"},
    "graphs, half path, compiled": {"products": "half-path", "fuse": "compile"},
    "graphs, TF32 path, compiled": {"products": "tf32-path", "fuse": "compile"},
}
HEADLINE = "graphs, compiled elementwise"


def benchmark_cuda(device, chains: int, steps: int, repeats: int, dtype: torch.dtype, model_path=None) -> dict:
    """Milliseconds per AIS step on CUDA for each way of running the loop (CUDA_LOOPS), each the marginal cost of a
    step: (time of 5 * steps - time of steps) / (4 * steps), so that what a run pays once (a graph's capture, the
    first eager step) is left out; and the bare products: two float32 torch.mm, and the two half-split products
    (bfloat16 states times the stacked bfloat16 terms of W, `kernels.split_products`)."""
    from raise_eval.kernels.split_products import (
        HALF,
        HALF_PATH,
        SplitWeight,
        out_dtype_products_available,
        split_terms,
    )
    from raise_eval.step_programs import loop_options

    g = torch.Generator(device=device).manual_seed(0)
    model = make_rbm(model_path, g, dtype, device)
    path = BoltzmannPath(model)
    state = path.sample_initial(chains, g)
    n_visible, n_hidden = model.layer_sizes
    v = state.visible.contiguous()
    h = (torch.rand(chains, n_hidden, generator=g, device=device, dtype=dtype) < 0.5).to(dtype)
    W = model.W
    loops = dict(CUDA_LOOPS)
    split = dtype == torch.float32 and out_dtype_products_available(device)
    if not split:
        loops = {k: o for k, o in loops.items() if o.get("products") != "half-split"}
    half_path = dtype == torch.float32 and out_dtype_products_available(device, HALF_PATH)
    if not half_path:
        loops = {k: o for k, o in loops.items() if o.get("products") != "half-path"}
    if dtype != torch.float32:
        loops = {k: o for k, o in loops.items() if o.get("products") != "tf32-path"}

    def ais(options, n):
        def run():
            with loop_options(**options):
                anneal(path, state, linear_schedule(n), generator=g)

        return run

    def bare(n):
        def run():
            for _ in range(n):
                torch.mm(h, W.t())
                torch.mm(v, W)

        return run

    runs = {}
    for name, options in loops.items():
        runs[name] = (ais(options, steps), ais(options, 5 * steps))
    runs["bare torch.mm products"] = (bare(steps), bare(5 * steps))
    if split:
        sw = SplitWeight(split_terms(W, 3))
        hs, vs = h.to(HALF).repeat(1, 3), v.to(HALF).repeat(1, 3)

        def bare_split(n):
            def run():
                for _ in range(n):
                    torch.mm(hs, sw.backward, out_dtype=torch.float32)
                    torch.mm(vs, sw.forward, out_dtype=torch.float32)

            return run

        runs["bare half-split products"] = (bare_split(steps), bare_split(5 * steps))
    hb, vb, Wb = h.to(HALF), v.to(HALF), W.to(HALF)

    def bare_bf16(n):  # bfloat16 in and out: not what the library may use (its rounding), the speed of one term
        def run():
            for _ in range(n):
                torch.mm(hb, Wb.t())
                torch.mm(vb, Wb)

        return run

    def bare_tf32(n):  # float32 through TF32 tensor cores: the speed of one term (W rounded to 10 bits)
        def run():
            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                bare(n)()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before

        return run

    def bare_bf16_f32(n):  # one bfloat16 term into a float32 result (out_dtype): is out_dtype itself the slow part?
        def run():
            for _ in range(n):
                torch.mm(hb, Wb.t(), out_dtype=torch.float32)
                torch.mm(vb, Wb, out_dtype=torch.float32)

        return run

    hf, vf, Wf = h.to(HALF_PATH), v.to(HALF_PATH), W.to(HALF_PATH)

    def bare_f16_f32(n):  # the half path's products: float16 states times fp16(W) into float32 results
        def run():
            for _ in range(n):
                torch.mm(hf, Wf.t(), out_dtype=torch.float32)
                torch.mm(vf, Wf, out_dtype=torch.float32)

        return run

    h2, v2 = h.repeat(1, 2), v.repeat(1, 2)
    W2 = torch.cat([W, W], 0)  # (2 n_visible, n_hidden): the shapes of a two-term TF32 split (hi + lo)
    W2t = torch.cat([W.t(), W.t()], 0).contiguous()

    def bare_tf32_two_terms(n):  # the speed of a two-term TF32 split, stacked along the inner dimension as half-split
        def run():
            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                for _ in range(n):
                    torch.mm(h2, W2t)
                    torch.mm(v2, W2)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before

        return run

    runs["bare bfloat16 products (bf16 out)"] = (bare_bf16(steps), bare_bf16(5 * steps))
    if split:
        runs["bare bfloat16 products, float32 out"] = (bare_bf16_f32(steps), bare_bf16_f32(5 * steps))
    if half_path:
        runs["bare float16 products, float32 out (half path)"] = (bare_f16_f32(steps), bare_f16_f32(5 * steps))
    runs["bare TF32 products"] = (bare_tf32(steps), bare_tf32(5 * steps))
    runs["bare TF32 products, two terms stacked"] = (bare_tf32_two_terms(steps), bare_tf32_two_terms(5 * steps))
    failed = {}
    for name, pair in list(runs.items()):  # warm up (compiles, cuBLAS heuristics); a loop that cannot run is named
        try:
            for fn in pair:
                fn()
        except Exception as e:  # noqa: BLE001 (a benchmark reports what failed and goes on)
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            del runs[name]
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (short, long) in runs.items():
            seconds = []
            for fn in (short, long):
                _sync(device)
                start = time.perf_counter()
                fn()
                _sync(device)
                seconds.append(time.perf_counter() - start)
            times[name].append((seconds[1] - seconds[0]) / (4 * steps))
    ms = {k: 1e3 * statistics.median(t) for k, t in times.items()}
    ratios = {}
    for name in runs:
        if name in loops:
            r = sorted(a / b for a, b in zip(times[name], times["bare torch.mm products"]))
            ratios[name] = (statistics.median(r), r[0], r[-1])
    return {"device": str(device), "ms": ms, "ratios": ratios, "failed": failed}


# ------------------------------------------------------------------------------------------- breakdown
_PRODUCTS_LABEL = "raise_eval::products"
_NATIVE_LABEL = "raise_eval::native elementwise"
_TRANSCENDENTAL = ("sigmoid", "expm1", "log1p", "softplus", "aten::exp", "aten::log", "tanh")
_RANDOM = ("random_", "uniform_", "aten::rand", "bernoulli", "normal_")


def breakdown(chains: int, steps: int, dtype: torch.dtype, model_path=None, beta=None) -> dict:
    """Milliseconds per AIS step (CPU) in: the products (everything inside the library's product routine, its
    table lookups and their index computation included), random numbers, transcendental functions, the native
    elementwise kernels (`raise_eval.models.native`'s step.c: the Philox draws, the weight update), other
    ops, and the Python between ops (the step's wall time less all ops), from torch.profiler's self times."""
    g = torch.Generator().manual_seed(0)
    model = make_rbm(model_path, g, dtype, torch.device("cpu"))
    path, state, betas = timed_path(model, chains, steps, beta, g)
    originals = [
        (layered, "neighbour_product", _PRODUCTS_LABEL),
        (layered, "_native_log1p_expm1", _NATIVE_LABEL),
        (sampling, "_native_sample", _NATIVE_LABEL),
    ]

    def labelled(function, label):
        def run(*args, **kwargs):
            with torch.profiler.record_function(label):
                return function(*args, **kwargs)

        run.__wrapped_function__ = function
        return run

    anneal(path, state, betas, generator=g)  # warm up
    for module, name, label in originals:
        setattr(module, name, labelled(getattr(module, name), label))
    try:
        best = None
        for _ in range(3):  # the quietest of three profiled runs
            start = time.perf_counter()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                anneal(path, state, betas, generator=g)
            wall = 1e3 * (time.perf_counter() - start) / steps
            if best is None or wall < best[0]:
                best = (wall, prof)
    finally:
        for module, name, _ in originals:
            setattr(module, name, getattr(module, name).__wrapped_function__)
    wall, prof = best
    parts = collections.Counter()
    for event in prof.events():
        parent, inside = event.cpu_parent, False
        while parent is not None:
            inside = inside or parent.name in (_PRODUCTS_LABEL, _NATIVE_LABEL)
            parent = parent.cpu_parent
        if inside:
            continue
        name = event.name
        if name == _PRODUCTS_LABEL:
            parts["products"] += event.cpu_time_total
        elif name == _NATIVE_LABEL:
            parts["native"] += event.cpu_time_total
        elif any(k in name for k in _RANDOM):
            parts["random"] += event.self_cpu_time_total
        elif any(k in name for k in _TRANSCENDENTAL):
            parts["transcendental"] += event.self_cpu_time_total
        else:
            parts["other ops"] += event.self_cpu_time_total
    result = {k: parts[k] / 1e3 / steps for k in ("products", "random", "transcendental", "native", "other ops")}
    result["python"] = max(0.0, wall - sum(result.values()))
    result["step (profiled)"] = wall
    return result


# ------------------------------------------------------------------------------------------- main
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", nargs="+", default=["cpu"], help="devices to time (default: cpu)")
    parser.add_argument("--chains", type=positive_int, default=1000, help="AIS chains in the batch (default 1000)")
    parser.add_argument("--steps", type=positive_int, default=50, help="annealing steps per timed run (default 50)")
    parser.add_argument(
        "--repeats", type=positive_int, default=7,
        help="timed rounds per thread count; medians are reported (default 7)",
    )
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument(
        "--threads",
        type=positive_int,
        nargs="+",
        default=[1, 2],
        help="torch CPU thread counts to time, in one run (default: 1 2); with another process busy on a core, "
        "two threads stall on it",
    )
    parser.add_argument(
        "--all-routes", action="store_true", help="also time the step with its products forced through each route"
    )
    parser.add_argument("--breakdown", action="store_true", help="also profile the step into its parts (CPU)")
    parser.add_argument(
        "--units",
        nargs="+",
        choices=["potts", "gaussian"],
        default=[],
        help="also time RBMs of typed layers in the same run, at the first thread count: potts (L = 100 sites, "
        "q = 21, 200 hidden) and gaussian (784-500 Gaussian-Bernoulli), each step against its two bare torch.mm "
        "products (scripts/benchmark_units.py's measurement)",
    )
    parser.add_argument(
        "--model",
        metavar="PATH",
        help="time this RBM checkpoint (binary units; .pt or .npz) instead of the random 784-500 RBM",
    )
    parser.add_argument(
        "--beta",
        type=float,
        help="time steps near this inverse temperature in [0, 1] (chains annealed there first, untimed; steps of "
        "1e-4 from it) instead of --steps steps from 0 to 1",
    )
    args = parser.parse_args(argv)
    if args.beta is not None and not 0.0 <= args.beta <= 1.0:
        parser.error(f"--beta {args.beta}: give an inverse temperature between 0 and 1")
    dtype = getattr(torch, args.dtype)
    print(f"machine: {cpu_description()}; torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}")
    kernels = native.report()
    print(
        f"C kernels (raise_eval.models.native): the step's draws and weight update {kernels['step']}; "
        f"the amx product route {kernels['amx_products']}"
    )
    sizes = "-".join(str(n) for n in make_rbm(args.model, torch.Generator(), dtype, torch.device("cpu")).layer_sizes)
    what = f"{sizes} RBM {args.model}" if args.model else "random 784-500 RBM"
    where = f"{args.steps} steps of 1e-4 from beta {args.beta}" if args.beta is not None else f"{args.steps} steps"
    print(
        f"{what}, {args.chains} chains, {where} x {args.repeats} repeats, {args.dtype}; "
        f"load average before: {loadavg()}"
    )
    headline = None
    for name in args.devices:
        device = torch.device(name)
        if device.type == "cuda":
            r = benchmark_cuda(device, args.chains, args.steps, args.repeats, dtype, args.model)
            print(f"{r['device']} ({torch.cuda.get_device_name(device)}), ms per step (marginal: runs of "
                  f"{5 * args.steps} less runs of {args.steps} steps):")  # fmt: skip
            for label, ms in r["ms"].items():
                if label in r["ratios"]:
                    med, lo, hi = r["ratios"][label]
                    print(f"  AIS step, {label:30s} {ms:7.3f} ms: step / bare torch.mm {med:5.2f} ({lo:.2f}-{hi:.2f})")
                else:
                    print(f"  {label:40s} {ms:7.3f} ms")
            for label, why in r["failed"].items():
                print(f"  {label}: could not run ({why})")
            best = HEADLINE if HEADLINE in r["ratios"] else "step program, graphs"
            if headline is None and best in r["ratios"]:
                headline = (r["device"], best, r["ratios"][best][0])
            continue
        for threads in args.threads if device.type == "cpu" else [torch.get_num_threads()]:
            torch.set_num_threads(threads)
            meter = LoadMeter()
            meter.start()
            r = benchmark(device, args.chains, args.steps, args.repeats, dtype, args.all_routes, args.model, args.beta)
            others = meter.stop()
            ms = r["ms"]
            load = "?" if others is None else f"{100 * others:.0f}%"
            print(
                f"{r['device']}, {threads} thread(s) (other processes used {load} of the CPUs meanwhile; "
                f"load average now {loadavg()}):"
            )
            for c in r["routes"]:
                if c.how == "measured":
                    timed = ", ".join(f"{route} {t:.2f}" for route, t in c.timings_ms)
                    print(f"  route of x{c.inner} -> {c.cols}: {c.route} (timed at start, ms per product: {timed})")
                else:
                    why = "forced by" if c.how == "forced" else "the route forced by"
                    why += f" {product_routes.ROUTE_ENV}" + ("" if c.how == "forced" else " cannot compute it")
                    print(f"  route of x{c.inner} -> {c.cols}: {c.route} ({why}, not timed)")
            forced = [k for k in ms if k.startswith("ais[")]
            extra = "".join(f", {k[4:-1]} {ms[k]:.2f}" for k in forced)
            print(
                f"  AIS step {ms['ais']:.2f} ms"
                + (f" (products forced through each route:{extra[1:]})" if forced else "")
            )
            labels = {"mm": "bare torch.mm products", "onednn": "bare oneDNN products", "own": "the library's products"}
            for base, label in labels.items():
                if base in r["ratios"]:
                    med, lo, hi = r["ratios"][base]
                    print(f"  {label} {ms[base]:.2f} ms: step / them {med:.2f} (range {lo:.2f}-{hi:.2f})")
            if headline is None:
                headline = (r["device"], threads, r["ratios"]["mm"][0])
            if args.breakdown and device.type == "cpu":
                parts = breakdown(args.chains, args.steps, dtype, args.model, args.beta)
                print("  breakdown (ms per step): " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    if args.units:
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)
        import benchmark_units  # this folder's script: the typed models and their bare products

        torch.set_num_threads(args.threads[0])
        for name in args.units:
            r = benchmark_units.benchmark(name, args.chains, args.steps, args.repeats)
            lo, hi = r["ratio_range"]
            print(
                f"{r['model']}, cpu, {args.threads[0]} thread(s): AIS step {r['ais_step_ms']:.2f} ms, bare torch.mm "
                f"products {r['bare_matmul_ms']:.2f} ms: step / them {r['ratio']:.2f} (range {lo:.2f}-{hi:.2f})"
            )
    print(f"load average after: {loadavg()}")
    device, threads, ratio = headline
    how = threads if isinstance(threads, str) else f"{threads} thread(s)"
    print(f"ratio (AIS step / bare torch.mm products, {device}, {how}, median): {ratio:.2f}")


if __name__ == "__main__":
    main()
