"""Hamiltonian Monte Carlo for the directed path, batched over examples x chains, with a step size per chain.

One transition: draw momentum p ~ N(0, I), take L leapfrog steps on log f_beta, accept with probability
min(1, exp(H0 - H1)), H = -log f_beta(z) + |p|^2 / 2. With momentum refreshed and the Metropolis correction, the
kernel is reversible with respect to p_beta for any fixed step size, so the same kernel serves forward AIS and
reverse AIS (and BREAD's analysis, which needs the reverse chain to be the reversal of the forward one).

Step sizes and the guarantee kept. The step size at each beta is tuned in a separate pilot run (`tune_hmc`):
forward annealing from the prior with independent randomness, adapting each chain's log step size towards a
target acceptance rate, then freezing a per-example step size for each beta. The main runs (forward and reverse)
use these fixed step sizes, so every transition is an exact p_beta-invariant kernel chosen before the run:
forward AIS weights are unbiased for p(x), reverse weights for 1/p(x), and the BDMC bounds are stochastic bounds
in the strict sense. (Adapting during the run itself, from the chains being weighted, would void that.) The pilot
never sees the exact posterior sample.
"""

from __future__ import annotations

import bisect
import math
from typing import Optional, Union

import torch
from torch import Tensor
from tqdm.auto import tqdm

from raise_eval.contracts import KernelInfo
from raise_eval.kernels.directed_state import DirectedState, select_state
from raise_eval.paths.directed import DirectedPath


