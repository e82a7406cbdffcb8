"""BDMC's annealing step with HMC transitions, as a step program (`contracts.StepProgram`).

The transition of `kernels.hmc.hmc_step` (momentum draw, L leapfrog steps, a Metropolis correction per chain) and the
directed path's weight update (beta' - beta) log p(x | z), with the inverse temperature and the step sizes read from
device tensors (a row of the schedule table `schedule` builds: the betas and the kernel's step sizes at each), so that
`step_programs.run_program` can capture many transitions in one CUDA graph: on a GPU a small decoder's transition is
mostly launches. The chains' state (latents and the cached log-densities and gradients) lives in tensors of the
program's own, which each step overwrites. A decoder that reads values back to the host cannot be captured: its steps
then run one at a time (`run_program` says so), with the same numbers.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from raise_eval.kernels.directed_state import DirectedState
from raise_eval.kernels.hmc import HMCKernel, hmc_step


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

    def begin(self, state: DirectedState, log_weights: Optional[Tensor], beta: float, steps: int = 0) -> None:
        """Load `state` (not modified) and the log-weights to add to ((N, C) float64; zeros when None)."""
        self._fields = [None if t is None else t.clone(memory_format=torch.contiguous_format) for t in state]
        if log_weights is None:
            log_weights = torch.zeros(state.log_likelihood.shape, dtype=torch.float64, device=self.device)
        self.log_weights = log_weights

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
