"""Small energy models for the tests: neural energies on binary, spin and categorical sites (exact by enumeration),
quadratic energies (Gaussians, log Z in closed form), a mixture of two well separated Gaussians, and an MLP energy
whose narrow layer keeps the truth tractable at MNIST size."""

from __future__ import annotations

import math

import torch
from raise_eval.models import EnergyModel, categorical


class MLPEnergy(torch.nn.Module):
    """E(x) = w2 . tanh(W1 x + b1) + b . x over the flattened input: a small neural energy."""

    def __init__(self, width: int, hidden: int = 6, seed: int = 0, scale: float = 1.0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w1 = torch.nn.Parameter(torch.randn(width, hidden, generator=g, dtype=torch.float64) * scale)
        self.b1 = torch.nn.Parameter(torch.randn(hidden, generator=g, dtype=torch.float64) * 0.5)
        self.w2 = torch.nn.Parameter(torch.randn(hidden, generator=g, dtype=torch.float64) * scale)
        self.b = torch.nn.Parameter(torch.randn(width, generator=g, dtype=torch.float64) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(start_dim=1)
        return torch.tanh(x @ self.w1 + self.b1) @ self.w2 + x @ self.b


def neural_energy(kind: str, size: int = 4, q: int = 3, seed: int = 0, scale: float = 1.0) -> EnergyModel:
    """A neural energy on `size` sites of `kind` ('binary', 'spin' or 'categorical' with q states), float64."""
    support = categorical(q) if kind == "categorical" else kind
    width = size * (q if kind == "categorical" else 1)
    return EnergyModel(MLPEnergy(width, seed=seed, scale=scale), support=support, event_shape=(size,))


class QuadraticEnergy(torch.nn.Module):
    """E(x) = (x - mean)^T P (x - mean) / 2 with P = A A^T + diag: a Gaussian, log Z = d/2 log 2 pi - log det P / 2."""

    def __init__(self, dim: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(dim, dim, generator=g, dtype=torch.float64) / math.sqrt(dim)
        diagonal = 0.5 + torch.rand(dim, generator=g, dtype=torch.float64)
        self.register_buffer("precision", a @ a.t() + torch.diag(diagonal))
        self.register_buffer("mean", torch.randn(dim, generator=g, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x - self.mean
        return 0.5 * ((z @ self.precision) * z).sum(-1)

    def log_partition(self) -> float:
        dim = self.mean.numel()
        return 0.5 * dim * math.log(2 * math.pi) - 0.5 * float(torch.logdet(self.precision))


def gaussian_energy(dim: int, seed: int = 0) -> tuple[EnergyModel, float]:
    """(a quadratic energy model on R^dim, its exact log Z)."""
    energy = QuadraticEnergy(dim, seed)
    return EnergyModel(energy, support="real", event_shape=(dim,)), energy.log_partition()


class TwoGaussians(torch.nn.Module):
    """E(x) = -log(exp(-|x - m|^2 / 2s^2) + exp(-|x + m|^2 / 2s^2)): two equal, well separated modes at +-m;
    Z = 2 (2 pi s^2)^(d/2)."""

    def __init__(self, dim: int, separation: float, std: float):
        super().__init__()
        self.register_buffer("m", torch.full((dim,), separation / (2 * math.sqrt(dim)), dtype=torch.float64))
        self.std = std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = -((x - self.m) ** 2).sum(-1) / (2 * self.std**2)
        b = -((x + self.m) ** 2).sum(-1) / (2 * self.std**2)
        return -torch.logaddexp(a, b)

    def log_partition(self) -> float:
        dim = self.m.numel()
        return math.log(2) + 0.5 * dim * math.log(2 * math.pi * self.std**2)


class HiddenSoftplusEnergy(torch.nn.Module):
    """E(x) = |x - b|^2 / 2 - sum_j softplus(c_j + w_j . x): an MLP energy dim-H-1 (a Gaussian-Bernoulli RBM's free
    energy) whose narrow layer keeps the truth tractable at any dim: f(x) = sum_h exp(-|x - b|^2 / 2 + h . (c + W^T x))
    over h in {0, 1}^H, so Z = (2 pi)^(dim/2) sum_h exp(c . h + b . W h + |W h|^2 / 2), a mixture of 2^H unit
    Gaussians at b + W h, sampled exactly (h from its marginal, then x). `scale`: the spread of W's entries (the
    modes' separation: |w_j| about scale sqrt(dim)). Parameters in `dtype`; the truth in float64."""

    def __init__(self, dim: int, hidden: int, seed: int = 0, scale: float = 0.1, dtype=torch.float32):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        b = torch.rand(dim, generator=g, dtype=torch.float64)
        w = scale * torch.randn(dim, hidden, generator=g, dtype=torch.float64)
        c = torch.randn(hidden, generator=g, dtype=torch.float64) - 0.5 * (w**2).sum(0)  # no mode dominating
        self.b, self.w, self.c = (torch.nn.Parameter(t.to(dtype)) for t in (b, w, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((x - self.b) ** 2).sum(-1) - torch.nn.functional.softplus(self.c + x @ self.w).sum(-1)

    def _hidden(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(every hidden state h (2^H, H), the log of its term in Z less (2 pi)^(dim/2)), float64."""
        hidden = self.c.numel()
        h = ((torch.arange(2**hidden).unsqueeze(1) >> torch.arange(hidden)) & 1).to(torch.float64)
        with torch.no_grad():
            shift = h @ self.w.double().t()
            return h, h @ self.c.double() + shift @ self.b.double() + 0.5 * (shift**2).sum(-1)

    def log_partition(self) -> float:
        return float(torch.logsumexp(self._hidden()[1], 0)) + 0.5 * self.b.numel() * math.log(2 * math.pi)

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n exact draws (n, dim) in the parameters' dtype."""
        h, log_terms = self._hidden()
        chosen = h[torch.multinomial(torch.softmax(log_terms, 0), n, replacement=True, generator=generator)]
        with torch.no_grad():
            mean = self.b.double() + chosen @ self.w.double().t()
        return (mean + torch.randn(mean.shape, generator=generator, dtype=torch.float64)).to(self.b.dtype)
