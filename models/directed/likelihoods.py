"""Observation models p(x | z) for `DecoderModel`: the decoder maps z to the parameters of a likelihood chosen by name.

Every likelihood turns the decoder's output into parameters, evaluates log p(x | params) summed over the D data
dimensions, samples x, and checks that data lie in its support. Decoder outputs are either one tensor or a tuple:

- one tensor shaped (M, *rest) is flattened to (M, P) and cut into equal blocks of D columns, in the order the
  likelihood lists its parameters (an image decoder's (M, 2, 28, 28) output is [means | log-scales]; a
  conv decoder's (M, 3K, H, W) output for a K-component mixture is [K mixture logits | K means | K log-scales]);
- a tuple holds the parameters in that order, each shaped (M, *image) (or (M, K, *image) for the mixture).

Data are flattened the same way (row-major over the decoder's trailing dimensions).

| name | decoder outputs | data |
|---|---|---|
| 'bernoulli' | logits | 0 or 1 |
| 'gaussian', scale=s | means (fixed scale s > 0) | real |
| 'gaussian', log_scale=v | means; v (D,): fixed or learned (nn.Parameter) log standard deviations | real |
| 'gaussian' | [means, log standard deviations] | real |
| 'gaussian', scale_kind='log_var' | as the two rows above, the log-scales being log-variances | real |
| 'discretized_logistic' | [means, log-scales] on the [-1, 1] scale | integers 0..255 |
| 'discretized_logistic_mixture', num_components=K | [K logits, K means, K log-scales] | integers 0..255 |

Discretized logistic (PixelCNN++, Salimans et al., 2017): pixel k in 0..255 sits at c = k / 127.5 - 1 and owns
the bin [c - 1/255, c + 1/255]; the edge pixels own the tails (0 everything below 1/255 - 1, 255 everything above
1 - 1/255). With a = (c + 1/255 - mu) / s and b = (c - 1/255 - mu) / s:

    log P(0) = log sigmoid(a) = -softplus(-a),       log P(255) = log(1 - sigmoid(b)) = -softplus(b),
    log P(k) = log(sigmoid(a) - sigmoid(b)) = -softplus(-a) - softplus(b) + log(1 - exp(-(a - b))),

the last from sigmoid(a) - sigmoid(b) = sigmoid(a) (1 - sigmoid(b)) (1 - exp(b - a)). a - b = (2/255) / s is
computed in log space, log(a - b) = log(2/255) - log s, so no difference of large numbers is ever formed and the
density is exact in float32 for any scale (no fallback to the density at the bin centre, as PixelCNN++ uses).
Log-scales are floored at LOG_SCALE_FLOOR = -80 (s = 1.8e-35): below about -88.7, 1/s overflows float32 and a mean
exactly on a bin edge would give 0 * inf = NaN. The floor changes a probability only for a mean closer than about
1e-33 to a bin edge without lying on it (possible only at the edge at 0, between pixels 127 and 128), a distance
far below any decoder's resolution; the gradient with respect to a log-scale under the floor is 0.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
import torch.nn.functional as F
from raise_eval.models.sampling import sample_bernoulli_logits
from torch import Tensor, nn

_LOG_2PI = math.log(2 * math.pi)
_LOG_BIN = math.log(2.0 / 255.0)
LOG_SCALE_FLOOR = -80.0  # discretized logistic: see the module docstring
GAUSSIAN_SCALE_KINDS = ("log_std", "log_var")


class DataSupportError(ValueError):
    """Data outside the likelihood's support; the message says what is wrong and how to fix it."""


