"""Importance-sampling estimators of log p(x) with a tractable proposal q(z | x) (e.g. a VAE encoder).

- `elbo`: mean over samples of log p(x, z) - log q(z | x), a (deterministic in expectation) lower bound;
- `iwae`: log mean_k p(x, z_k) / q(z_k | x) with k samples (Burda et al., 2016), a stochastic lower bound that
  tightens as k grows.
Both return one value per example, shaped (N,).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from raise_eval.annealing import check_log_weights
from raise_eval.models.directed.base import DirectedLatentModel, PosteriorApproximation


def _log_weights(
    model: DirectedLatentModel,
    x: Tensor,
    proposal: PosteriorApproximation,
    num_samples: int,
    generator: torch.Generator,
    chunk: int,
    stage: str,
) -> Tensor:
    """log p(x, z_k) - log q(z_k | x) for k samples of the proposal, float64 shaped (N, num_samples); checked for
    NaN and +inf (`NonFiniteLogWeightError` naming `stage`)."""
    parts = []
    with torch.no_grad():
        for start in range(0, num_samples, chunk):
            k = min(chunk, num_samples - start)
            z = proposal.sample(x, k, generator)  # (N, k, d)
            parts.append(model.log_joint(x.unsqueeze(1), z) - proposal.log_prob(x, z))
    log_w = torch.cat(parts, dim=1).double()
    check_log_weights(log_w, stage)
    return log_w


def iwae(
    model: DirectedLatentModel,
    x: Tensor,
    proposal: PosteriorApproximation,
    num_samples: int,
    *,
    generator: torch.Generator,
    chunk: int = 100,
) -> Tensor:
    """IWAE-k estimate of log p(x_n), shaped (N,)."""
    log_w = _log_weights(model, x, proposal, num_samples, generator, chunk, f"IWAE-{num_samples}")
    return torch.logsumexp(log_w, dim=1) - math.log(num_samples)


def elbo(
    model: DirectedLatentModel,
    x: Tensor,
    proposal: PosteriorApproximation,
    num_samples: int = 100,
    *,
    generator: torch.Generator,
    chunk: int = 100,
) -> Tensor:
    """Monte Carlo ELBO E_q[log p(x, z) - log q(z | x)] per example with `num_samples` samples, shaped (N,)."""
    return _log_weights(model, x, proposal, num_samples, generator, chunk, "the ELBO").mean(dim=1)
