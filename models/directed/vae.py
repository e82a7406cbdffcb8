"""A variational autoencoder: z ~ N(0, I), x | z ~ Bernoulli(decoder(z)), with an MLP encoder q(z | x) =
N(mu(x), diag(sigma(x)^2)) (Kingma & Welling, 2014). Trained by `train_vae` on the ELBO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from raise_eval.models.directed.base import DiagonalGaussianPosterior, DirectedLatentModel
from raise_eval.models.sampling import sample_bernoulli_logits
from torch import Tensor, nn

_ACTIVATIONS = {"tanh": nn.Tanh, "softplus": nn.Softplus, "relu": nn.ReLU}


@dataclass
class VAEConfig:
    """Architecture: data_dim -> hidden... -> 2 x latent_dim (encoder) and its mirror (decoder)."""

    data_dim: int = 784
    latent_dim: int = 10
    hidden: list = field(default_factory=lambda: [200, 200])
    activation: str = "tanh"  # smooth, so HMC's gradients are well behaved


def _mlp(sizes: list, activation: str) -> nn.Sequential:
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(_ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class VAE(nn.Module, DirectedLatentModel):
    """Gaussian latent, Bernoulli decoder, MLP encoder and decoder."""

    latent_type = "continuous"

    def __init__(self, config: VAEConfig):
        nn.Module.__init__(self)
        if config.activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {config.activation!r}")
        self.config = config
        self.data_dim, self.latent_dim = config.data_dim, config.latent_dim
        self.encoder = _mlp([config.data_dim, *config.hidden, 2 * config.latent_dim], config.activation)
        self.decoder = _mlp([config.latent_dim, *reversed(config.hidden), config.data_dim], config.activation)

    # ------------------------------------------------------------------ generative model
    def decoder_logits(self, z: Tensor) -> Tensor:
        shape = z.shape[:-1]
        return self.decoder(z.reshape(-1, self.latent_dim)).reshape(*shape, self.data_dim)

    def log_prior(self, z: Tensor) -> Tensor:
        return -0.5 * (z**2).sum(-1) - 0.5 * self.latent_dim * math.log(2 * math.pi)

    def log_prior_and_grad(self, z: Tensor) -> tuple[Tensor, Tensor]:
        return self.log_prior(z), -z

    def log_likelihood(self, x: Tensor, z: Tensor) -> Tensor:
        logits = self.decoder_logits(z)
        return (x * logits - F.softplus(logits)).sum(-1)

    def sample_prior(self, shape: tuple, generator: torch.Generator) -> Tensor:
        p = next(self.parameters())
        return torch.randn((*shape, self.latent_dim), generator=generator, dtype=p.dtype, device=p.device)

    def sample_data(self, z: Tensor, generator: torch.Generator) -> Tensor:
        with torch.no_grad():
            return sample_bernoulli_logits(self.decoder_logits(z), generator)

    # ------------------------------------------------------------------ inference network
    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder mean and log standard deviation, each (N, latent_dim)."""
        out = self.encoder(x)
        mean, log_std = out.chunk(2, dim=-1)
        return mean, log_std.clamp(-10.0, 5.0)

    def posterior_approximation(self) -> DiagonalGaussianPosterior:
        """The encoder as a `PosteriorApproximation` (for IWAE, the ELBO and AIDE)."""
        return DiagonalGaussianPosterior(self.encode)

    def elbo(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Single-sample reparameterized ELBO per example, shaped (N,) (for training)."""
        mean, log_std = self.encode(x)
        eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        z = mean + log_std.exp() * eps
        kl = 0.5 * (mean**2 + (2 * log_std).exp() - 1 - 2 * log_std).sum(-1)  # analytic KL(q || N(0, I))
        return self.log_likelihood(x, z) - kl
