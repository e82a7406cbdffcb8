"""The interface of directed latent-variable models p(z) p(x | z) (VAEs and kin) that BDMC and AIDE evaluate.

A model provides the log prior, the log likelihood and ancestral sampling; gradients default to autograd. Tensors
carry batch dimensions: z is (*batch, latent_dim), x is (*batch, data_dim) and broadcasts against z's batch (an
example x of shape (N, 1, D) against chains z of shape (N, C, d)).

Approximate posteriors ("encoders", the target algorithms of AIDE and the proposals of IWAE) implement
`PosteriorApproximation`: sample z ~ q(z | x) and evaluate log q(z | x).
"""

from __future__ import annotations

from typing import Optional, Protocol

import torch
from torch import Tensor


class DirectedLatentModel:
    """Base class of p(z) p(x | z). Subclasses define `latent_dim`, `data_dim`, `latent_type` ('continuous' or
    'binary'), `log_prior`, `log_likelihood`, `sample_prior` and `sample_data`."""

    latent_dim: int
    data_dim: int
    latent_type: str = "continuous"
    family = "directed"  # `models.contracts.Model`
    # 'binary': 0/1 vectors, which the caller checks; 'declared': `check_data` checks the likelihood's own support
    data_support: str = "binary"

    def describe(self) -> str:
        return f"{type(self).__name__}({self.latent_dim} -> {self.data_dim})"

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's tensors (its first parameter or buffer; the default dtype without any)."""
        return self._first_tensor().dtype

    @property
    def device(self) -> torch.device:
        """The device of the model's tensors (its first parameter or buffer; the CPU without any)."""
        return self._first_tensor().device

    def _first_tensor(self) -> Tensor:
        # An nn.Module subclass: its parameters, else its buffers (a plain-function decoder has none, but its standard
        # prior's buffer follows model.to(...)); a plain class: the first tensor it holds (an SBN's W).
        if isinstance(self, torch.nn.Module):
            sources = (self.parameters(), self.buffers())
        else:
            sources = ((t for t in vars(self).values() if isinstance(t, Tensor)),)
        for source in sources:
            for t in source:
                return t
        return torch.zeros(0)

    def check_data(self, x: Tensor, what: str = "data") -> Tensor:
        """x: a model of 'binary' data leaves the check of its 0/1 vectors to the caller (`raise_eval.io`)."""
        return x

    def posterior_approximation(self) -> Optional[PosteriorApproximation]:
        """The model's encoder q(z | x), or None (the default: no encoder)."""
        return None

    def data_logits(self, z: Tensor) -> Optional[Tensor]:
        """The Bernoulli logits of x given binary z where the model has them in closed form; None by default."""
        return None

    def log_prior(self, z: Tensor) -> Tensor:
        """log p(z), shaped (*batch,)."""
        raise NotImplementedError

    def log_likelihood(self, x: Tensor, z: Tensor) -> Tensor:
        """log p(x | z), shaped like the broadcast batch of x and z."""
        raise NotImplementedError

    def sample_prior(self, shape: tuple, generator: torch.Generator) -> Tensor:
        """z ~ p(z), shaped (*shape, latent_dim)."""
        raise NotImplementedError

    def sample_data(self, z: Tensor, generator: torch.Generator) -> Tensor:
        """x ~ p(x | z), shaped (*batch, data_dim)."""
        raise NotImplementedError

    def sample_joint(self, num: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """(z, x) ~ p(z) p(x | z), shaped (num, latent_dim) and (num, data_dim).

        z is an exact sample of the posterior p(z | x) for the simulated x: BDMC's reverse chains start there.
        """
        z = self.sample_prior((num,), generator)
        return z, self.sample_data(z, generator)

    def log_joint(self, x: Tensor, z: Tensor) -> Tensor:
        """log p(x, z) = log p(z) + log p(x | z)."""
        return self.log_prior(z) + self.log_likelihood(x, z)

    # ------------------------------------------------------------------ gradients (continuous latents)
    def log_prior_and_grad(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """(log p(z), d log p(z) / dz); autograd unless overridden."""
        return _value_and_grad(self.log_prior, z, f"log p(z) of the {type(self).__name__}")

    def log_likelihood_and_grad(self, x: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """(log p(x | z), d log p(x | z) / dz); autograd unless overridden."""
        decoder = getattr(self, "decoder", None)
        what = f"log p(x | z) of the {type(self).__name__}" + (
            "" if decoder is None else f" (decoder {getattr(decoder, '__name__', type(decoder).__name__)})"
        )
        return _value_and_grad(lambda zz: self.log_likelihood(x, zz), z, what)


def _value_and_grad(fn, z: Tensor, what: str = "the log-density") -> tuple[Tensor, Tensor]:
    """(fn(z), d fn(z).sum() / dz) by autograd; ValueError naming `what` when fn's output does not depend on z
    (no gradient reaches z: the model ignores z, or detaches it, or computes under torch.no_grad())."""
    with torch.enable_grad():
        zz = z.detach().requires_grad_(True)
        value = fn(zz)
        grad = None
        if isinstance(value, Tensor) and value.requires_grad:
            (grad,) = torch.autograd.grad(value.sum(), zz, allow_unused=True)
    if grad is None:
        raise ValueError(
            f"{what} does not depend on z (no gradient reaches z): HMC moves z along that gradient. Make the model "
            "use its input z, without detach(), .numpy() or torch.no_grad() between z and its output"
        )
    return value.detach(), grad


class PosteriorApproximation(Protocol):
    """An inference algorithm with a tractable output density: q(z | x)."""

    def sample(self, x: Tensor, num_samples: int, generator: torch.Generator) -> Tensor:
        """z ~ q(z | x_n), shaped (N, num_samples, latent_dim) for x shaped (N, data_dim)."""
        ...

    def log_prob(self, x: Tensor, z: Tensor) -> Tensor:
        """log q(z | x_n), shaped (N, S) for z shaped (N, S, latent_dim)."""
        ...


class DiagonalGaussianPosterior:
    """q(z | x) = N(mean(x), diag(std(x)^2)) given a function x -> (mean, log_std), e.g. a VAE encoder."""

    def __init__(self, encode):
        self.encode = encode

    def sample(self, x: Tensor, num_samples: int, generator: torch.Generator) -> Tensor:
        mean, log_std = self.encode(x)
        eps = torch.randn(
            (mean.shape[0], num_samples, mean.shape[-1]), generator=generator, device=mean.device, dtype=mean.dtype
        )
        return mean.unsqueeze(1) + log_std.exp().unsqueeze(1) * eps

    def log_prob(self, x: Tensor, z: Tensor) -> Tensor:
        mean, log_std = self.encode(x)
        return gaussian_log_density(z, mean.unsqueeze(1), log_std.unsqueeze(1))


def gaussian_log_density(z: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log N(z; mean, diag(exp(log_std)^2)) summed over the last dimension."""
    return (-0.5 * ((z - mean) / log_std.exp()) ** 2 - log_std - 0.5 * torch.log(torch.tensor(2 * torch.pi))).sum(-1)
