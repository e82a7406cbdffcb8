"""Small random fully visible models (categorical, spin, bernoulli) for the tests, with a brute-force log f."""

from __future__ import annotations

import itertools

import torch
from raise_eval.models import FullyVisibleModel


def random_model(sites: str, size: int, q: int = 3, *, seed: int = 0, scale: float = 1.0) -> FullyVisibleModel:
    """A model with standard normal fields and couplings (times `scale`), float64."""
    g = torch.Generator().manual_seed(seed)
    if sites == "categorical":
        j = torch.randn(size, q, size, q, generator=g, dtype=torch.float64) * scale
        j = (j + j.permute(2, 3, 0, 1)) / 2
        for i in range(size):
            j[i, :, i, :] = 0
        return FullyVisibleModel(torch.randn(size, q, generator=g, dtype=torch.float64), j, "categorical")
    j = torch.randn(size, size, generator=g, dtype=torch.float64) * scale
    j = (j + j.t()) / 2
    j.fill_diagonal_(0)
    return FullyVisibleModel(torch.randn(size, generator=g, dtype=torch.float64), j, sites)


def spin_ring(size: int = 8, *, seed: int = 5) -> FullyVisibleModel:
    """A ring of spins with standard normal fields and couplings, float64: sparse couplings, so that the kernel scans
    it by colour (two colours)."""
    g = torch.Generator().manual_seed(seed)
    j = torch.zeros(size, size, dtype=torch.float64)
    for i in range(size):
        j[i, (i + 1) % size] = j[(i + 1) % size, i] = float(torch.randn(1, generator=g, dtype=torch.float64))
    return FullyVisibleModel(torch.randn(size, generator=g, dtype=torch.float64), j, "spin")


def states(model: FullyVisibleModel) -> list[float]:
    return {"categorical": list(range(model.num_states)), "spin": [-1.0, 1.0], "bernoulli": [0.0, 1.0]}[model.sites]


def all_site_states(model: FullyVisibleModel) -> torch.Tensor:
    """Every configuration in the model's convention, shaped (q^L, L) (itertools order, not the library's)."""
    rows = list(itertools.product(states(model), repeat=model.n_visible))
    dtype = torch.int64 if model.sites == "categorical" else torch.float64
    return torch.tensor(rows, dtype=dtype)


def brute_log_f(model: FullyVisibleModel, v) -> float:
    """log f(v) from the definition, term by term, for one configuration v (a list)."""
    h, j = model.fields, model.couplings
    size = model.n_visible
    if model.sites == "categorical":
        v = [int(a) for a in v]
        total = sum(float(h[i, v[i]]) for i in range(size))
        return total + sum(float(j[i, v[i], k, v[k]]) for i in range(size) for k in range(i + 1, size))
    total = sum(float(h[i]) * v[i] for i in range(size))
    return total + sum(float(j[i, k]) * v[i] * v[k] for i in range(size) for k in range(i + 1, size))