class Likelihood(nn.Module):
    """p(x | params) for decoder outputs. Subclasses set `name` and `param_names` and implement `log_prob_params`,
    `sample_params` and `check_data`. A learned parameter of the likelihood (e.g. a per-pixel log-scale) is an
    nn.Parameter or buffer of this module, so it moves with `.to()`."""

    name: str = ""
    param_names: tuple = ()

    def num_blocks(self) -> int:
        """Blocks of D columns in a single-tensor decoder output."""
        return len(self.param_names)

    def split(self, output: Union[Tensor, tuple, list]) -> tuple:
        """The decoder's output for M latents -> parameters, each (M, D) (or (M, K, D) for mixtures).

        Raises ValueError saying which layout was expected when the output does not fit it.
        """
        blocks = self.num_blocks()
        if isinstance(output, (tuple, list)):
            if len(output) != len(self.param_names):
                raise ValueError(
                    f"the decoder returned {len(output)} tensors; the {self.describe()} likelihood takes "
                    f"{len(self.param_names)} ({', '.join(self.param_names)}) or one tensor with them concatenated"
                )
            params = tuple(self._flatten_param(t) for t in output)
            if len({p.shape for p in params}) != 1:
                raise ValueError(
                    f"the decoder's {', '.join(self.param_names)} must have equal shapes, got "
                    f"{[tuple(t.shape) for t in output]}"
                )
            return params
        if not isinstance(output, Tensor):
            raise ValueError(f"the decoder must return a tensor or a tuple of tensors, got {type(output).__name__}")
        if output.dim() < 2:
            raise ValueError(
                f"the decoder must return a batch (M, ...) for latents shaped (M, latent_dim); got shape "
                f"{tuple(output.shape)}"
            )
        flat = output.reshape(output.shape[0], -1)
        if flat.shape[1] % blocks:
            raise ValueError(
                f"the decoder's output has {flat.shape[1]} values per latent vector; the {self.describe()} "
                f"likelihood expects {blocks} blocks of D ({self._layout()}), i.e. a multiple of {blocks}"
            )
        if blocks == 1:
            return (flat,)  # no unbind: its backward would copy the whole output once more per gradient
        return self._blocks(flat.reshape(flat.shape[0], blocks, -1))

    def _flatten_param(self, t: Tensor) -> Tensor:
        return t.reshape(t.shape[0], -1)

    def _blocks(self, stacked: Tensor) -> tuple:
        return tuple(stacked.unbind(1))

    def _layout(self) -> str:
        return " | ".join(self.param_names)

    def describe(self) -> str:
        return repr(self.name)

    def layout(self) -> str:
        """The blocks of a single-tensor decoder output, e.g. 'means | log_scales'."""
        return self._layout()

    def reading_hint(self) -> str:
        """How to fix a decoder output read with the wrong number of blocks (said with the reading)."""
        return f"the decoder must output {self.num_blocks()} blocks of D values ({self._layout()}) per latent vector"

    def data_dim(self, params: tuple) -> int:
        return params[0].shape[-1]

    def log_prob(self, x: Tensor, params: tuple) -> Tensor:
        """log p(x | params) summed over the D data dimensions: params (*batch, D) broadcast against x (*xbatch, D)."""
        return self.log_prob_params(x, *params).sum(-1)

    def log_prob_params(self, x: Tensor, *params: Tensor) -> Tensor:
        """Per-dimension log-probabilities, shaped like the broadcast of x and the parameters."""
        raise NotImplementedError

    def sample(self, params: tuple, generator: torch.Generator) -> Tensor:
        """x ~ p(x | params), shaped (*batch, D)."""
        return self.sample_params(generator, *params)

    def sample_params(self, generator: torch.Generator, *params: Tensor) -> Tensor:
        raise NotImplementedError

    def check_data(self, x: Tensor, what: str = "data") -> None:
        """Raise DataSupportError (saying how to fix it) when x is outside the support."""
        _check_finite(x, what)


def _first_bad(x: Tensor, bad: Tensor) -> str:
    index = tuple(int(i) for i in torch.nonzero(bad)[0])
    where = f"row {index[0]}, column {index[-1]}" if len(index) == 2 else f"index {index}"
    return f"{int(bad.sum())} such values, e.g. {x[index].item():g} at {where}"


def _check_finite(x: Tensor, what: str) -> None:
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        raise DataSupportError(f"{what} holds NaN or infinite values ({_first_bad(x, bad)}); remove or impute them")


class BernoulliLikelihood(Likelihood):
    """x_j in {0, 1}, p(x_j = 1) = sigmoid(logit_j): log p = x l - softplus(l) (exact in float32 for any l)."""

    name = "bernoulli"
    param_names = ("logits",)

    def log_prob_params(self, x: Tensor, logits: Tensor) -> Tensor:
        return x * logits - F.softplus(logits)

    def sample_params(self, generator: torch.Generator, logits: Tensor) -> Tensor:
        return sample_bernoulli_logits(logits, generator)

    def check_data(self, x: Tensor, what: str = "data") -> None:
        bad = (x != 0) & (x != 1)
        if bool(bad.any()):
            hint = (
                "binarize it (e.g. sample Bernoulli(x) or threshold at 0.5)"
                if bool(((x >= 0) & (x <= 1)).all())
                else "binary data are 0 or 1; for real values use likelihood='gaussian', for 8-bit pixels "
                "likelihood='discretized_logistic'"
            )
            raise DataSupportError(
                f"the 'bernoulli' likelihood needs {what} of 0s and 1s, but it holds other values "
                f"({_first_bad(x, bad)}); {hint}"
            )


