"""A sigmoid belief net with one layer of binary latents: z_i ~ Bernoulli(sigmoid(c_i)),
x_j | z ~ Bernoulli(sigmoid((W z + b)_j)).

The posterior couples the latents (explaining away), so it is sampled by single-site Gibbs updates
(`raise_eval.kernels.binary_gibbs`). Small nets (up to ~20 latents) have an exact log p(x) by enumeration.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from raise_eval.models.directed.base import DirectedLatentModel
from raise_eval.models.sampling import sample_bernoulli_logits
from torch import Tensor


class SigmoidBeliefNet(DirectedLatentModel):
    """One binary latent layer z (latent_dim) above binary data x (data_dim).

    Args:
        W: (data_dim, latent_dim) weights; b: (data_dim,) data biases; c: (latent_dim,) latent biases.
    """

    latent_type = "binary"

    def __init__(self, W: Tensor, b: Tensor, c: Tensor):
        if W.dim() != 2 or b.shape != (W.shape[0],) or c.shape != (W.shape[1],):
            raise ValueError(
                f"need W (data_dim, latent_dim), b (data_dim,), c (latent_dim,); got {tuple(W.shape)}, "
                f"{tuple(b.shape)}, {tuple(c.shape)}"
            )
        for name, t in (("W", W), ("b", b), ("c", c)):
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} has NaN or infinite entries")
        self.W, self.b, self.c = W, b, c
        self.data_dim, self.latent_dim = W.shape

    @classmethod
    def random(
        cls, data_dim: int, latent_dim: int, *, weight_std: float = 1.5, generator: torch.Generator, dtype=torch.float64
    ) -> SigmoidBeliefNet:
        def randn(*shape):
            return torch.randn(*shape, generator=generator, dtype=dtype)

        return cls(randn(data_dim, latent_dim) * weight_std, randn(data_dim), randn(latent_dim))

    def data_logits(self, z: Tensor) -> Tensor:
        """W z + b, shaped (*batch, data_dim)."""
        return z @ self.W.t() + self.b

    def log_prior(self, z: Tensor) -> Tensor:
        return (z * self.c - F.softplus(self.c)).sum(-1)

    def log_likelihood(self, x: Tensor, z: Tensor) -> Tensor:
        return self.log_likelihood_from_logits(x, self.data_logits(z))

    @staticmethod
    def log_likelihood_from_logits(x: Tensor, logits: Tensor) -> Tensor:
        """sum_j x_j a_j - softplus(a_j) for data logits a."""
        return (x * logits - F.softplus(logits)).sum(-1)

    def sample_prior(self, shape: tuple, generator: torch.Generator) -> Tensor:
        return sample_bernoulli_logits(self.c.expand(*shape, self.latent_dim), generator)

    def sample_data(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return sample_bernoulli_logits(self.data_logits(z), generator)

    def log_marginal(self, x: Tensor, max_latents: int = 20) -> Tensor:
        """Exact log p(x) by enumerating the 2^latent_dim latent states, shaped (*batch,)."""
        if self.latent_dim > max_latents:
            raise ValueError(
                f"exact log p(x) would enumerate 2^{self.latent_dim} latent states (limit 2^{max_latents})"
            )
        codes = torch.arange(2**self.latent_dim, device=x.device)
        z = ((codes.unsqueeze(-1) >> torch.arange(self.latent_dim, device=x.device)) & 1).to(self.W.dtype)
        joint = self.log_prior(z) + self.log_likelihood(x.unsqueeze(-2), z)
        return torch.logsumexp(joint, dim=-1)
