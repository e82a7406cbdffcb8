"""A linear-Gaussian latent model, z ~ N(0, I_d), x | z ~ N(W z + b, sigma^2 I_D): everything is exact.

Marginal p(x) = N(b, W W^T + sigma^2 I); posterior N(mu, S) with S = (I + W^T W / sigma^2)^-1 and
mu = S W^T (x - b) / sigma^2. The ground truth for testing BDMC, HMC and AIDE.
"""

from __future__ import annotations

import math

import torch
from raise_eval.models.directed.base import DirectedLatentModel
from torch import Tensor


class LinearGaussianModel(DirectedLatentModel):
    """z ~ N(0, I), x | z ~ N(W z + b, noise_std^2 I).

    Args:
        W: (data_dim, latent_dim) loading matrix; b: (data_dim,) offset; noise_std: observation noise (> 0).
    """

    latent_type = "continuous"
    data_support = "declared"  # real vectors: check_data checks their shape and finiteness

    def __init__(self, W: Tensor, b: Tensor, noise_std: float):
        if W.dim() != 2 or b.shape != (W.shape[0],):
            raise ValueError(
                f"W must be (data_dim, latent_dim) and b (data_dim,); got {tuple(W.shape)}, {tuple(b.shape)}"
            )
        if not noise_std > 0:
            raise ValueError(f"noise_std must be positive, got {noise_std}")
        self.W, self.b, self.noise_std = W, b, float(noise_std)
        self.data_dim, self.latent_dim = W.shape

    @classmethod
    def random(
        cls, data_dim: int, latent_dim: int, *, noise_std: float = 0.5, generator: torch.Generator, dtype=torch.float64
    ) -> LinearGaussianModel:
        W = torch.randn(data_dim, latent_dim, generator=generator, dtype=dtype)
        b = torch.randn(data_dim, generator=generator, dtype=dtype)
        return cls(W, b, noise_std)

    def check_data(self, x: Tensor, what: str = "data") -> Tensor:
        """x, or ValueError naming `what` unless it is real vectors shaped (..., data_dim) with finite values."""
        if x.shape[-1:] != (self.data_dim,):
            raise ValueError(f"{what} must be shaped (..., {self.data_dim}), got {tuple(x.shape)}")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{what} holds NaN or infinite values")
        return x

    # ------------------------------------------------------------------ densities and sampling
    def log_prior(self, z: Tensor) -> Tensor:
        return -0.5 * (z**2).sum(-1) - 0.5 * self.latent_dim * math.log(2 * math.pi)

    def log_prior_and_grad(self, z: Tensor) -> tuple[Tensor, Tensor]:
        return self.log_prior(z), -z

    def _residual(self, x: Tensor, z: Tensor) -> Tensor:
        return x - z @ self.W.t() - self.b

    def log_likelihood(self, x: Tensor, z: Tensor) -> Tensor:
        r = self._residual(x, z)
        var = self.noise_std**2
        return -0.5 * (r**2).sum(-1) / var - 0.5 * self.data_dim * math.log(2 * math.pi * var)

    def log_likelihood_and_grad(self, x: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        r = self._residual(x, z)
        var = self.noise_std**2
        value = -0.5 * (r**2).sum(-1) / var - 0.5 * self.data_dim * math.log(2 * math.pi * var)
        return value, (r @ self.W) / var

    def sample_prior(self, shape: tuple, generator: torch.Generator) -> Tensor:
        return torch.randn((*shape, self.latent_dim), generator=generator, dtype=self.W.dtype, device=self.W.device)

    def sample_data(self, z: Tensor, generator: torch.Generator) -> Tensor:
        noise = torch.randn((*z.shape[:-1], self.data_dim), generator=generator, dtype=z.dtype, device=z.device)
        return z @ self.W.t() + self.b + self.noise_std * noise

    # ------------------------------------------------------------------ exact answers
    def log_marginal(self, x: Tensor) -> Tensor:
        """Exact log p(x), shaped (*batch,)."""
        cov = self.W @ self.W.t() + self.noise_std**2 * torch.eye(
            self.data_dim, dtype=self.W.dtype, device=self.W.device
        )
        return torch.distributions.MultivariateNormal(self.b, covariance_matrix=cov).log_prob(x)

    def posterior(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Exact posterior mean (*batch, d) and covariance (d, d) of z given x."""
        eye = torch.eye(self.latent_dim, dtype=self.W.dtype, device=self.W.device)
        cov = torch.linalg.inv(eye + self.W.t() @ self.W / self.noise_std**2)
        mean = ((x - self.b) @ self.W / self.noise_std**2) @ cov
        return mean, cov


class GaussianPosterior:
    """A Gaussian q(z | x) = N(mean(x) + shift, scale^2 * cov) with full covariance (a `PosteriorApproximation`).

    With shift = 0 and scale = 1 it is the exact posterior of a `LinearGaussianModel`; other values make a
    deliberately poor "encoder" whose divergence from the posterior is known in closed form.
    """

    def __init__(self, model: LinearGaussianModel, shift: float = 0.0, scale: float = 1.0):
        self.model, self.shift, self.scale = model, float(shift), float(scale)

    def _mean_and_tril(self, x: Tensor) -> tuple[Tensor, Tensor]:
        mean, cov = self.model.posterior(x)  # the covariance does not depend on x
        return mean + self.shift, torch.linalg.cholesky(self.scale**2 * cov)

    def sample(self, x: Tensor, num_samples: int, generator: torch.Generator) -> Tensor:
        mean, tril = self._mean_and_tril(x)
        eps = torch.randn(
            (x.shape[0], num_samples, self.model.latent_dim), generator=generator, dtype=x.dtype, device=x.device
        )
        return mean.unsqueeze(1) + eps @ tril.t()

    def log_prob(self, x: Tensor, z: Tensor) -> Tensor:
        mean, tril = self._mean_and_tril(x)
        return torch.distributions.MultivariateNormal(mean.unsqueeze(1), scale_tril=tril).log_prob(z)

    def symmetric_kl_to_posterior(self) -> float:
        """KL(q || p) + KL(p || q) against the exact posterior (the same for every x)."""
        _, cov = self.model.posterior(torch.zeros(self.model.data_dim, dtype=self.model.W.dtype))
        d = self.model.latent_dim
        prec = torch.linalg.inv(cov)
        maha = self.shift**2 * float(torch.ones(d, dtype=cov.dtype) @ prec @ torch.ones(d, dtype=cov.dtype))
        s2 = self.scale**2
        # KL(N(m1, s2 C) || N(m0, C)) + KL(N(m0, C) || N(m1, s2 C)); the log-determinants cancel in the sum
        return 0.5 * (d * s2 + maha - d) + 0.5 * (d / s2 + maha / s2 - d)
