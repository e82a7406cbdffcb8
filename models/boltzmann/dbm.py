"""Deep Boltzmann machine: the layered chain v = x_0, h_1 = x_1, ..., h_L = x_L with L >= 2 hidden layers.

The energy, conditionals and partial sums are those of `LayeredBoltzmannMachine`; a DBM adds the mean-field
posterior q(h | v) = prod_l prod_j Bernoulli(mu_lj) (Salakhutdinov & Hinton, 2009) and its lower bound on
log f(v) = log sum_h f(v, h):

    log f(v) >= E_q[log f(v, h)] + H(q)
              = sum_l b_l . mu_l + sum_l mu_l^T W_l mu_{l+1} + sum_{l>=1} H(mu_l),   mu_0 = v.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine, random_chain_parameters
from torch import Tensor


class DBM(LayeredBoltzmannMachine):
    """A DBM with weights[l] shaped (n_l, n_{l+1}) and biases[l] shaped (n_l,), l = 0 the visible layer.

    Args:
        weights: L >= 2 weight matrices.
        biases: L + 1 bias vectors.
    """

    family = "DBM"

    def __init__(self, weights: Sequence[Tensor], biases: Sequence[Tensor]):
        super().__init__(weights, biases)
        if self.num_layers < 3:
            raise ValueError(
                f"a DBM has at least two hidden layers; got {self.num_layers - 1} (use RBM for one hidden layer)"
            )

    @classmethod
    def random(
        cls,
        layer_sizes: Sequence[int],
        *,
        weight_std: float = 1.0,
        bias_std: float = 1.0,
        generator: torch.Generator,
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> DBM:
        """A DBM with Gaussian random parameters (for tests and examples)."""
        return cls(
            *random_chain_parameters(
                layer_sizes, weight_std=weight_std, bias_std=bias_std, generator=generator, dtype=dtype, device=device
            )
        )

    def mean_field(self, v: Tensor, *, max_iterations: int = 100, tolerance: float = 1e-6) -> list[Tensor]:
        """Mean-field marginals [v, mu_1, ..., mu_L] of q(h | v), each shaped (*batch, n_l), in float64.

        Initialized bottom-up with the doubled-input trick (a hidden layer below the top gets its bottom-up
        input twice, standing in for the missing top-down input), then coordinate ascent on the bound: the odd
        layers given the even ones, then the even hidden layers given the odd ones. Each half-sweep maximizes the
        bound exactly in the layers it updates, so the bound never decreases. Stops when no marginal moves by
        more than `tolerance` or after `max_iterations` sweeps.
        """
        m = self.to(dtype=torch.float64)
        mu: list = [v.to(dtype=torch.float64, device=m.device)]
        for l in range(1, m.num_layers):
            below = torch.matmul(mu[l - 1], m.weights[l - 1]) * m.weight_scale
            factor = 2.0 if l + 1 < m.num_layers else 1.0
            mu.append(torch.sigmoid(m.biases[l] + factor * below))
        for _ in range(max_iterations):
            change = 0.0
            for parity in (1, 0):
                for l in range(1, m.num_layers):
                    if l % 2 == parity:
                        new = m.layer_probs(mu, l)
                        change = max(change, float((new - mu[l]).abs().max()))
                        mu[l] = new
            if change <= tolerance:
                break
        return mu

    def mean_field_bound(self, v: Tensor, marginals: Sequence[Tensor] | None = None) -> Tensor:
        """The mean-field lower bound on log f(v), float64, shaped (*batch,); `marginals` from `mean_field`
        (computed when None)."""
        mu = self.mean_field(v) if marginals is None else list(marginals)
        m = self.to(dtype=torch.float64)
        bound = m.log_unnormalized_joint(mu)  # linear in each layer: E_q[log f] for a factorized q
        for p in mu[1:]:
            bound = bound + _bernoulli_entropy(p).sum(-1)
        return bound


def _bernoulli_entropy(p: Tensor) -> Tensor:
    """H(Bernoulli(p)) elementwise, 0 at p = 0 and p = 1."""
    return -(torch.xlogy(p, p) + torch.xlogy(1 - p, 1 - p))


def mean_field_logits(marginals: Sequence[Tensor], clamp: float = 20.0) -> list[Tensor]:
    """Logits of mean-field marginals, clamped to [-clamp, clamp] so that a proposal built from them gives every
    configuration positive probability (importance sampling stays unbiased)."""
    return [torch.logit(p.double(), eps=None).clamp(-clamp, clamp) for p in marginals]
