"""How close HMC on a user's energy comes to the energy passes it cannot avoid, on a box and unbounded.

An HMC transition with L leapfrog steps needs L forward and backward passes of the energy (the start's gradient
travels in the state). This script times, in one run, on an MLP energy 784-H1-...-1 (SiLU, random weights: timing
does not depend on them; `--hidden 256,256` by default), `--chains` chains, K transitions of L leapfrog steps, one
thread:

- bare: the K L forward and backward passes alone, in plain PyTorch (x.requires_grad_(), E(x), autograd.grad), on
  one fixed batch of chain states: nothing but the energy's passes;
- native, native-box: `EnergyHMCKernel` transitions by the native kernel (`kernels.energy_leapfrog`), on the
  unbounded real support and on the box [0, 1] (positions reflected at the walls);
- pytorch, pytorch-box: the same transitions by the PyTorch route (RAISE_EVAL_NATIVE=0 around each call: the
  transition of 1e632c5 and before, which other dtypes and devices still take; its helpers, such as the energy's
  forward and backward pass, are this version's);

the five alternating in blocks of 10 transitions (so that a shared machine's changing load falls on all alike), and
prints each / bare per repetition and the medians, the median of the blocks' paired ratios (each block against the
bare block beside it) in wall time and in the thread's CPU time (which leaves out the time other processes take
the core), and the share of coordinates reflected per leapfrog step. The
box's chains start from a base crowding the lower wall (mean 0.1, std 0.3, truncated), as MNIST's mostly-zero
pixels do; step sizes from a short pilot (`tune_step_sizes`). Where the native kernel is unavailable (no compiler,
RAISE_EVAL_NATIVE=0 set for the whole run, a version without the kernel) the script says why and times the PyTorch
route and bare only.

`--profile T` then runs T transitions of each route (and T L bare passes) under torch.profiler and prints each
aten op's self CPU time per transition against bare's: where the time beyond the passes goes (the profiler adds a
few microseconds to every op, so its totals exceed the timed ones).

    python scripts/benchmark_energy_hmc.py [--chains 100] [--steps 100] [--leapfrog 10] [--threads 1]
        [--hidden 256,256] [--dtype float32] [--repetitions 3] [--profile 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from typing import Optional

import torch
from raise_eval.models import native
from raise_eval.models.energy import GaussianBase
from torch import nn

from raise_eval import EnergyModel
from raise_eval.kernels import energy_hmc
from raise_eval.kernels.energy_hmc import EnergyHMCKernel, tune_step_sizes
from raise_eval.paths.energy import EnergyPath

BLOCK = 10  # transitions per timed block


class PyTorchRoute:
    """Calls within this context take the PyTorch routes (RAISE_EVAL_NATIVE=0, the caller's setting restored)."""

    def __enter__(self):
        self.saved = os.environ.get(native.NATIVE_ENV)
        os.environ[native.NATIVE_ENV] = "0"

    def __exit__(self, *exc):
        if self.saved is None:
            del os.environ[native.NATIVE_ENV]
        else:
            os.environ[native.NATIVE_ENV] = self.saved


def mlp_energy(hidden: list[int], dtype: torch.dtype):
    """E(x) = an MLP 784-hidden-1 with SiLU activations, (N, 784) -> (N,)."""
    torch.manual_seed(0)  # the energy's initialization only
    layers, width = [], 784
    for h in hidden:
        layers += [nn.Linear(width, h), nn.SiLU()]
        width = h
    net = nn.Sequential(*layers, nn.Linear(width, 1)).to(dtype)

    def energy(x):
        return net(x).squeeze(-1)

    return energy


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--steps", type=int, default=100, help="transitions K per repetition (blocks of 10)")
    parser.add_argument("--leapfrog", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--hidden", default="256,256", help="the MLP's hidden widths, comma-separated")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--profile", type=int, default=0, help="transitions per route under torch.profiler (0: none)")
    args = parser.parse_args(argv)
    try:
        args.hidden = [int(h) for h in args.hidden.split(",")]
    except ValueError:
        parser.error(f"--hidden must be comma-separated integers, e.g. 256,256 or 64; got {args.hidden!r}")
    if min(args.hidden) < 1 or min(args.chains, args.steps, args.leapfrog, args.threads, args.repetitions) < 1:
        parser.error("--hidden widths, --chains, --steps, --leapfrog, --threads and --repetitions must be positive")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    energy = mlp_energy(args.hidden, dtype)
    why_not_native = native_unavailable()
    have_native = why_not_native is None
    g = torch.Generator().manual_seed(0)
    betas = torch.linspace(0, 1, 201, dtype=torch.float64)
    kernels, states = {}, {}
    for support_name, support in (("", "real"), ("-box", ("real", 0.0, 1.0))):
        model = EnergyModel(energy, support=support, event_shape=(784,), dtype=dtype)
        low, high = (0.0, 1.0) if support_name else (None, None)
        path = EnergyPath(model, GaussianBase(torch.full((784,), 0.1), torch.full((784,), 0.3), low, high))
        schedule = tune_step_sizes(path, betas, generator=g, num_leapfrog=args.leapfrog, max_pilot_steps=10)
        start = path.sample_initial(args.chains, g)
        for route in ("native", "pytorch") if have_native else ("pytorch",):
            kernels[route + support_name] = EnergyHMCKernel(path, schedule, args.leapfrog)
            states[route + support_name] = start
    x_bare = states["pytorch"].x.clone()

    def run_kernel(name: str, j: int, count: int = BLOCK) -> None:
        kernel, state = kernels[name], states[name]
        for i in range(count):
            beta = float(betas[(j * BLOCK + i) % betas.numel()])
            if name.startswith("pytorch"):
                with PyTorchRoute():
                    state = kernel(state, beta, g)
            else:
                state = kernel(state, beta, g)
        states[name] = state

    def run_bare(j: int, count: int = BLOCK) -> None:
        for _ in range(count * args.leapfrog):
            xx = x_bare.detach().requires_grad_(True)
            torch.autograd.grad(energy(xx).sum(), xx)

    work = {"bare": run_bare, **{name: (lambda j, count=BLOCK, n=name: run_kernel(n, j, count)) for name in kernels}}

    cpu_ratios: dict[str, list[float]] = {name: [] for name in kernels}

    def timed(name: str, j: int, cpu: Optional[dict] = None) -> float:
        """The block's wall time; its thread's CPU time into `cpu` (time descheduled left out)."""
        begin, begin_cpu = time.perf_counter(), time.thread_time()
        work[name](j)
        if cpu is not None:
            cpu[name] = time.thread_time() - begin_cpu
        return time.perf_counter() - begin

    for name in work:  # warm-up (the native kernel compiled or loaded by the pilot already)
        timed(name, 0)
    share = reflected_share(run_kernel, args.chains)
    print(f"energy MLP 784-{'-'.join(map(str, args.hidden))}-1 (SiLU), {args.dtype}; {args.chains} chains; "
          f"K = {args.steps} transitions of L = {args.leapfrog} leapfrog steps; {args.threads} thread(s); "
          f"torch {torch.__version__}")  # fmt: skip
    if not have_native:
        print(f"native kernel unavailable ({why_not_native}): PyTorch route only")
    print(f"box [0, 1]: {share:.2%} of the coordinates outside the box per leapfrog step (before reflection)")
    ratios: dict[str, list[float]] = {name: [] for name in kernels}
    block_ratios: dict[str, list[float]] = {name: [] for name in kernels}
    for rep in range(args.repetitions):
        seconds = dict.fromkeys(work, 0.0)
        for j in range(-(-args.steps // BLOCK)):
            cpu: dict[str, float] = {}
            block = {name: timed(name, j, cpu) for name in work}
            for name in work:
                seconds[name] += block[name]
            for name in kernels:
                block_ratios[name].append(block[name] / block["bare"])
                cpu_ratios[name].append(cpu[name] / cpu["bare"])
        for name in ratios:
            ratios[name].append(seconds[name] / seconds["bare"])
        print(f"run {rep + 1}: " + ", ".join(f"{n} {s:.3f} s" for n, s in seconds.items()) + "; "
              + ", ".join(f"{n} / bare = {r[-1]:.3f}" for n, r in ratios.items()))  # fmt: skip
    medians = {name: statistics.median(r) for name, r in ratios.items()}
    print(f"median over {args.repetitions} runs: " + ", ".join(f"{n} / bare = {m:.3f}" for n, m in medians.items()))
    # each block's ratio to the bare block timed beside it: a burst of load on a shared machine falls on one
    # block's pair, where it moves a whole repetition's sum
    print(f"median over the {len(block_ratios['pytorch'])} blocks' paired ratios: "
          + ", ".join(f"{n} / bare = {statistics.median(r):.3f}" for n, r in block_ratios.items()))  # fmt: skip
    # the thread's CPU time leaves out the time other processes take the core from it (not their share of the
    # caches and memory bandwidth)
    print("the same in the thread's CPU time: "
          + ", ".join(f"{n} / bare = {statistics.median(r):.3f}" for n, r in cpu_ratios.items()))  # fmt: skip
    if have_native:
        speedups = {what: [a / b for a, b in zip(ratios["native" + s], ratios["pytorch" + s])]
                    for what, s in (("unbounded", ""), ("box", "-box"))}  # fmt: skip
        print("median native / pytorch: " + ", ".join(f"{w} {statistics.median(r):.3f}" for w, r in speedups.items()))
    if args.profile:
        print_profile({name: (lambda n=name: work[n](0, args.profile)) for name in work}, args.profile)


def native_unavailable():
    """None where the native leapfrog kernel loads, else why not."""
    try:
        library = native.library("energy_leapfrog")
    except ValueError as error:  # a version of raise_eval without the kernel
        return str(error)
    return None if library is not None else native.unavailable_reason("energy_leapfrog")


def reflected_share(run_kernel, chains: int) -> float:
    """The share of coordinates outside [0, 1] after each leapfrog step's move, over one block of box transitions
    (counted on the PyTorch route, whose `reflect` sees every step's positions)."""
    counts = {"coordinates": 0, "steps": 0}
    reflect = energy_hmc.reflect

    def counting(x, p, low, high):
        counts["coordinates"] += int(((x < low) | (x > high)).sum())
        counts["steps"] += 1
        return reflect(x, p, low, high)

    energy_hmc.reflect = counting
    try:
        run_kernel("pytorch-box", 0)
    finally:
        energy_hmc.reflect = reflect
    return counts["coordinates"] / (counts["steps"] * chains * 784)


def print_profile(work: dict, transitions: int, sessions: int = 3) -> None:
    """Each aten op's self CPU time per transition under torch.profiler, for each route against bare's: `sessions`
    interleaved sessions, each route's least loaded one (least wall time) kept. Wall time less the ops' sum is
    Python, ctypes (the native kernel's own passes) and the profiler's bookkeeping."""
    from torch.profiler import ProfilerActivity, profile

    best: dict[str, tuple[float, dict]] = {}
    for _ in range(sessions):
        for name, fn in work.items():
            fn()  # warm
            begin = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
            wall = (time.perf_counter() - begin) * 1e6 / transitions
            ops = defaultdict(lambda: [0.0, 0.0])
            for event in prof.key_averages():
                ops[event.key][0] += event.self_cpu_time_total / transitions
                ops[event.key][1] += event.count / transitions
            if name not in best or wall < best[name][0]:
                best[name] = (wall, ops)
    names, table = list(work), {name: ops for name, (_, ops) in best.items()}
    print(f"\nper transition under torch.profiler, {transitions} transitions, least loaded of {sessions} sessions:")
    print("  wall (us): " + ", ".join(f"{n} {best[n][0]:.0f}" for n in names))
    print("  aten ops' self CPU (us): " + ", ".join(f"{n} {sum(v[0] for v in table[n].values()):.0f}" for n in names))
    keys = sorted(set().union(*table.values()), key=lambda k: -max(abs(table[n][k][0] - table["bare"][k][0])
                                                                   for n in names))  # fmt: skip
    print(f"  {'op: self CPU us (calls) per transition':44s}" + "".join(f"{n:>18s}" for n in names))
    for key in keys:
        cells = [table[n][key] for n in names]
        if max(abs(c[0] - cells[0][0]) for c in cells) < 10:  # the same as bare's within 10 us
            continue
        print(f"  {key[:44]:44s}" + "".join(f"{c[0]:10.0f} ({c[1]:4.1f})" for c in cells))


if __name__ == "__main__":
    main()