class GaussianLikelihood(Likelihood):
    """x_j ~ N(mean_j, s_j^2), log p = -((x - m) / s)^2 / 2 - log s - log(2 pi) / 2.

    Args (scale and log_scale: at most one):
        scale: a fixed standard deviation s > 0 shared by every dimension (the decoder outputs means).
        log_scale: (D,) per-dimension log-scales, fixed (a tensor) or learned (an nn.Parameter of the user's
            model, shared with it); the decoder outputs means.
        neither: the decoder outputs means and log-scales, [means | log-scales] (M, 2D) or a tuple of two (M, D).
        scale_kind: what the log-scales are, the given log_scale vector or the decoder's second block:
            'log_std' (default), log s; or 'log_var', log s^2 (as many VAE codebases store or predict it; the
            same names as DecoderModel's encoder_scale). log_var = v gives exactly the density of log_std = v / 2.
            Not with scale=, which is a standard deviation.
    """

    name = "gaussian"

    def __init__(
        self, scale: Optional[float] = None, log_scale: Optional[Tensor] = None, scale_kind: str = "log_std"
    ):
        super().__init__()
        if scale is not None and log_scale is not None:
            raise ValueError("give the Gaussian likelihood a fixed scale or a log_scale vector, not both")
        if scale_kind not in GAUSSIAN_SCALE_KINDS:
            raise ValueError(f"scale_kind must be one of {GAUSSIAN_SCALE_KINDS}, got {scale_kind!r}")
        if scale is not None and scale_kind != "log_std":
            raise ValueError(
                f"scale={scale!r} is a standard deviation; scale_kind={scale_kind!r} describes log-scales (a log_scale "
                "vector or the decoder's second block): pass a variance v as scale=v ** 0.5"
            )
        self.scale_kind = scale_kind
        self.fixed_scale = None
        if scale is not None:
            if isinstance(scale, Tensor) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
                raise ValueError(
                    f"scale must be a positive number, got {scale!r} (a per-dimension vector goes in log_scale)"
                )
            if not scale > 0:
                raise ValueError(f"scale must be positive, got {scale}")
            self.fixed_scale = float(scale)
        elif log_scale is not None:
            if not isinstance(log_scale, Tensor) or log_scale.dim() != 1:
                shape = tuple(log_scale.shape) if isinstance(log_scale, Tensor) else type(log_scale).__name__
                raise ValueError(f"log_scale must be a 1-D tensor of D log-scales ({scale_kind}), got {shape}")
            if isinstance(log_scale, nn.Parameter):
                self.log_scale = log_scale  # registered: the user's parameter itself, shared with their model
            else:
                self.register_buffer("log_scale", log_scale.detach().clone())
        if log_scale is None:
            self.log_scale = None
        second = "log_scales" if scale_kind == "log_std" else "log_variances"
        self.param_names = ("means", second) if scale is None and log_scale is None else ("means",)

    def describe(self) -> str:
        if self.fixed_scale is not None:
            return f"'gaussian' (scale={self.fixed_scale:g})"
        kind = "" if self.scale_kind == "log_std" else ", log-variances"
        if self.log_scale is not None:
            return f"'gaussian' (log_scale vector{kind})"
        return f"'gaussian' (decoder-predicted scales{kind})"

    def reading_hint(self) -> str:
        if len(self.param_names) == 2:
            return "if your decoder outputs means only, pass scale= or log_scale="
        return super().reading_hint()

    def _log_std(self, log_scales: Optional[Tensor]) -> Tensor:
        """The log standard deviations: the decoder's block, else the log_scale vector, halved for log-variances."""
        if log_scales is None:
            log_scales = self.log_scale
        return 0.5 * log_scales if self.scale_kind == "log_var" else log_scales

    def data_dim(self, params: tuple) -> int:
        d = params[0].shape[-1]
        if self.log_scale is not None and self.log_scale.shape[0] != d:
            raise ValueError(f"log_scale has {self.log_scale.shape[0]} entries but the decoder outputs {d} means")
        return d

    def log_prob_params(self, x: Tensor, means: Tensor, log_scales: Optional[Tensor] = None) -> Tensor:
        if self.fixed_scale is not None:
            s = self.fixed_scale
            return -0.5 * ((x - means) / s) ** 2 - (math.log(s) + 0.5 * _LOG_2PI)
        log_scales = self._log_std(log_scales)
        return -0.5 * ((x - means) * torch.exp(-log_scales)) ** 2 - log_scales - 0.5 * _LOG_2PI

    def sample_params(self, generator: torch.Generator, means: Tensor, log_scales: Optional[Tensor] = None) -> Tensor:
        noise = torch.randn(means.shape, generator=generator, dtype=means.dtype, device=means.device)
        if self.fixed_scale is not None:
            return means + self.fixed_scale * noise
        return means + self._log_std(log_scales).exp() * noise


