"""The annealing step of the geometric path of a fully visible pairwise model, as a step program
(`contracts.StepProgram`).

The same step as `FullyVisiblePath.transition` followed by its `log_density_ratio`: the palindromic single-site scan
of `kernels.site_gibbs` (Gibbs draws or Metropolis steps, by colour where the coupling graph allows) at beta_from,
then the log-weight increment (beta_to - beta_from) (log f(v) - log f_base(v)) in float64, written with the inverse
temperatures as 0-d float64 tensors on the device, so that a CUDA graph can capture many steps (`step_programs`):
the fields at beta, (1 - beta) c + beta h, and each site's logits, fields + beta u, read beta from a tensor, and
nothing reads a value back to the host (no data-dependent shapes, no branching on values). Every draw is the eager
scan's, in its order, from the given generator, and the arithmetic is the eager kernel's op for op (the logits'
fields + beta u as one multiply-add, `site_gibbs._scaled_add`), so that on the CPU the program computes the eager
loop's numbers to the bit (tests/kernels/test_site_program.py).

On a GPU a scan is 2L site updates of a dozen small kernels each (L = 53: about 1,300 launches a step), which is why
the fully visible models need graphs most.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from raise_eval.kernels.site_gibbs import scan_


class SiteScanProgram:
    """The single-site scan and weight update of `path` (a `paths.fully_visible.FullyVisiblePath`) as a step
    program: the chains' site codes (int64, batch shape B) and float64 log-weights (B) in tensors of its own."""

    def __init__(self, path):
        model = path.model
        self.path = path
        self.device = model.device
        self.method = path.method
        self.base_fields = path.site_parameters(0.0)[0]  # (L, q): c in the categorical form
        self.target_fields = model.categorical_parameters()[0]  # (L, q): h
        self.tables = path.coupling_tables()
        self.log_weights: Optional[Tensor] = None  # set by `begin`

    def begin(
        self, state: Tensor, log_weights: Optional[Tensor], beta: float, steps: int = 0, start_step: int = 0
    ) -> None:
        """Load `state` (int64 codes (*B, L), not modified) and the log-weights to add to (float64 shaped B; zeros
        when None; a given tensor is added to in place, as `anneal` does). `beta`, `steps` and `start_step` change
        nothing here: the scan carries nothing from one step to the next but the codes."""
        self.batch_shape = state.shape[:-1]
        self.codes = state.reshape(-1, state.shape[-1]).clone(memory_format=torch.contiguous_format)  # (C, L)
        if log_weights is None:
            log_weights = torch.zeros(self.batch_shape, dtype=torch.float64, device=self.device)
        # accumulated in place; a non-contiguous tensor through a contiguous copy (`finish` writes it back)
        self._given = log_weights
        self.log_weights = log_weights if log_weights.is_contiguous() else log_weights.contiguous()

    def finish(self, beta: float) -> Tensor:
        """The log-weights the run was given (or made), holding the run's sums (`beta` changes nothing here)."""
        if self._given is not self.log_weights:
            self._given.copy_(self.log_weights)
        return self._given

    def state(self, beta: float) -> Tensor:
        """The chains' codes shaped (*B, L) (a view of the program's own tensor)."""
        return self.codes.view(*self.batch_shape, self.codes.shape[-1])

    def step(self, beta_from: Tensor, beta_to: Tensor, generator: torch.Generator) -> None:
        """One scan at beta_from and the weight update to beta_to (0-d float64 tensors on the device), in place."""
        fields = (1 - beta_from) * self.base_fields + beta_from * self.target_fields  # as `path.site_parameters`
        scan_(self.codes, fields, self.tables, beta_from, generator, self.method)
        # (log f - log f_base) times the step, as `path.log_density_ratio` computes it, on the batch-shaped codes
        slope = self.path.log_density_derivative(self.state(0.0), 0.0)
        self.log_weights.add_(slope * (beta_to - beta_from))
