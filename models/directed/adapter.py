"""Wrap, don't subclass: `DecoderModel` turns a researcher's own PyTorch modules into a `DirectedLatentModel`.

    model = DecoderModel(decoder, latent_dim=50, likelihood="bernoulli", encoder=encoder)

- decoder: any nn.Module (or function) mapping latents (M, latent_dim) to the parameters of p(x | z) for each
  row, as one tensor or a tuple (the layouts are in `raise_eval.models.directed.likelihoods`);
- likelihood: a name ('bernoulli', 'gaussian', 'discretized_logistic', 'discretized_logistic_mixture') with its
  options (scale=, log_scale=, scale_kind=, num_components=), or a `Likelihood` object;
- prior: standard normal by default, or an object following `Prior` (log_prob and sample with a generator);
  a prior holding tensors should be an nn.Module (its tensors buffers or parameters) so that `.to()` moves it;
- encoder (optional): x (N, D) -> (mean, log_std), each (N, latent_dim), or one tensor (N, 2 latent_dim) holding
  [mean | log_std]; encoder_scale='log_var' reads the second half as a log-variance. It becomes the
  `posterior_approximation()` used by the ELBO, IWAE and AIDE.

Gradients come from autograd: one decoder forward and one backward per evaluation of log p(x | z) and its
gradient. Batches follow `DirectedLatentModel`: z (*batch, latent_dim) is flattened to (M, latent_dim) for the
decoder and x (*batch, D) broadcasts against z's batch. The wrapped modules are registered as submodules (so
`model.to(device, dtype)` moves them) and put in eval mode (dropout or batch-norm statistics would make the
density random). Construction calls the decoder (and encoder, and a user's prior) once on zeros to check their
output layouts, and the decoder also on two draws from N(0, I) (a fixed seed of its own; the global random state is
untouched): an output with NaN or infinite values is refused there, saying that the model produced it, rather than
becoming NaN bounds later. A decoder that is a plain function (no parameters) works: the model's dtype and device
are then those of its prior (float32 on the CPU until `model.to(...)` moves it). Pass data_dim=D when you know it:
a single output tensor is cut into as many blocks as the likelihood has parameters, so a decoder giving means only
to a likelihood that expects [means | log-scales] would otherwise be read as D/2 means and D/2 log-scales
(`describe()` and the data-shape error then say how it was read).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Protocol, Union

import torch
from raise_eval.models.directed.base import DiagonalGaussianPosterior, DirectedLatentModel, _value_and_grad
from raise_eval.models.directed.likelihoods import Likelihood, make_likelihood
from torch import Tensor, nn

_ENCODER_SCALES = ("log_std", "log_var")


class Prior(Protocol):
    """A prior p(z) over latents of size latent_dim.

    log_prob(z): log p(z) for z (*batch, latent_dim), summed over the latent dimension: shaped (*batch,);
        differentiable in z (HMC takes its gradient by autograd).
    sample(shape, generator): z ~ p(z) shaped (*shape, latent_dim), drawing only from `generator` (a
        torch.Generator on the device the samples should live on).

    Samples must have the dtype and device of the decoder's parameters (checked when the model is built). A prior
    with tensors of its own should be an nn.Module holding them as buffers or parameters: `DecoderModel` then
    registers it as a submodule and `model.to(device, dtype)` moves it with the decoder; a plain object stays where
    it was built.
    """

    def log_prob(self, z: Tensor) -> Tensor: ...

    def sample(self, shape: tuple, generator: torch.Generator) -> Tensor: ...


class StandardNormalPrior(nn.Module):
    """p(z) = N(0, I_latent_dim). Samples take the dtype and device of the module (`.to()` moves it)."""

    def __init__(self, latent_dim: int):
        super().__init__()
        self.latent_dim = latent_dim
        self.register_buffer("_like", torch.zeros(0), persistent=False)  # carries dtype and device

    def log_prob(self, z: Tensor) -> Tensor:
        return -0.5 * (z**2).sum(-1) - 0.5 * self.latent_dim * math.log(2 * math.pi)

    def log_prob_and_grad(self, z: Tensor) -> tuple[Tensor, Tensor]:
        return self.log_prob(z), -z

    def sample(self, shape: tuple, generator: torch.Generator) -> Tensor:
        like = self._like
        return torch.randn((*shape, self.latent_dim), generator=generator, dtype=like.dtype, device=like.device)


class DecoderModel(nn.Module, DirectedLatentModel):
    """p(z) p(x | z) with p(x | z) = likelihood(decoder(z)); see the module docstring.

    Args:
        decoder: nn.Module or callable, (M, latent_dim) -> likelihood parameters for M latent vectors.
        latent_dim: size of z.
        likelihood: a likelihood name or object (default 'bernoulli').
        prior: None for N(0, I), or a `Prior` (an nn.Module if it holds tensors, so that `.to()` moves it);
            checked on zeros and on two samples when the model is built.
        encoder: optional nn.Module or callable x (N, D) -> (mean, log_std) or one (N, 2 latent_dim) tensor.
        encoder_scale: 'log_std' (default) or 'log_var': what the encoder's second output is.
        data_dim: D, checked against the decoder's output when given (inferred from it otherwise; give it to catch
            a single output tensor cut into the wrong number of blocks when the model is built).
        **likelihood_options: scale=, log_scale=, scale_kind= ('gaussian'), num_components= (the mixture).
    """

    latent_type = "continuous"
    data_support = "declared"  # the likelihood's own (check_data)

    def __init__(
        self,
        decoder: Union[nn.Module, Callable],
        latent_dim: int,
        likelihood: Union[str, Likelihood] = "bernoulli",
        *,
        prior: Optional[Prior] = None,
        encoder: Optional[Union[nn.Module, Callable]] = None,
        encoder_scale: str = "log_std",
        data_dim: Optional[int] = None,
        **likelihood_options,
    ):
        nn.Module.__init__(self)
        if isinstance(latent_dim, bool) or not isinstance(latent_dim, int) or latent_dim < 1:
            raise ValueError(f"latent_dim must be a positive integer, got {latent_dim!r}")
        if not callable(decoder):
            raise ValueError(f"decoder must be an nn.Module or a function of z, got {type(decoder).__name__}")
        if encoder is not None and not callable(encoder):
            raise ValueError(f"encoder must be an nn.Module or a function of x, got {type(encoder).__name__}")
        if encoder_scale not in _ENCODER_SCALES:
            raise ValueError(f"encoder_scale must be one of {_ENCODER_SCALES}, got {encoder_scale!r}")
        if prior is not None and not all(callable(getattr(prior, name, None)) for name in ("log_prob", "sample")):
            raise ValueError(
                f"prior must have log_prob(z) and sample(shape, generator) (see raise_eval.models.directed.adapter."
                f"Prior); got {type(prior).__name__}"
            )
        if isinstance(prior, torch.distributions.Distribution):
            raise ValueError(
                "a torch.distributions prior cannot sample from an explicit torch.Generator; wrap it in an object "
                "with log_prob(z) (summed over the latent dimension) and sample(shape, generator)"
            )
        self.latent_dim = latent_dim
        self.decoder = decoder  # registered as a submodule when it is an nn.Module
        self.encoder = encoder
        self.encoder_scale = encoder_scale
        self.likelihood = make_likelihood(likelihood, **likelihood_options)
        self.prior = StandardNormalPrior(latent_dim) if prior is None else prior
        self.eval()
        like = self._parameter_like()
        self.prior_is_standard_normal = prior is None
        if prior is None:
            self.prior.to(dtype=like.dtype, device=like.device)
        self.output_reading: Optional[str] = None  # how a single output tensor was cut into blocks (see describe)
        self.data_dim = self._check_decoder(like, data_dim)
        if prior is not None:
            self._check_prior(like)
        if encoder is not None:
            self._check_encoder(like)

    # ------------------------------------------------------------------ construction checks
    def _parameter_like(self) -> Tensor:
        self._has_tensors = True
        for module in (self.decoder, self.likelihood):
            if isinstance(module, nn.Module):
                for t in module.parameters():
                    return t
                for t in module.buffers():
                    return t
        self._has_tensors = False  # a function decoder: nothing fixes the dtype and device
        return torch.zeros(0)

    def _check_decoder(self, like: Tensor, data_dim: Optional[int]) -> int:
        z = torch.zeros(2, self.latent_dim, dtype=like.dtype, device=like.device)
        with torch.no_grad():
            out = self.decoder(z)
            try:
                params = self.likelihood.split(out)
            except ValueError as e:
                shape = f"(2, {self.latent_dim})"
                raise ValueError(f"{e} (checked on the decoder's output for z of shape {shape})") from None
            if params[0].shape[0] != 2:
                raise ValueError(
                    f"the decoder maps z of shape (2, {self.latent_dim}) to a batch of {params[0].shape[0]}; it "
                    "must return one row of likelihood parameters per latent vector"
                )
            found = self.likelihood.data_dim(params)
            _check_finite(params, "zeros")
            # Zeros can hide NaN (a 0/0, a log of a ReLU): two draws from N(0, I), from a generator of our own.
            draws = torch.randn(2, self.latent_dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            _check_finite(
                self.likelihood.split(self.decoder(draws.to(dtype=like.dtype, device=like.device))),
                "two draws from N(0, I)",
            )
        reading = None
        if isinstance(out, Tensor) and self.likelihood.num_blocks() > 1:
            values = out.reshape(out.shape[0], -1).shape[1]
            reading = (
                f"the decoder's single output of {values} values per latent vector was read as "
                f"{self.likelihood.num_blocks()} blocks of {found} ({self.likelihood.layout()})"
            )
        if data_dim is not None and data_dim != found:
            detail = f"; {reading}; {self.likelihood.reading_hint()}" if reading else ""
            raise ValueError(
                f"data_dim={data_dim}, but the decoder's output describes {found} data dimensions{detail}"
            )
        if data_dim is None:
            self.output_reading = reading  # said by describe() and the data-shape error: nothing confirmed it
        return found

    def _check_prior(self, like: Tensor) -> None:
        """A user's prior on two latent vectors: log_prob (2,) and samples (2, latent_dim) in the decoder's dtype and
        on its device, drawn from the generator alone."""
        d, name = self.latent_dim, type(self.prior).__name__
        with torch.no_grad():
            try:
                log_p = self.prior.log_prob(torch.zeros(2, d, dtype=like.dtype, device=like.device))
                draws = [
                    self.prior.sample((2,), torch.Generator(device=like.device).manual_seed(0)) for _ in range(2)
                ]
            except Exception as e:
                raise ValueError(
                    f"the prior ({name}) failed on latents z of shape (2, latent_dim={d}) in {like.dtype} on "
                    f"{like.device}: {type(e).__name__}: {e}; its log_prob and sample must work on latent_dim={d}"
                ) from e
        if not isinstance(log_p, Tensor) or log_p.shape != (2,):
            got = tuple(log_p.shape) if isinstance(log_p, Tensor) else type(log_p).__name__
            raise ValueError(
                f"the prior's log_prob maps z of shape (2, {d}) to {got}; it must return one value per latent vector, "
                f"shaped (2,): sum the log-density over the latent dimension ({name}.log_prob)"
            )
        sample = draws[0]
        if not isinstance(sample, Tensor) or sample.shape != (2, d):
            got = tuple(sample.shape) if isinstance(sample, Tensor) else type(sample).__name__
            raise ValueError(
                f"the prior's sample((2,), generator) returned {got}; it must return (*shape, latent_dim) = (2, {d}) "
                f"({name}.sample)"
            )
        if self._has_tensors and (sample.dtype != like.dtype or sample.device != like.device):
            raise ValueError(
                f"the prior's samples are {sample.dtype} on {sample.device}, the decoder's parameters {like.dtype} on "
                f"{like.device}; make {name} an nn.Module holding its tensors as buffers or parameters (then "
                f"DecoderModel moves it with the decoder), or build it with that dtype and device"
            )
        if not torch.equal(draws[0], draws[1]):
            raise ValueError(
                f"{name}.sample gave different draws from two generators with the same seed: it must draw only from "
                "the torch.Generator it is given (e.g. torch.randn(..., generator=generator)), not the global RNG"
            )

    def _check_encoder(self, like: Tensor) -> None:
        x = torch.zeros(2, self.data_dim, dtype=like.dtype, device=like.device)
        with torch.no_grad():
            mean, log_std = self.encode(x)
        if mean.shape != (2, self.latent_dim) or log_std.shape != (2, self.latent_dim):
            raise ValueError(
                f"the encoder maps x of shape (2, {self.data_dim}) to mean {tuple(mean.shape)} and scale "
                f"{tuple(log_std.shape)}; both must be (2, latent_dim={self.latent_dim})"
            )
        for name, t in (("mean", mean), (self.encoder_scale, log_std)):
            bad = _non_finite(t)
            if bad:
                raise ValueError(
                    f"the encoder produced {bad} in its {name} for x of shape (2, {self.data_dim}) (zeros): check its "
                    "weights and its forward pass"
                )

    # ------------------------------------------------------------------ generative model
    def decode(self, z: Tensor) -> tuple:
        """Likelihood parameters for z (*batch, latent_dim), each (*batch, D) (mixtures: (*batch, K, D))."""
        batch = z.shape[:-1]
        params = self.likelihood.split(self.decoder(z.reshape(-1, self.latent_dim)))
        return tuple(p.reshape(*batch, *p.shape[1:]) for p in params)

    def log_prior(self, z: Tensor) -> Tensor:
        return self.prior.log_prob(z)

    def log_prior_and_grad(self, z: Tensor) -> tuple[Tensor, Tensor]:
        if self.prior_is_standard_normal:
            return self.prior.log_prob_and_grad(z)
        what = f"log p(z) of the DecoderModel's prior ({type(self.prior).__name__})"
        return _value_and_grad(self.prior.log_prob, z, what)

    def log_likelihood(self, x: Tensor, z: Tensor) -> Tensor:
        return self.likelihood.log_prob(x, self.decode(z))

    def sample_prior(self, shape: tuple, generator: torch.Generator) -> Tensor:
        return self.prior.sample(tuple(shape), generator)

    def sample_data(self, z: Tensor, generator: torch.Generator) -> Tensor:
        with torch.no_grad():
            return self.likelihood.sample(self.decode(z), generator)

    def check_data(self, x: Tensor, what: str = "data") -> Tensor:
        """Check x (N, D) against the decoder's data size and the likelihood's support (DataSupportError saying
        how to fix it); returns x. Done once per data set (`DirectedPath` calls it), never inside a chain."""
        if x.dim() != 2 or x.shape[1] != self.data_dim:
            reading = ""
            if self.output_reading:
                hint = f"{self.likelihood.reading_hint()}, or data_dim=D to have the reading checked when it is built"
                reading = f"; {self.output_reading}; {hint}"
            raise ValueError(
                f"{what} must be shaped (N, {self.data_dim}) for this decoder, got {tuple(x.shape)}{reading}"
            )
        self.likelihood.check_data(x, what)
        return x

    def describe(self) -> str:
        """One line for reports, e.g. "DecoderModel(50 -> 784, 'bernoulli' likelihood, standard normal prior)"."""
        prior = "standard normal prior" if self.prior_is_standard_normal else f"{type(self.prior).__name__} prior"
        encoder = ", encoder" if self.encoder is not None else ", no encoder"
        likelihood = f"{self.likelihood.describe()} likelihood"
        reading = ""
        if self.output_reading is not None:
            reading = f"; decoder output of {self.likelihood.num_blocks()} x {self.data_dim} values read as "
            reading += self.likelihood.layout()
        return f"DecoderModel({self.latent_dim} -> {self.data_dim}, {likelihood}, {prior}{encoder}{reading})"

    # ------------------------------------------------------------------ inference network
    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The encoder's mean and log standard deviation, each (N, latent_dim)."""
        if self.encoder is None:
            raise ValueError("this DecoderModel has no encoder: pass encoder=... to use the ELBO, IWAE or AIDE")
        out = self.encoder(x)
        if isinstance(out, (tuple, list)):
            if len(out) != 2:
                raise ValueError(f"the encoder must return (mean, {self.encoder_scale}); it returned {len(out)} values")
            mean, scale = out
        elif isinstance(out, Tensor) and out.shape[-1] == 2 * self.latent_dim:
            mean, scale = out.chunk(2, dim=-1)
        else:
            shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(
                f"the encoder must return (mean, {self.encoder_scale}) or one tensor (N, 2 * latent_dim = "
                f"{2 * self.latent_dim}); got {shape}"
            )
        return mean, (0.5 * scale if self.encoder_scale == "log_var" else scale)

    def posterior_approximation(self) -> Optional[DiagonalGaussianPosterior]:
        """The encoder as a `PosteriorApproximation` (for IWAE, the ELBO and AIDE); None without an encoder."""
        return None if self.encoder is None else DiagonalGaussianPosterior(self.encode)


def _non_finite(t: Tensor) -> str:
    """'NaN values' / 'infinite values' / 'NaN and infinite values', or '' when every value of `t` is finite."""
    if not t.is_floating_point() or bool(torch.isfinite(t).all()):
        return ""
    nan, inf = bool(torch.isnan(t).any()), bool(torch.isinf(t).any())
    return "NaN and infinite values" if nan and inf else ("NaN values" if nan else "infinite values")


def _check_finite(params: tuple, what: str) -> None:
    """Refuse decoder outputs (the likelihood's parameters) with NaN or infinite values, for latents `what`."""
    for i, p in enumerate(params):
        bad = _non_finite(p)
        if bad:
            which = f"parameter block {i} of the likelihood" if len(params) > 1 else "output"
            raise ValueError(
                f"the model produced {bad}: the decoder's {which} for z = {what} is not finite; check the decoder's "
                "weights and its forward pass (a division by zero, a log of zero or of a negative number)"
            )