def _log1mexp_of_log(log_t: Tensor) -> Tensor:
    """log(1 - exp(-t)) for t = exp(log_t) > 0, accurate for every t (and NaN-free gradients: each branch only
    sees arguments in its own range)."""
    small, ln2 = math.log(1e-4), math.log(math.log(2.0))
    ls = log_t.clamp(max=small)
    series = ls - 0.5 * ls.exp()  # log t - t/2 (+ t^2/24): below t = 1e-4 the next term is under 1e-9
    mid = torch.log(-torch.expm1(-log_t.clamp(min=small, max=ln2).exp()))
    big = torch.log1p(-torch.exp(-log_t.clamp(min=ln2, max=50.0).exp()))  # t > e^50: exactly 0 in any float
    return torch.where(log_t < small, series, torch.where(log_t <= ln2, mid, big))


def _discretized_logistic_log_probs(x: Tensor, means: Tensor, log_scales: Tensor) -> Tensor:
    """Per-pixel log P(x | mean, scale) for pixels x in 0..255, mean and log-scale on the [-1, 1] scale (see the
    module docstring for the formula)."""
    # Bin edges c +- 1/255 written as (x - 127) / 127.5 and (x - 128) / 127.5: one rounding each, and pixel k's upper
    # edge is the same float as pixel k + 1's lower edge, so the probabilities telescope to 1 even when the scale is
    # below float32's resolution of c (about 6e-8 near +-1).
    log_scales = log_scales.clamp(min=LOG_SCALE_FLOOR)  # 1/s finite in float32: no 0 * inf on a bin edge
    inv_scale = torch.exp(-log_scales)
    a = ((x - 127.0) / 127.5 - means) * inv_scale
    b = ((x - 128.0) / 127.5 - means) * inv_scale
    log_cdf_a = -F.softplus(-a)
    log_sf_b = -F.softplus(b)
    inner = log_cdf_a + log_sf_b + _log1mexp_of_log(_LOG_BIN - log_scales)
    return torch.where(x < 0.5, log_cdf_a, torch.where(x > 254.5, log_sf_b, inner))


def _sample_discretized_logistic(generator: torch.Generator, means: Tensor, log_scales: Tensor) -> Tensor:
    u = torch.rand(means.shape, generator=generator, dtype=means.dtype, device=means.device)
    u = u.clamp(min=torch.finfo(u.dtype).tiny)  # u = 0 would be the logistic's -inf: pixel 0 either way
    continuous = means + log_scales.clamp(min=LOG_SCALE_FLOOR).exp() * (torch.log(u) - torch.log1p(-u))
    return torch.round((continuous + 1.0) * 127.5).clamp(0.0, 255.0)


def _check_pixels(x: Tensor, what: str, name: str) -> None:
    _check_finite(x, what)
    outside = (x < 0) | (x > 255)
    fractional = x != torch.round(x)
    if bool((outside | fractional).any()):
        if bool(((x >= -1) & (x <= 1)).all()) and bool(fractional.any()):
            hint = (
                "these look like rescaled intensities; pass 8-bit pixel values: round(x * 255) for intensities in "
                "[0, 1], round((x + 1) * 127.5) for [-1, 1]"
            )
        else:
            hint = "pass the raw 8-bit pixel values (integers 0..255); for real-valued data use likelihood='gaussian'"
        bad = outside | fractional
        raise DataSupportError(
            f"the {name!r} likelihood needs {what} of integer pixel values 0..255, but it holds others "
            f"({_first_bad(x, bad)}); {hint}"
        )


class DiscretizedLogisticLikelihood(Likelihood):
    """8-bit pixels: the logistic distribution on the [-1, 1] scale (mean, log-scale per pixel from the decoder)
    integrated over each pixel's bin, the tails given to 0 and 255 (PixelCNN++; formula in the module docstring)."""

    name = "discretized_logistic"
    param_names = ("means", "log_scales")

    def log_prob_params(self, x: Tensor, means: Tensor, log_scales: Tensor) -> Tensor:
        return _discretized_logistic_log_probs(x, means, log_scales)

    def sample_params(self, generator: torch.Generator, means: Tensor, log_scales: Tensor) -> Tensor:
        return _sample_discretized_logistic(generator, means, log_scales)

    def check_data(self, x: Tensor, what: str = "data") -> None:
        _check_pixels(x, what, self.name)


