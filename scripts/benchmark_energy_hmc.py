"""How close HMC on a user's energy comes to the energy passes it cannot avoid, on a box and unbounded.

An HMC transition with L leapfrog steps needs L forward and backward passes of the energy (the start's gradient
travels in the state). This script times, in one run, on an MLP energy 784-256-256-1 (SiLU, random weights: timing
does not depend on them), `--chains` chains, K transitions of L leapfrog steps, one thread:

- bare: the K L forward and backward passes alone, in plain PyTorch (x.requires_grad_(), E(x), autograd.grad);
- hmc: `EnergyHMCKernel` transitions on the unbounded real support;
- box: the same on the box [0, 1] (positions reflected at the walls), with the reflection of this version;
- box-before: the same with 7400a90's transition (`transition_before`, `reflect_before` and `BaseBefore` below:
  its leapfrog updates, reflection and base log-density, kept to measure against);

the four alternating in blocks of 10 transitions (so that a shared machine's changing load falls on all alike),
and prints each / bare per repetition and the medians, with the share of coordinates reflected per leapfrog step.
The box's chains start from a base crowding the lower wall (mean 0.1, std 0.3, truncated), as MNIST's mostly-zero
pixels do; step sizes from a short pilot (`tune_step_sizes`).

    python scripts/benchmark_energy_hmc.py [--chains 100] [--steps 100] [--leapfrog 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from raise_eval.models.energy import GaussianBase
from torch import nn

from raise_eval import EnergyModel
from raise_eval.kernels import energy_hmc
from raise_eval.kernels.energy_hmc import EnergyHMCKernel, tune_step_sizes
from raise_eval.kernels.energy_state import batch_sum, select_state
from raise_eval.paths.energy import EnergyPath


def reflect_before(x, p, low: float, high: float):
    """The reflection of 7400a90 (CPU branch): fold only the coordinates outside the box, by index."""
    where = ((x < low) | (x > high)).nonzero(as_tuple=True)
    if where[0].numel() == 0:
        return x, p
    width = high - low
    xs, ps = x[where], p[where]
    t = (xs - low) / width
    n = torch.floor(t)
    r = t - n
    odd = torch.remainder(n, 2) == 1
    folded, flipped = low + width * torch.where(odd, 1 - r, r), torch.where(odd, -ps, ps)
    return x.index_put_(where, folded), p.index_put_(where, flipped)


class BaseBefore(GaussianBase):
    """The truncated Gaussian base with 7400a90's log_prob (per-coordinate terms, the outside mask always)."""

    def log_prob(self, x):
        z = (x.double() - self.mean) / self.std
        per_coord = -0.5 * z * z - torch.log(self.std) - 0.5 * math.log(2 * math.pi)
        if self._log_mass is not None:
            per_coord = per_coord - self._log_mass
            outside = (x < self.low) | (x > self.high)
            per_coord = per_coord.masked_fill(outside, -math.inf)
        return per_coord.flatten(start_dim=x.dim() - self.mean.dim()).sum(-1)