class StepSizeSchedule:
    """Per-example HMC step sizes as a function of beta: log step sizes interpolated linearly between grid points.

    Args:
        betas: increasing grid, shaped (G,), float64.
        log_step_sizes: log step sizes at the grid points, shaped (G, N, 1) (per example, broadcast over chains)
            or (G,) (shared).
    """

    def __init__(self, betas: Tensor, log_step_sizes: Tensor):
        self.betas = betas.double().cpu()
        self.log_step_sizes = log_step_sizes
        if self.betas.dim() != 1 or self.betas.numel() != log_step_sizes.shape[0]:
            raise ValueError("one log step size (set) per beta grid point is needed")
        self._grid = self.betas.tolist()  # Python floats: the lookup at each transition touches no tensor

    @classmethod
    def constant(cls, step_size: Union[float, Tensor]) -> StepSizeSchedule:
        log_eps = torch.log(torch.as_tensor(step_size, dtype=torch.float64))
        return cls(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.stack([log_eps, log_eps]))

    def __call__(self, beta: float) -> Tensor:
        """Step sizes at `beta` (clamped to the grid's range)."""
        g = self._grid
        if len(g) == 1:
            return self.log_step_sizes[0].exp()
        i = min(max(bisect.bisect_right(g, beta) - 1, 0), len(g) - 2)
        lo, hi = g[i], g[i + 1]
        t = min(max((beta - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 0.0
        return torch.lerp(self.log_step_sizes[i], self.log_step_sizes[i + 1], t).exp()

    def at(self, betas: Tensor) -> Tensor:
        """Step sizes at each of `betas` (K + 1,), stacked: (K + 1, *shape of one beta's), on the log step sizes'
        device; the interpolation of `__call__`, vectorized (a table for step programs)."""
        grid = self.betas
        b = betas.detach().double().cpu().clamp(grid[0], grid[-1])
        if grid.numel() == 1:
            return self.log_step_sizes[0].exp().expand(b.numel(), *self.log_step_sizes.shape[1:])
        i = (torch.searchsorted(grid, b, right=True) - 1).clamp(0, grid.numel() - 2)
        lo, hi = grid[i], grid[i + 1]
        t = torch.where(hi > lo, (b - lo) / torch.where(hi > lo, hi - lo, 1.0), 0.0).clamp(0.0, 1.0)
        logs = self.log_step_sizes
        t = t.to(logs.dtype).to(logs.device).reshape(-1, *([1] * (logs.dim() - 1)))
        return torch.lerp(logs[i.to(logs.device)], logs[(i + 1).to(logs.device)], t).exp()

    def to_dict(self) -> dict:
        """Summary: median step size over examples at a few betas."""
        out = {}
        for b in (0.0, 0.25, 0.5, 0.75, 1.0):
            out[f"{b:g}"] = float(self(b).double().median())
        return out


class HMCKernel:
    """HMC transition (state, beta, generator) -> state for a `DirectedPath` with continuous latents.

    Args:
        path: the path (supplies log f_beta and its gradient through the state's caches).
        step_sizes: a float, a tensor broadcastable to (N, C, 1), or a `StepSizeSchedule` (per beta).
        num_leapfrog: leapfrog steps per transition L.
    The acceptance probabilities of the last transition are kept in `last_accept_prob` (N, C).
    """

    def __init__(self, path: DirectedPath, step_sizes: Union[float, Tensor, StepSizeSchedule], num_leapfrog: int = 10):
        if num_leapfrog < 1:
            raise ValueError(f"num_leapfrog must be at least 1, got {num_leapfrog}")
        self.path = path
        self.step_sizes = step_sizes
        self.num_leapfrog = num_leapfrog
        self.last_accept_prob: Optional[Tensor] = None
        self._fixed: Optional[tuple] = None  # (source, dtype, device, tensor): a fixed step size converted once

    def step_size(self, beta: float, like: Tensor) -> Tensor:
        s = self.step_sizes
        if isinstance(s, StepSizeSchedule):
            return self._shaped(s(beta).to(dtype=like.dtype, device=like.device))
        cached = self._fixed
        if cached is None or cached[0] is not s or cached[1] != like.dtype or cached[2] != like.device:
            # converted once, not at every transition (a host-to-device copy on a GPU)
            eps = self._shaped(torch.as_tensor(s).to(dtype=like.dtype, device=like.device))
            cached = self._fixed = (s, like.dtype, like.device, eps)
        return cached[3]

    @staticmethod
    def _shaped(eps: Tensor) -> Tensor:
        return eps.reshape(eps.shape + (1,) * max(0, 3 - eps.dim())) if eps.dim() in (1, 2) else eps

    def step_sizes_at(self, betas: Tensor, like: Tensor) -> Tensor:
        """The step sizes at each of `betas` (K + 1,), as `step_size` gives them, stacked: (K + 1, ...)."""
        s = self.step_sizes
        if isinstance(s, StepSizeSchedule):
            table = s.at(betas).to(dtype=like.dtype, device=like.device)
            return table.reshape(table.shape + (1,) * max(0, 4 - table.dim())) if table.dim() in (2, 3) else table
        eps = self.step_size(0.0, like)
        return eps.unsqueeze(0).expand(betas.numel(), *eps.shape)

    def step_program(self, options):
        """This kernel's transitions on its path, with the path's weight update, as a step program
        (`HMCProgram`) where `options` run programs on the path's device (CUDA by default: in CUDA graphs there,
        BDMC's 200 chains on a 10-784 VAE ran 8 times faster on an H200), else None."""
        return HMCProgram(self) if options.runs_on(self.path.x.device) else None

    def __call__(self, state: DirectedState, beta: float, generator: torch.Generator) -> DirectedState:
        return hmc_step(self.path, state, beta, self.step_size(beta, state.z), self.num_leapfrog, generator, self)

    def step(self, state: DirectedState, beta: float, generator: torch.Generator) -> tuple[DirectedState, KernelInfo]:
        """The transition and what it did (`contracts.InfoKernel`): KernelInfo(acceptance=...) holds the per-chain
        acceptance probabilities min(1, exp(H0 - H1)), shaped (N, C)."""
        new = self(state, beta, generator)
        return new, KernelInfo(acceptance=self.last_accept_prob)


def hmc_step(
    path: DirectedPath,
    state: DirectedState,
    beta: float,
    step_size: Tensor,
    num_leapfrog: int,
    generator: torch.Generator,
    record=None,
) -> DirectedState:
    """One HMC transition leaving p_beta invariant; `step_size` broadcasts to (N, C, 1).

    Cost: exactly `num_leapfrog` model evaluations (for a `DecoderModel`, decoder forward and backward passes), one
    per leapfrog position. The log-density and gradient at the start come from the state's caches (computed where
    the previous transition ended, or kept by its rejection), those at the end from the last leapfrog position. No
    value is read back to the host: acceptance is a `torch.where` per chain.
    """
    z0 = state.z
    p0 = torch.randn(z0.shape, generator=generator, dtype=z0.dtype, device=z0.device)
    log_f0 = path.log_density(state, beta)
    p = p0 + 0.5 * step_size * path.grad_log_density(state, beta)
    z = z0
    new = state
    for i in range(num_leapfrog):
        z = z + step_size * p
        new = path.state_from_latents(z)
        grad = path.grad_log_density(new, beta)
        p = p + (step_size if i < num_leapfrog - 1 else 0.5 * step_size) * grad
    log_f1 = path.log_density(new, beta)
    log_accept = (log_f1 - 0.5 * (p**2).sum(-1)) - (log_f0 - 0.5 * (p0**2).sum(-1))
    log_accept = torch.nan_to_num(log_accept, nan=-math.inf, posinf=-math.inf)  # divergent trajectories: reject
    u = torch.rand(log_accept.shape, generator=generator, dtype=log_accept.dtype, device=log_accept.device)
    accept = torch.log(u) < log_accept
    if record is not None:
        record.last_accept_prob = log_accept.clamp(max=0.0).exp()
    return select_state(accept, new, state)


def tune_hmc(
    path: DirectedPath,
    betas: Tensor,
    *,
    num_chains: int = 4,
    num_leapfrog: int = 10,
    target_accept: float = 0.65,
    initial_step_size: float = 0.1,
    adaptation_rate: float = 0.1,
    max_pilot_steps: int = 500,
    warmup: int = 50,
    generator: torch.Generator,
    progress: bool = False,
) -> StepSizeSchedule:
    """Pilot run: forward annealing from the prior with per-chain step-size adaptation; returns frozen per-example
    step sizes as a function of beta (see the module docstring for why the main runs stay exact).

    The pilot follows the same kind of schedule with at most `max_pilot_steps` steps (evenly subsampled from
    `betas`); after each transition at beta, each chain's log step size moves by adaptation_rate * (acceptance
    probability - target_accept), and the per-example geometric mean over chains is recorded for that beta. The
    pilot first adapts for `warmup` transitions at beta = 0, where its chains are exact prior samples.
    """
    betas = betas.double().cpu()
    k = betas.numel() - 1
    if k > max_pilot_steps:
        idx = torch.linspace(0, k, max_pilot_steps + 1).round().long().unique()
        betas = betas[idx]
    state = path.sample_initial(num_chains, generator)
    log_eps = torch.full(state.log_prior.shape, math.log(initial_step_size), dtype=state.z.dtype, device=state.z.device)
    recorded = []
    kernel = HMCKernel(path, 0.0, num_leapfrog)
    beta_list = betas.tolist()
    for i, beta in enumerate(tqdm(beta_list, desc="HMC pilot", disable=not progress, leave=False)):
        # two transitions per temperature: one to adapt on, one to move the chains on with the adapted step
        for _ in range(2 + (warmup if i == 0 else 0)):
            kernel.step_sizes = log_eps.exp().unsqueeze(-1)
            state = kernel(state, beta, generator)
            log_eps = log_eps + adaptation_rate * (kernel.last_accept_prob - target_accept)
        recorded.append(log_eps.mean(dim=1, keepdim=True))  # (N, 1): geometric mean over chains
    return StepSizeSchedule(torch.tensor(beta_list, dtype=torch.float64), torch.stack(recorded).unsqueeze(-1))


# ----------------------------------------------------------------------------------------------- as a step program
# BDMC's annealing step with HMC transitions as a `contracts.StepProgram`: `hmc_step` and the directed path's weight
# update (beta' - beta) log p(x | z), with the inverse temperature and the step sizes read from device tensors (a row
# of the table `schedule` builds: the betas and the kernel's step sizes at each), so that `step_programs.run_program`
# can capture many transitions in one CUDA graph (on a GPU a small decoder's transition is mostly launches). The
# chains' state (latents, the cached log-densities and gradients) lives in tensors of the program's own, which each
# step overwrites. A decoder that reads values back to the host cannot be captured: its steps then run one at a
# time (`run_program` says so), with the same numbers.


class HMCProgram:
    """HMC annealing on `kernel.path` (a `paths.directed.DirectedPath`) with `kernel`'s step sizes and L."""

    def __init__(self, kernel: HMCKernel):
        self.kernel = kernel
        self.path = kernel.path
        self.device = self.path.x.device
        self.log_weights: Optional[Tensor] = None  # set by `begin`

    def schedule(self, betas: Tensor) -> tuple[Tensor, Tensor]:
        """(betas (K + 1,), step sizes (K + 1, ...) broadcasting against the latents (N, C, latent_dim))."""
        return betas, self.kernel.step_sizes_at(betas, self._fields[0])  # (after `begin`: the latents' dtype)

    def begin(
        self, state: DirectedState, log_weights: Optional[Tensor], beta: float, steps: int = 0, start_step: int = 0
    ) -> None:
        """Load `state` (not modified) and the log-weights to add to ((N, C) float64; zeros when None). `beta`,
        `steps` and `start_step` change nothing here."""
        self._fields = [None if t is None else t.clone(memory_format=torch.contiguous_format) for t in state]
        if log_weights is None:
            log_weights = torch.zeros(state.log_likelihood.shape, dtype=torch.float64, device=self.device)
        self.log_weights = log_weights

    def finish(self, beta: float) -> Tensor:
        """The log-weights, holding the run's sums (added to in place)."""
        return self.log_weights

    def state(self, beta: float) -> DirectedState:
        return DirectedState(*self._fields)

    def step(self, row_from: tuple[Tensor, Tensor], row_to: tuple[Tensor, Tensor], generator: torch.Generator) -> None:
        """One HMC transition at beta_from (step sizes of that row) and the weight update to beta_to, in place."""
        (beta_from, step_size), beta_to = row_from, row_to[0]
        state = DirectedState(*self._fields)
        new = hmc_step(self.path, state, beta_from, step_size, self.kernel.num_leapfrog, generator)
        for mine, value in zip(self._fields, new):
            if mine is not None:
                mine.copy_(value)
        self.log_weights.add_(self.path.log_density_ratio(state, beta_from, beta_to))
