"""HMC and MALA for an energy model on real support (`paths.energy.EnergyPath`), with per-chain step sizes.

One transition at beta: draw momentum p ~ N(0, I); take L leapfrog steps on log f_beta with gradients by autograd,
x moving by step * scale * p (scale: a fixed per-coordinate scale, the base's standard deviations, so that one step
size fits coordinates of different spread: HMC in the coordinates x / scale); propose (x_L, -p_L) and accept with
probability min(1, exp(H_0 - H_L)), H = -log f_beta(x) + |p|^2 / 2. The momentum flip makes the proposal an
involution, so the kernel satisfies detailed balance with respect to p_beta for any fixed step size (and the
momentum is redrawn at the next transition, so the flip need not be carried). MALA is the same kernel with L = 1.

Box-bounded support: a position that leaves [low, high] is reflected back at the wall and that coordinate's momentum
flips sign (Neal, 2011, Sec. 5.1): the reflected leapfrog map still preserves volume and is reversed by negating
the momentum, so the kernel stays reversible and never evaluates the energy outside the box.

Step sizes: a float, a tensor broadcasting against the chains' batch shape (per-chain step sizes), or a
`kernels.hmc.StepSizeSchedule` (a step size per beta), tuned in a separate pilot run by `tune_step_sizes` as BDMC's
HMC is (the main runs keep the frozen step sizes, so each transition is an exact p_beta-invariant kernel chosen
before the run). Cost: exactly L forward and backward passes of the energy per transition (the start's gradient
and log f travel in the state, `EnergyState`).
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import Tensor
from tqdm.auto import tqdm

from raise_eval.contracts import KernelInfo
from raise_eval.kernels.energy_leapfrog import native_transition
from raise_eval.kernels.energy_state import EnergyState, batch_sum, non_finite_share, select_state
from raise_eval.kernels.hmc import StepSizeSchedule

StepSizes = Union[float, Tensor, StepSizeSchedule]


def reflect(x: Tensor, p: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """Fold positions x back into [low, high] by reflections at the walls; each coordinate reflected an odd number
    of times has its momentum p negated. Shapes unchanged; x and p may be written in place. On the CPU, where a
    look at the largest overshoot costs no device sync: when no coordinate overshoots a wall by the box's width or
    more (HMC's steps are small against the box) one reflection each is the whole fold, in six elementwise passes
    (clamp, overshoot, its extremes, mirror, flip); otherwise, and on other devices, `_fold` folds every coordinate
    (the same numbers)."""
    if x.device.type != "cpu":
        return _fold(x, p, low, high)
    width = high - low
    inside = x.clamp(low, high)
    overshoot = torch.sub(x, inside)  # 0 inside the box, the signed distance beyond the wall outside
    least, most = torch.aminmax(overshoot)
    if not (-width < float(least) and float(most) < width):  # a coordinate crosses the whole box: fold them all
        return _fold(x, p, low, high)
    # p - 2 p |sign(overshoot)|: the momentum negated where reflected, in float operations only (on the CPU,
    # comparisons and torch.where on bool masks cost several times a multiply-add).
    return inside.sub_(overshoot), p.addcmul_(p, overshoot.sign().abs_(), value=-2)


def _fold(x: Tensor, p: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """`reflect` of every coordinate: one mirror image at the wall where the overshoot is under the box's width (the
    same arithmetic as `reflect`'s, so both give the same numbers), the general fold by the overshoot's parity
    elsewhere."""
    width = high - low
    inside = x.clamp(low, high)
    overshoot = x - inside
    once = overshoot.abs() < width
    t = (x - low) / width
    n = torch.floor(t)
    r = t - n
    odd = torch.remainder(n, 2) == 1
    folded = torch.where(once, inside - overshoot, low + width * torch.where(odd, 1 - r, r))
    return folded, torch.where(torch.where(once, overshoot != 0, odd), -p, p)


class EnergyHMCKernel:
    """HMC transition (state, beta, generator) -> state on an energy path (`contracts.InfoKernel`).

    Args:
        path: an `EnergyPath` on real support: `with_grad(state)`, `state_with_grad(x)`, `log_density(state, beta)`,
            `grad_log_density(state, beta)`, `step_scale()` and `model.support`.
        step_sizes: a float, a tensor broadcasting against the batch shape (per-chain), or a `StepSizeSchedule`.
        num_leapfrog: leapfrog steps per transition L (1: MALA).
    """

    def __init__(self, path, step_sizes: StepSizes = 0.1, num_leapfrog: int = 10):
        if isinstance(num_leapfrog, bool) or not isinstance(num_leapfrog, int) or num_leapfrog < 1:
            raise ValueError(f"num_leapfrog must be an integer of at least 1, got {num_leapfrog!r}")
        if path.model.support.discrete:
            raise ValueError(f"HMC needs real support; this energy's is {path.model.support.describe()} (use the "
                             "Metropolis scan or Gibbs with gradients)")  # fmt: skip
        self.path, self.step_sizes, self.num_leapfrog = path, step_sizes, num_leapfrog

    def step_size(self, beta: float, x: Tensor) -> Tensor:
        """The step sizes at `beta`, shaped to broadcast against x (*B, *event_shape)."""
        s = self.step_sizes
        eps = s(beta) if isinstance(s, StepSizeSchedule) else torch.as_tensor(s)
        eps = eps.to(dtype=x.dtype, device=x.device)
        return eps.reshape(eps.shape + (1,) * len(self.path.model.event_shape))

    def step(self, state: EnergyState, beta: float, generator: torch.Generator) -> tuple[EnergyState, KernelInfo]:
        """The transition and KernelInfo(acceptance=min(1, exp(H_0 - H_L)), non_finite=1 where H_0 - H_L was NaN
        or +inf and the proposal rejected for it, else 0), each per chain shaped (*B,)."""
        return hmc_transition(self.path, state, beta, self.step_size(beta, state.x), self.num_leapfrog, generator)

    def __call__(self, state: EnergyState, beta: float, generator: torch.Generator) -> EnergyState:
        return self.step(state, beta, generator)[0]


class MALAKernel(EnergyHMCKernel):
    """The Metropolis-adjusted Langevin algorithm: HMC with one leapfrog step (the same proposal and acceptance)."""

    def __init__(self, path, step_sizes: StepSizes = 0.1):
        super().__init__(path, step_sizes, num_leapfrog=1)


def hmc_transition(
    path, state: EnergyState, beta: float, step_size: Tensor, num_leapfrog: int, generator: torch.Generator
) -> tuple[EnergyState, KernelInfo]:
    """One HMC transition at beta (see the module docstring); step_size broadcasts against x (*B, *event_shape).
    On the CPU, by the native kernel where it applies (`kernels.energy_leapfrog`: the same numbers in fewer passes)."""
    if num_leapfrog < 1:
        raise ValueError(f"num_leapfrog must be at least 1, got {num_leapfrog}")
    done = native_transition(path, state, beta, step_size, num_leapfrog, generator)
    if done is not None:
        return done
    support, event_dims = path.model.support, len(path.model.event_shape)
    state = path.with_grad(state)
    scale = path.step_scale().to(dtype=state.x.dtype)
    move = step_size * scale
    p0 = torch.randn(state.x.shape, generator=generator, dtype=state.x.dtype, device=state.x.device)
    p = torch.addcmul(p0, move, path.grad_log_density(state, beta), value=0.5)
    x, new = state.x, state
    # Fused multiply-adds, in place after the first step (state.x and p0 are kept for the acceptance test; each
    # step's x is done with once its energy and gradient are taken): the elementwise work around the energy's passes
    # is what HMC costs beyond them.
    for i in range(num_leapfrog):
        x = torch.addcmul(x, move, p) if i == 0 else x.addcmul_(move, p)
        if support.bounded:
            x, p = reflect(x, p, support.low, support.high)
        new = path.state_with_grad(x)
        p.addcmul_(move, path.grad_log_density(new, beta), value=1.0 if i < num_leapfrog - 1 else 0.5)
    kinetic0 = 0.5 * batch_sum(p0.double() ** 2, event_dims)
    kinetic1 = 0.5 * batch_sum(p.double() ** 2, event_dims)
    log_accept = (path.log_density(new, beta) - kinetic1) - (path.log_density(state, beta) - kinetic0)
    non_finite = non_finite_share(log_accept)
    log_accept = torch.nan_to_num(log_accept, nan=-math.inf, posinf=-math.inf)  # divergent trajectories: rejected
    u = torch.rand(log_accept.shape, generator=generator, dtype=torch.float64, device=log_accept.device)
    accept = torch.log(u) < log_accept
    info = KernelInfo(acceptance=log_accept.clamp(max=0.0).exp(), non_finite=non_finite)
    return select_state(accept, new, state), info


def tune_step_sizes(
    path,
    betas: Tensor,
    *,
    generator: torch.Generator,
    num_leapfrog: int = 10,
    num_chains: int = 16,
    target_accept: Optional[float] = None,
    initial_step_size: float = 0.1,
    max_pilot_steps: int = 200,
    warmup: int = 50,
    progress: bool = False,
) -> StepSizeSchedule:
    """A pilot run (its own chains and randomness, from the base): forward annealing through at most
    `max_pilot_steps` of `betas`, each of `num_chains` chains adapting its own log step size by
    0.1 * (acceptance - target) after each transition (`warmup` extra transitions at beta = 0); the geometric mean
    over chains at each beta is frozen into a `StepSizeSchedule` for the main runs. target_accept: 0.65 for HMC,
    0.57 for MALA (num_leapfrog = 1) when None."""
    target = (0.57 if num_leapfrog == 1 else 0.65) if target_accept is None else target_accept
    if not 0 < target < 1:
        raise ValueError(f"target_accept must be in (0, 1), got {target}")
    if not initial_step_size > 0:
        raise ValueError(f"initial_step_size must be positive, got {initial_step_size}")
    betas = torch.as_tensor(betas, dtype=torch.float64).cpu()
    if betas.numel() - 1 > max_pilot_steps:
        betas = betas[torch.linspace(0, betas.numel() - 1, max_pilot_steps + 1).round().long().unique()]
    state = path.sample_initial(num_chains, generator)
    log_eps = torch.full((num_chains,), math.log(initial_step_size), dtype=torch.float64, device=state.x.device)
    kernel = EnergyHMCKernel(path, 0.0, num_leapfrog)
    recorded = []
    for i, beta in enumerate(tqdm(betas.tolist(), desc="step-size pilot", disable=not progress, leave=False)):
        for _ in range(2 + (warmup if i == 0 else 0)):
            kernel.step_sizes = log_eps.exp()
            state, info = kernel.step(state, beta, generator)
            log_eps = log_eps + 0.1 * (info["acceptance"] - target)
        recorded.append(log_eps.mean())
    return StepSizeSchedule(betas, torch.stack(recorded))