class DiscretizedLogisticMixtureLikelihood(Likelihood):
    """A mixture of K discretized logistics per pixel: P(x) = sum_k softmax(logits)_k P_k(x), each component as in
    `DiscretizedLogisticLikelihood` (independent pixels: no PixelCNN++ coupling of colour channels).

    Parameters (M, K, D): mixture logits, means and log-scales; a single-tensor output is (M, 3K*D), read as
    (M, 3, K, D) (the layout of a conv decoder's (M, 3K, H, W) output flattened).
    """

    name = "discretized_logistic_mixture"
    param_names = ("logits", "means", "log_scales")

    def __init__(self, num_components: int):
        super().__init__()
        if isinstance(num_components, bool) or not isinstance(num_components, int) or num_components < 1:
            raise ValueError(f"num_components must be a positive integer, got {num_components!r}")
        self.num_components = num_components

    def describe(self) -> str:
        return f"'discretized_logistic_mixture' (num_components={self.num_components})"

    def num_blocks(self) -> int:
        return 3 * self.num_components

    def _layout(self) -> str:
        k = self.num_components
        return f"{k} logits | {k} means | {k} log-scales"

    def _blocks(self, stacked: Tensor) -> tuple:
        m, _, d = stacked.shape
        return tuple(stacked.reshape(m, 3, self.num_components, d).unbind(1))

    def _flatten_param(self, t: Tensor) -> Tensor:
        if t.dim() < 3 or t.shape[1] != self.num_components:
            raise ValueError(
                f"each tensor of a mixture decoder's tuple must be shaped (M, K={self.num_components}, ...), got "
                f"{tuple(t.shape)}"
            )
        return t.reshape(t.shape[0], self.num_components, -1)

    def log_prob(self, x: Tensor, params: tuple) -> Tensor:
        logits, means, log_scales = params
        per_component = _discretized_logistic_log_probs(x.unsqueeze(-2), means, log_scales)  # (..., K, D)
        return torch.logsumexp(torch.log_softmax(logits, dim=-2) + per_component, dim=-2).sum(-1)

    def sample(self, params: tuple, generator: torch.Generator) -> Tensor:
        logits, means, log_scales = params
        u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype, device=logits.device)
        gumbel = -torch.log(-torch.log(u.clamp(min=torch.finfo(u.dtype).tiny)))
        k = torch.argmax(logits + gumbel, dim=-2, keepdim=True)  # Gumbel-max: k ~ softmax(logits)
        return _sample_discretized_logistic(
            generator, means.gather(-2, k).squeeze(-2), log_scales.gather(-2, k).squeeze(-2)
        )

    def check_data(self, x: Tensor, what: str = "data") -> None:
        _check_pixels(x, what, self.name)


LIKELIHOODS = ("bernoulli", "gaussian", "discretized_logistic", "discretized_logistic_mixture")


def make_likelihood(likelihood: Union[str, Likelihood], **options) -> Likelihood:
    """A likelihood by name (see the module docstring for the names and their options), or the object itself."""
    if isinstance(likelihood, Likelihood):
        if options:
            raise ValueError(f"options {sorted(options)} go with a likelihood name, not a likelihood object")
        return likelihood
    allowed = {
        "bernoulli": (BernoulliLikelihood, ()),
        "gaussian": (GaussianLikelihood, ("scale", "log_scale", "scale_kind")),
        "discretized_logistic": (DiscretizedLogisticLikelihood, ()),
        "discretized_logistic_mixture": (DiscretizedLogisticMixtureLikelihood, ("num_components",)),
    }
    if likelihood not in allowed:
        raise ValueError(f"unknown likelihood {likelihood!r}; choose one of {', '.join(LIKELIHOODS)}")
    cls, names = allowed[likelihood]
    unknown = sorted(set(options) - set(names))
    if unknown:
        takes = f"takes {', '.join(names)}" if names else "takes no options"
        raise ValueError(f"the {likelihood!r} likelihood {takes}; got {', '.join(unknown)}")
    if likelihood == "discretized_logistic_mixture" and "num_components" not in options:
        raise ValueError("the 'discretized_logistic_mixture' likelihood needs num_components=K")
    return cls(**options)
