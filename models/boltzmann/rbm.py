"""Binary restricted Boltzmann machine: the two-layer case of `LayeredBoltzmannMachine`.

Energy E(v, h) = -v.vbias - h.hbias - v^T W h, so log f(v) = v.vbias + sum_j softplus(hbias_j + (v W)_j).
"""

from __future__ import annotations

import torch
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from torch import Tensor


class RBM(LayeredBoltzmannMachine):
    """A binary RBM with weights W (n_visible, n_hidden), visible biases (n_visible,) and hidden biases (n_hidden,)."""

    family = "RBM"

    def __init__(self, W: Tensor, vbias: Tensor, hbias: Tensor):
        super().__init__([W], [vbias, hbias])

    @classmethod
    def random(
        cls,
        n_visible: int,
        n_hidden: int,
        *,
        weight_std: float = 1.0,
        bias_std: float = 1.0,
        generator: torch.Generator,
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> RBM:
        """An RBM with Gaussian random parameters (for tests and examples)."""

        def randn(*shape):
            return torch.randn(*shape, generator=generator, dtype=dtype, device=device)

        return cls(randn(n_visible, n_hidden) * weight_std, randn(n_visible) * bias_std, randn(n_hidden) * bias_std)

    @property
    def W(self) -> Tensor:
        return self.weights[0]

    @property
    def vbias(self) -> Tensor:
        return self.biases[0]

    @property
    def hbias(self) -> Tensor:
        return self.biases[1]

    @property
    def n_hidden(self) -> int:
        return self.biases[1].shape[0]

    def log_unnormalized_prob(self, v: Tensor) -> Tensor:
        """log f(v) = log sum_h f(v, h) (minus the free energy), shaped (*batch,), for v shaped (*batch, n_visible)."""
        return self.log_unnormalized_marginal([v, None])

    def hidden_probs(self, v: Tensor) -> Tensor:
        """p(h_j = 1 | v), shaped (*batch, n_hidden)."""
        return self.layer_probs([v, None], 1)

    def visible_probs(self, h: Tensor) -> Tensor:
        """p(v_i = 1 | h), shaped (*batch, n_visible)."""
        return self.layer_probs([None, h], 0)

    def sample_hidden(self, v: Tensor, generator: torch.Generator) -> Tensor:
        """h ~ p(h | v), shaped (*batch, n_hidden)."""
        return self.sample_layer([v, None], 1, generator)

    def sample_visible(self, h: Tensor, generator: torch.Generator) -> Tensor:
        """v ~ p(v | h), shaped (*batch, n_visible)."""
        return self.sample_layer([None, h], 0, generator)
