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

from raise_eval.models.directed.base import DirectedLatentModel, PosteriorApproximation


def _log_weights(
    model: DirectedLatentModel,
    x: Tensor,
    proposal: PosteriorApproximation,
    num_samples: int,
    generator: torch.Generator,
    chunk: int,
) -> Tensor:
    parts = []
    with torch.no_grad():
        for start in range(0, num_samples, chunk):
            k = min(chunk, num_samples - start)
            z = proposal.sample(x, k, generator)  # (N, k, d)
            parts.append(model.log_joint(x.unsqueeze(1), z) - proposal.log_prob(x, z))
    return torch.cat(parts, dim=1).double()


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
    log_w = _log_weights(model, x, proposal, num_samples, generator, chunk)
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
    return _log_weights(model, x, proposal, num_samples, generator, chunk).mean(dim=1)