def transition_before(path, state, beta, step_size, num_leapfrog, generator):
    """7400a90's HMC transition (its leapfrog updates, `reflect_before`), for the paired comparison."""
    support, event_dims = path.model.support, len(path.model.event_shape)
    state = path.with_grad(state)
    move = step_size * path.step_scale().to(dtype=state.x.dtype)
    p0 = torch.randn(state.x.shape, generator=generator, dtype=state.x.dtype, device=state.x.device)
    p = p0 + 0.5 * move * path.grad_log_density(state, beta)
    x, new = state.x, state
    for i in range(num_leapfrog):
        x = x + move * p
        if support.bounded:
            x, p = reflect_before(x, p, support.low, support.high)
        new = path.state_with_grad(x)
        p = p + (1.0 if i < num_leapfrog - 1 else 0.5) * move * path.grad_log_density(new, beta)
    kinetic0 = 0.5 * batch_sum(p0.double() ** 2, event_dims)
    kinetic1 = 0.5 * batch_sum(p.double() ** 2, event_dims)
    log_accept = (path.log_density(new, beta) - kinetic1) - (path.log_density(state, beta) - kinetic0)
    log_accept = torch.nan_to_num(log_accept, nan=-math.inf, posinf=-math.inf)
    u = torch.rand(log_accept.shape, generator=generator, dtype=torch.float64, device=log_accept.device)
    return select_state(torch.log(u) < log_accept, new, state)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--steps", type=int, default=100, help="transitions K per repetition (blocks of 10)")
    parser.add_argument("--leapfrog", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # the energy's initialization only
    net = nn.Sequential(nn.Linear(784, 256), nn.SiLU(), nn.Linear(256, 256), nn.SiLU(), nn.Linear(256, 1))

    def energy(x):
        return net(x).squeeze(-1)

    g = torch.Generator().manual_seed(0)
    betas = torch.linspace(0, 1, 201, dtype=torch.float64)
    runs, reflected = {}, {"coordinates": 0, "steps": 0}
    for name, support in (("hmc", "real"), ("box", ("real", 0.0, 1.0))):
        model = EnergyModel(energy, support=support, event_shape=(784,), dtype=torch.float32)
        low, high = (0.0, 1.0) if name == "box" else (None, None)
        base = GaussianBase(torch.full((784,), 0.1), torch.full((784,), 0.3), low, high)
        path = EnergyPath(model, base)
        schedule = tune_step_sizes(path, betas, generator=g, num_leapfrog=args.leapfrog, max_pilot_steps=10)
        runs[name] = [EnergyHMCKernel(path, schedule, args.leapfrog), path.sample_initial(args.chains, g)]
    kernel, start = runs["box"]
    before = EnergyPath(kernel.path.model, BaseBefore(kernel.path.base.mean, kernel.path.base.std, 0.0, 1.0))
    runs["box-before"] = [EnergyHMCKernel(before, kernel.step_sizes, args.leapfrog), start]
    x_bare = runs["hmc"][1].x.clone()
    block = 10

    def run_kernel(name: str, j: int) -> None:
        kernel, state = runs[name]
        for i in range(block):
            beta = float(betas[(j * block + i) % betas.numel()])
            if name == "box-before":
                state = transition_before(kernel.path, state, beta, kernel.step_size(beta, state.x), args.leapfrog, g)
            else:
                state = kernel(state, beta, g)
        runs[name][1] = state

    def run_bare(j: int) -> None:
        nonlocal x_bare
        x = x_bare
        for _ in range(block * args.leapfrog):
            xx = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(energy(xx).sum(), xx)
            x = x - 1e-4 * grad  # a dependent chain of passes, as in a trajectory
        x_bare = x

    def counting(x, p, low, high):
        reflected["coordinates"] += int(((x < low) | (x > high)).sum())
        reflected["steps"] += 1
        return new_reflect(x, p, low, high)

    new_reflect = energy_hmc.reflect
    work = {
        "bare": run_bare,
        "hmc": lambda j: run_kernel("hmc", j),
        "box": lambda j: run_kernel("box", j),
        "box-before": lambda j: run_kernel("box-before", j),
    }

    def timed(name: str, j: int) -> float:
        begin = time.perf_counter()
        work[name](j)
        return time.perf_counter() - begin

    for name in work:  # warm-up
        timed(name, 0)
    energy_hmc.reflect = counting
    run_kernel("box", 0)
    energy_hmc.reflect = new_reflect
    share = reflected["coordinates"] / (reflected["steps"] * args.chains * 784)
    print(f"energy MLP 784-256-256-1 (SiLU); {args.chains} chains; K = {args.steps} transitions of L = {args.leapfrog}"
          f" leapfrog steps; {args.threads} thread(s); torch {torch.__version__}")  # fmt: skip
    print(f"box [0, 1]: {share:.2%} of the coordinates outside the box per leapfrog step (before reflection)")
    ratios: dict[str, list[float]] = {name: [] for name in work if name != "bare"}
    for rep in range(args.repetitions):
        seconds = dict.fromkeys(work, 0.0)
        for j in range(-(-args.steps // block)):
            for name in work:
                seconds[name] += timed(name, j)
        for name in ratios:
            ratios[name].append(seconds[name] / seconds["bare"])
        print(f"run {rep + 1}: " + ", ".join(f"{n} {s:.3f} s" for n, s in seconds.items()) + "; "
              + ", ".join(f"{n} / bare = {r[-1]:.3f}" for n, r in ratios.items()))  # fmt: skip
    print(f"median over {args.repetitions} runs: "
          + ", ".join(f"{n} / bare = {statistics.median(r):.3f}" for n, r in ratios.items()))  # fmt: skip


if __name__ == "__main__":
    main()
