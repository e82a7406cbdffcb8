"""Layer types of a Boltzmann machine: what a layer's units take as values and what the core needs from that.

A layer of a `MixedBoltzmannMachine` (models/boltzmann/mixed.py) couples to its neighbours through its state x
(a vector of `width` entries) and has a log-potential of its own,

    log f(x) = sum_l phi_l(x_l; theta_l) + s * sum_l x_l^T W_l x_{l+1},

with theta_l the layer's parameters (`param_shape`) and s the weight scale. Four types:

- `BernoulliLayer` {0, 1}: phi = b . x; theta = b, shaped (n,).
- `SpinLayer` {-1, +1}: phi = b . x; theta = b, shaped (n,).
- `CategoricalLayer` (Potts): n sites with q states each, held one-hot, x shaped (n * q,) (site i's states at
  columns i * q .. i * q + q - 1); phi = b . x with b shaped (n * q,) (b[i * q + a] the field of state a at site i).
- `GaussianLayer` (real units): theta = (eta, lam) shaped (2, n), phi = sum_i eta_i x_i - lam_i x_i^2 / 2 -
  eta_i^2 / (2 lam_i), i.e. -lam_i (x_i - mu_i)^2 / 2 with mean mu = eta / lam and precision lam = 1 / sigma^2.
  A Gaussian-Bernoulli checkpoint's W (its coupling (v_i / sigma_i) W_ij h_j) is W / sigma here.

Every type offers, for parameters theta (possibly annealed) and an input u from the neighbours (x_l's coefficient
in the coupling terms, shaped like x):

- `log_normalizer(theta, u)`: log sum_x exp(phi(x) + x . u) (an integral for a Gaussian layer), shaped (*batch,):
  sum of softplus (Bernoulli), of log 2 cosh (spin), of a log-sum-exp over q states per site (categorical), of
  log sqrt(2 pi / lam) + u (2 eta + u) / (2 lam) (Gaussian). Its units are independent given u.
- `log_normalizer_increment(theta, theta2, u, u2)`: log_normalizer(theta2, u2) - log_normalizer(theta, u) in
  float64, accurate when the two are close (an annealing step's weight update).
- `sample(theta, u, generator)`: exact samples of p(x | u) ∝ exp(phi(x) + x . u) from the generator given.
- `mean(theta, u)`: E[x | u].
- `base_params(statistics, theta)`: an independent base distribution fitted to the data's sufficient statistics
  (`statistics(data)`), and `uniform_params(theta)` (uniform for discrete layers; for a Gaussian layer its own
  N(mu, sigma^2), the weights off, as a Gaussian has no uniform distribution).
- discrete layers: `num_configurations`, `configurations(start, stop)` (codes in mixed radix, unit 0 the least
  significant digit) and `configuration_index(x)`, for exact answers.
- `prepare(data)`: the layer's state from data in the forms users keep it (0/1; ±1 or 0/1; integer codes or one-hot;
  finite reals), and `check_states(x)` for states already in the layer's form.

States are in the model's dtype; tensors carry any leading batch dimensions, (*batch, width).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from raise_eval.models.boltzmann.buffers import Buffers  # noqa: F401 (re-exported)
from raise_eval.models.boltzmann.layer import Layer
from raise_eval.models.boltzmann.supports import BINARY, REAL, SPIN, one_hot
from raise_eval.models.boltzmann.unit_data import (  # noqa: F401 (UnitDataError re-exported)
    UnitDataError,
    _check_matrix,
    _first_bad,
    _refuse_other_values,
    _where,
)
from raise_eval.models.sampling import sample_bernoulli_probs_
from torch import Tensor

UNIT_TYPES = ("bernoulli", "spin", "categorical", "gaussian")
# Names other code (and files) may use for a type.
UNIT_ALIASES = {"binary": "bernoulli", "potts": "categorical", "ising": "spin"}
PROTEIN_ALPHABET = "-ACDEFGHIKLMNPQRSTVWY"  # gap first, then the 20 amino acids (q = 21), as in Pfam/ArDCA files
RNA_ALPHABET = "-ACGU"
DNA_ALPHABET = "-ACGT"
ALPHABETS = {"protein": PROTEIN_ALPHABET, "rna": RNA_ALPHABET, "dna": DNA_ALPHABET}
# Clipping of a data-fitted base: frequencies and probabilities into [eps, 1 - eps] (as the binary base rates), and
# a Gaussian base's variance at least this fraction of the layer's own sigma^2 (a pixel constant in the training
# data would otherwise give a point mass, which no annealing path leaves).
BASE_EPS = 1e-3
GAUSSIAN_BASE_MIN_VARIANCE = 1e-2
# Below this |step| of a Bernoulli unit's logit its log-normalizer increment softplus(z + d) - softplus(z) is taken
# as log1p(sigmoid(z) expm1(d)) (no cancellation between two nearly equal numbers); above it the plain difference
# has nothing to fear and expm1 could overflow.
_SMALL_STEP = 2.0


def unit_type(name: str) -> str:
    """The canonical name of a unit type ('bernoulli', 'spin', 'categorical', 'gaussian'); ValueError naming the
    known ones for any other name (never read as binary)."""
    key = str(name).strip().lower()
    key = UNIT_ALIASES.get(key, key)
    if key not in UNIT_TYPES:
        raise ValueError(f"unknown unit type {name!r}; known: {', '.join(UNIT_TYPES)} (or {', '.join(UNIT_ALIASES)})")
    return key



def _bits(n: int, start: int, stop: int, device) -> Tensor:
    codes = torch.arange(start, stop, device=device, dtype=torch.int64)
    return (codes.unsqueeze(-1) >> torch.arange(n, device=device, dtype=torch.int64)) & 1


def _binary_index(bits: Tensor) -> Tensor:
    weights = 2 ** torch.arange(bits.shape[-1], device=bits.device, dtype=torch.int64)
    return (bits.to(torch.int64) * weights).sum(-1)


@dataclass(frozen=True)
class BernoulliLayer(Layer):
    """Units in {0, 1}: p(x_j = 1 | u) = sigmoid(b_j + u_j)."""

    kind = "bernoulli"
    support = BINARY

    def log_normalizer(self, params, u=None):
        return F.softplus(self._add(params, u)).sum(-1)

    def log_normalizer_increment(self, params, u, dparams, du):
        z, d = params + u, dparams + du
        # log1p(sigmoid(z) expm1(d)) for small steps (accurate to a few units in the last place of the increment
        # itself), the plain difference in float64 beyond
        small = torch.log1p(torch.sigmoid(z) * torch.expm1(d.clamp(max=_SMALL_STEP)))
        if bool((d.abs() <= _SMALL_STEP).all()):
            return small.sum(-1, dtype=torch.float64)
        plain = F.softplus(z.double() + d.double()) - F.softplus(z.double())
        return torch.where(d.abs() <= _SMALL_STEP, small.double(), plain).sum(-1)

    def sample(self, params, u, generator, *, batch_shape=(), out=None):
        z = params + u if u is not None else params.expand(*batch_shape, self.width)
        return sample_bernoulli_probs_(torch.sigmoid(z, out=out).contiguous(), generator)

    def sample_natural_(self, z, params, generator, buffers=None):
        return sample_bernoulli_probs_(z.sigmoid_(), generator), None

    def mean(self, params, u=None):
        return torch.sigmoid(self._add(params, u))

    def base_params(self, statistics, params):
        p = statistics.clamp(BASE_EPS, 1 - BASE_EPS)
        return (torch.log(p) - torch.log1p(-p)).to(params)

    def check_states(self, x, what="data"):
        x = _check_matrix(x, self.width, what, "0s and 1s")
        _refuse_other_values((x != 0) & (x != 1), x, f"{what} must be binary (0 or 1) but")
        return x

    @property
    def num_configurations(self):
        return 2**self.size

    def configurations(self, start, stop, *, dtype=torch.float64, device=None):
        return _bits(self.size, start, stop, device).to(dtype)

    def configuration_index(self, x):
        return _binary_index(x.round())


@dataclass(frozen=True)
class SpinLayer(Layer):
    """Units in {-1, +1}: p(x_j = +1 | u) = sigmoid(2 (b_j + u_j)), log-normalizer sum_j log 2 cosh(b_j + u_j).

    Data: ±1, or 0/1 read as 0 -> -1 and 1 -> +1 (a matrix holding both 0 and -1 is refused: it is neither)."""

    kind = "spin"
    support = SPIN

    @staticmethod
    def _log_2cosh(z: Tensor) -> Tensor:
        a = z.abs()
        return a + F.softplus(-2.0 * a)  # log(e^a + e^-a) = a + log1p(e^-2a)

    def log_normalizer(self, params, u=None):
        return self._log_2cosh(self._add(params, u)).sum(-1)

    def log_normalizer_increment(self, params, u, dparams, du):
        z, d = (params + u).double(), (dparams + du).double()
        z2 = z + d
        # cosh(z + d) / cosh(z) = cosh d + tanh(z) sinh d = 1 + 2 sinh(d/2)^2 + tanh(z) sinh(d)
        small = torch.log1p(2.0 * torch.sinh(d / 2).square() + torch.tanh(z) * torch.sinh(d))
        plain = self._log_2cosh(z2) - self._log_2cosh(z)
        return torch.where(d.abs() <= _SMALL_STEP, small, plain).sum(-1)

    def sample(self, params, u, generator, *, batch_shape=(), out=None):
        z = self._add(params, u) if u is not None else params.expand(*batch_shape, self.width)
        probs = torch.sigmoid(2.0 * z, out=out)
        return sample_bernoulli_probs_(probs.contiguous(), generator).mul_(2.0).sub_(1.0)

    def sample_natural_(self, z, params, generator, buffers=None):
        return sample_bernoulli_probs_(z.mul_(2.0).sigmoid_(), generator).mul_(2.0).sub_(1.0), None

    def mean(self, params, u=None):
        return torch.tanh(self._add(params, u))

    def base_params(self, statistics, params):
        p = ((statistics + 1) / 2).clamp(BASE_EPS, 1 - BASE_EPS)
        return (0.5 * (torch.log(p) - torch.log1p(-p))).to(params)

    def prepare(self, data, what="data"):
        x = _check_matrix(data, self.width, what, "spins (±1, or 0/1)")
        has_zero, has_minus = bool((x == 0).any()), bool((x == -1).any())
        if has_zero and has_minus:
            raise UnitDataError(
                f"{what} holds both 0 and -1: spin data are ±1, or 0/1 (read as 0 -> -1); give one of the two forms"
            )
        must = f"{what} must hold spins, ±1 (or 0/1, read as 0 -> -1), but"
        _refuse_other_values((x != 1) & (x != -1) & (x != 0), x, must)
        return torch.where(x == 0, -torch.ones_like(x), x) if has_zero else x

    def check_states(self, x, what="data"):
        x = _check_matrix(x, self.width, what, "spins ±1")
        _refuse_other_values((x != 1) & (x != -1), x, f"{what} must hold spins ±1 but")
        return x

    @property
    def num_configurations(self):
        return 2**self.size

    def configurations(self, start, stop, *, dtype=torch.float64, device=None):
        return (2 * _bits(self.size, start, stop, device) - 1).to(dtype)

    def configuration_index(self, x):
        return _binary_index(x > 0)


@dataclass(frozen=True)
class CategoricalLayer(Layer):
    """`size` sites with `q` states each (Potts units), held one-hot: x shaped (size * q,), site i's states at
    columns i * q .. i * q + q - 1. p(site i = a | u) = softmax_a(b[i, a] + u[i, a]).

    alphabet: optional, the q symbols of the states in order (e.g. PROTEIN_ALPHABET), for reading sequences.
    Data: integer codes 0 .. q - 1 shaped (N, size), or one-hot rows shaped (N, size * q)."""

    q: int = 2
    alphabet: Optional[str] = None

    kind = "categorical"

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.q, bool) or not isinstance(self.q, int) or self.q < 2:
            raise ValueError(f"a categorical layer needs q >= 2 states per site, got {self.q!r}")
        if self.alphabet is not None:
            if not isinstance(self.alphabet, str) or len(self.alphabet) != self.q:
                raise ValueError(f"the alphabet must be a string of q = {self.q} symbols, got {self.alphabet!r}")
            if len(set(self.alphabet)) != self.q:
                raise ValueError(f"the alphabet {self.alphabet!r} repeats a symbol")

    @property
    def width(self):
        return self.size * self.q

    @property
    def support(self):
        return one_hot(self.q)

    def describe(self):
        return f"categorical({self.size}x{self.q})"

    def to_config(self):
        return {"type": self.kind, "size": self.size, "q": self.q, "alphabet": self.alphabet}

    def _sites(self, t: Tensor) -> Tensor:
        return t.reshape(*t.shape[:-1], self.size, self.q)

    def log_normalizer(self, params, u=None):
        return torch.logsumexp(self._sites(self._add(params, u)), -1).sum(-1)

    def log_normalizer_increment(self, params, u, dparams, du):
        z = self._sites(params + u)
        d = self._sites(dparams + du)
        # log sum_a p_a e^(d_a) = log1p(sum_a p_a expm1(d_a)), p = softmax(z): no cancellation for small steps
        small = torch.log1p((torch.softmax(z, -1) * torch.expm1(d.clamp(max=_SMALL_STEP))).sum(-1))
        if bool((d.abs() <= _SMALL_STEP).all()):
            return small.sum(-1, dtype=torch.float64)
        plain = torch.logsumexp((z + d).double(), -1) - torch.logsumexp(z.double(), -1)
        close = (d.abs() <= _SMALL_STEP).all(-1)
        return torch.where(close, small.double(), plain).sum(-1)

    def codes(self, params, u, generator, *, batch_shape=()) -> Tensor:
        """Exact samples of the sites' states as int64 codes (*batch, size), by inverse CDF: with c the cumulative
        sums of exp(z - max z) over the states, the code is the number of c_a <= U c_{q-1}, U ~ Uniform[0, 1)."""
        z = self._sites(self._add(params, u) if u is not None else params.expand(*batch_shape, self.width))
        e = (z - z.amax(-1, keepdim=True)).exp_()
        c = torch.cumsum(e, -1, out=e)
        threshold = torch.rand(c.shape[:-1], generator=generator, dtype=c.dtype, device=c.device)
        threshold.mul_(c[..., -1])
        return (c <= threshold.unsqueeze(-1)).sum(-1).clamp_(max=self.q - 1)

    def one_hot(self, codes: Tensor, *, dtype=torch.float32, out: Optional[Tensor] = None) -> Tensor:
        """One-hot states (*batch, size * q) of int64 codes (*batch, size)."""
        shape = (*codes.shape[:-1], self.width)
        out = torch.zeros(shape, dtype=dtype, device=codes.device) if out is None else out.zero_()
        self._sites(out).scatter_(-1, codes.unsqueeze(-1), 1.0)
        return out

    def sample(self, params, u, generator, *, batch_shape=(), out=None):
        codes = self.codes(params, u, generator, batch_shape=batch_shape)
        return self.one_hot(codes, dtype=params.dtype, out=out)

    def sample_natural_(self, z, params, generator, buffers=None):
        """The inverse-CDF sampler of `codes` in place: exp, cumulative sums over each site's states, one uniform
        per site searched among them. While every natural parameter lies in [-80, 80] the exponentials neither
        overflow nor vanish in float32, so no per-site maximum is subtracted (the common case, one pass fewer)."""
        sites = z.view(-1, self.q)
        lo, hi = torch.aminmax(sites)
        if not (float(lo) > -80.0 and float(hi) < 80.0):
            sites.sub_(sites.amax(1, keepdim=True))
        torch.cumsum(sites.exp_(), 1, out=sites)
        rows = sites.shape[0]
        if buffers is None:
            threshold = torch.empty(rows, 1, dtype=z.dtype, device=z.device)
            codes = torch.empty(rows, 1, dtype=torch.int64, device=z.device)
        else:
            threshold = buffers.get("categorical_threshold", (rows, 1), z.dtype, z.device)
            codes = buffers.get("categorical_codes", (rows, 1), torch.int64, z.device)
        threshold.uniform_(generator=generator).mul_(sites[:, -1:])
        torch.searchsorted(sites, threshold, right=True, out=codes).clamp_(max=self.q - 1)
        sites.zero_().scatter_(1, codes, 1.0)
        return z, codes.view(*z.shape[:-1], self.size)

    def mean(self, params, u=None):
        z = self._add(params, u)
        return torch.softmax(self._sites(z), -1).reshape(z.shape)

    def base_params(self, statistics, params):
        f = self._sites(statistics.clamp(min=0))
        f = (f + BASE_EPS) / (f.sum(-1, keepdim=True) + self.q * BASE_EPS)
        return torch.log(f).reshape(self.width).to(params)

    def prepare(self, data, what="data"):
        if data.dim() == 2 and data.shape[1] == self.size and self.size != self.width:
            codes = data if torch.is_floating_point(data) else data.double()
            bad = (codes != codes.round()) | (codes < 0) | (codes >= self.q)
            if data.shape[0] == 0:
                raise UnitDataError(f"{what} is empty")
            _refuse_other_values(bad, codes, f"{what} must hold the states' codes 0 .. {self.q - 1} (q = {self.q}) but")
            return self.one_hot(codes.to(torch.int64), dtype=torch.float64)
        if data.dim() == 2 and data.shape[1] != self.width:
            raise UnitDataError(
                f"the model has {self.size} sites with q = {self.q} states but {what} has {data.shape[1]} columns; "
                f"give the states' codes shaped (N, {self.size}) or one-hot rows shaped (N, {self.width})"
            )
        return self.check_states(data, what)

    def check_states(self, x, what="data"):
        x = _check_matrix(x, self.width, what, f"one-hot rows ({self.size} sites x {self.q} states)")
        sites = self._sites(x)
        bad = (((x != 0) & (x != 1)).reshape(sites.shape).any(-1)) | (sites.sum(-1) != 1)
        if bool(bad.any()):
            i = _first_bad(bad)
            raise UnitDataError(
                f"{what} must be one-hot per site ({self.q} columns per site, exactly one 1) but "
                f"{int(bad.sum())} sites are not, e.g. row {i[0]}, site {i[1]}"
            )
        return x

    def statistics(self, data):
        return data.double().mean(0)

    @property
    def num_configurations(self):
        return self.q**self.size

    def configurations(self, start, stop, *, dtype=torch.float64, device=None):
        codes = torch.arange(start, stop, device=device, dtype=torch.int64).unsqueeze(-1)
        powers = self.q ** torch.arange(self.size, device=device, dtype=torch.int64)
        return self.one_hot((codes // powers) % self.q, dtype=dtype)

    def configuration_index(self, x):
        codes = self._sites(x).argmax(-1)
        powers = self.q ** torch.arange(self.size, device=x.device, dtype=torch.int64)
        return (codes * powers).sum(-1)


@dataclass(frozen=True)
class GaussianLayer(Layer):
    """Real units: phi(x) = -sum_i lam_i (x_i - mu_i)^2 / 2 with parameters (eta, lam) = (mu / sigma^2, 1 /
    sigma^2) shaped (2, size); given the input u, x_i ~ N((eta_i + u_i) / lam_i, 1 / lam_i). Data: finite reals."""

    kind = "gaussian"
    support = REAL
    normal_conditional = True

    @property
    def param_shape(self):
        return (2, self.size)

    def check_params(self, params, name):
        super().check_params(params, name)
        if not bool((params[1] > 0).all()):
            raise ValueError(f"{name}: a Gaussian layer's precisions 1 / sigma^2 must be positive (sigma > 0)")

    def uniform_params(self, params):
        return params.clone()  # N(mu, sigma^2) with the weights off: a Gaussian has no uniform distribution

    @staticmethod
    def mean_and_precision(params: Tensor) -> tuple[Tensor, Tensor]:
        return params[0] / params[1], params[1]

    def log_potential(self, params, x):
        eta, lam = params[0], params[1]
        flat = x.reshape(-1, self.size)
        quad = torch.mv(flat.square(), lam)
        const = (eta.square() / lam).sum()
        return (torch.mv(flat, eta) - 0.5 * quad - 0.5 * const).reshape(x.shape[:-1])

    def potential_increment(self, params, dparams, x, buffers: Optional[Buffers] = None):
        flat = x.reshape(-1, self.size)
        d = dparams.to(x.dtype)
        square = (
            flat.square()
            if buffers is None
            else torch.mul(flat, flat, out=buffers.get("square", flat.shape, flat.dtype, flat.device))
        )
        linear = torch.mv(flat, d[0]).double() - 0.5 * torch.mv(square, d[1]).double()
        p, p2 = params.double(), params.double() + dparams.double()
        const = 0.5 * float((p[0].square() / p[1]).sum() - (p2[0].square() / p2[1]).sum())
        return (linear + const).reshape(x.shape[:-1])

    def log_normalizer(self, params, u=None):
        eta, lam = params[0], params[1]
        base = 0.5 * (math.log(2 * math.pi) - torch.log(lam)).sum()
        if u is None:
            return base
        return base + (u * (2 * eta + u) / (2 * lam)).sum(-1)

    def field(self, params):
        return params[0]

    def sample_natural_(self, z, params, generator, buffers=None):
        lam = params[1]
        noise = torch.empty_like(z) if buffers is None else buffers.get("gaussian_noise", z.shape, z.dtype, z.device)
        noise.normal_(generator=generator)
        return z.div_(lam).addcmul_(noise, lam.rsqrt()), None

    def sample(self, params, u, generator, *, batch_shape=(), out=None):
        eta, lam = params[0], params[1]
        shape = (*batch_shape, self.size) if u is None else u.shape
        noise = torch.empty(shape, dtype=params.dtype, device=params.device) if out is None else out
        noise.normal_(generator=generator)
        mean = eta / lam if u is None else (eta + u) / lam
        return noise.mul_(lam.rsqrt()).add_(mean)

    def mean(self, params, u=None):
        eta, lam = params[0], params[1]
        return (eta if u is None else eta + u) / lam

    def statistics(self, data):
        x = data.double()
        return torch.stack([x.mean(0), x.var(0, unbiased=False)])

    def base_params(self, statistics, params):
        own_variance = 1.0 / params[1].double()
        variance = torch.maximum(statistics[1], GAUSSIAN_BASE_MIN_VARIANCE * own_variance)
        lam = 1.0 / variance
        return torch.stack([statistics[0] * lam, lam]).to(params)

    def check_states(self, x, what="data"):
        x = _check_matrix(x, self.width, what, "real numbers")
        bad = ~torch.isfinite(x)
        if bool(bad.any()):
            i = _first_bad(bad)
            raise UnitDataError(
                f"{what} must be finite real numbers but holds {int(bad.sum())} NaN or infinite "
                f"values, e.g. at {_where(i)}; remove or impute them"
            )
        return x


LAYER_TYPES = {
    "bernoulli": BernoulliLayer,
    "spin": SpinLayer,
    "categorical": CategoricalLayer,
    "gaussian": GaussianLayer,
}


def make_layer(kind: str, size: int, *, q: Optional[int] = None, alphabet: Optional[str] = None) -> Layer:
    """A layer of unit type `kind` (a name of UNIT_TYPES or UNIT_ALIASES) with `size` units (sites); q and the
    alphabet for a categorical layer (q from the alphabet when only it is given)."""
    kind = unit_type(kind)
    if kind == "categorical":
        if q is None and alphabet is not None:
            q = len(alphabet)
        if q is None:
            raise ValueError("a categorical layer needs q (states per site) or an alphabet")
        return CategoricalLayer(int(size), int(q), alphabet)
    if q is not None or alphabet is not None:
        raise ValueError(f"q and an alphabet belong to categorical layers, not {kind}")
    return LAYER_TYPES[kind](int(size))


def layer_from_config(config: dict) -> Layer:
    """The layer a checkpoint's `to_config()` dict describes."""
    config = dict(config)
    return make_layer(config.pop("type"), config.pop("size"), **config)
