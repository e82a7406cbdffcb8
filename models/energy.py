"""Energy-based models written by the user in PyTorch: `EnergyModel(energy, support=..., event_shape=...)`.

    f(x) = exp(-E(x)),  p(x) = f(x) / Z

`energy` is an `nn.Module` or a function mapping a batch to one energy per example, shaped (N,). What it receives
depends on the support (`Support`, `as_support`):

- 'real': floats shaped (N, *event_shape); ('real', low, high) bounds every coordinate to the box [low, high]
  (images in [0, 1]): the density is f on the box and zero outside it;
- 'binary' (0/1) and 'spin' (-1/+1): floats shaped (N, *event_shape);
- `categorical(q)`: one-hot floats shaped (N, *event_shape, q) (so that the gradient-informed proposal of the
  discrete kernels can differentiate E), while data and chain states are int64 codes 0..q-1 shaped (N, *event_shape).

Inside the library a discrete state is held as int64 codes (binary: 0/1, spin: -1 -> 0, +1 -> 1); `energy_input`
turns codes into what the energy receives.

The energy is tried once when the model is built, on a fixed probe batch of three examples: an exception, a result
that is not one energy per example, NaN or -inf energies, energies that change between two calls (dropout) or
with the rest of the batch (batch norm in training mode), or, on real support, no gradient with respect to the
input, is refused with one ValueError that says what is wrong (and, for an exception, where in the user's file).

Bases (the start of the annealing path, normalized exactly: log Z_0 = 0): `GaussianBase` (diagonal, truncated to the
box on a bounded real support) and `SiteBase` (independent sites), fitted to training data by `fit_base`.
"""

from __future__ import annotations

import copy
import inspect
import math
import weakref
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch
from raise_eval.models.energy_check import check_data_energies, check_energy
from torch import Tensor

KINDS = ("real", "binary", "spin", "categorical")
# The values the energy receives for codes 0 and 1 of a two-state site.
TWO_STATE_VALUES = {"binary": (0.0, 1.0), "spin": (-1.0, 1.0)}


@dataclass(frozen=True)
class Support:
    """What one coordinate of x is: `kind` one of KINDS; a real box [low, high] (both None when unbounded);
    `num_states` q of a discrete site (2 for binary and spin, 0 for real)."""

    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    num_states: int = 0

    @property
    def discrete(self) -> bool:
        return self.kind != "real"

    @property
    def bounded(self) -> bool:
        return self.low is not None

    def describe(self) -> str:
        """'real', 'real[0, 1]', 'binary', 'spin' or 'categorical(q)'."""
        if self.kind == "real":
            return f"real[{self.low:g}, {self.high:g}]" if self.bounded else "real"
        return f"categorical({self.num_states})" if self.kind == "categorical" else self.kind


def categorical(q: int) -> Support:
    """The support of sites with q states (codes 0..q-1; the energy receives them one-hot)."""
    if isinstance(q, bool) or not isinstance(q, int) or q < 2:
        raise ValueError(f"categorical(q) needs an integer q of at least 2 states, got {q!r}")
    return Support("categorical", num_states=q)


def as_support(spec) -> Support:
    """A `Support` from 'real', ('real', low, high), 'binary', 'spin', categorical(q) or a `Support`."""
    if isinstance(spec, Support):
        return spec
    if spec in ("binary", "spin"):
        return Support(spec, num_states=2)
    if spec == "real":
        return Support("real")
    if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "real":
        low, high = spec[1], spec[2]
        ok = all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in (low, high))
        if not ok or not low < high:
            raise ValueError(f"support ('real', low, high) needs finite numbers low < high, got {spec!r}")
        return Support("real", float(low), float(high))
    if spec == "categorical":
        raise ValueError("support 'categorical' needs its number of states: support=categorical(q)")
    raise ValueError(
        f"support must be 'real', ('real', low, high), 'binary', 'spin' or categorical(q), got {spec!r}"
    )


# ----------------------------------------------------------------------------------------------- bases
class GaussianBase:
    """A diagonal Gaussian N(mean, std^2) per coordinate, truncated to [low, high] where the support is a box.

    Args:
        mean, std: shaped event_shape (std > 0).
        low, high: the box, or None (unbounded).
    Its log-density is normalized (truncation included, in closed form), so log Z_0 = 0.
    """

    kind = "gaussian"

    def __init__(self, mean: Tensor, std: Tensor, low: Optional[float] = None, high: Optional[float] = None):
        mean, std = torch.as_tensor(mean), torch.as_tensor(std)
        if mean.shape != std.shape:
            raise ValueError(f"base mean {tuple(mean.shape)} and std {tuple(std.shape)} must have the same shape")
        if not bool(torch.isfinite(mean).all()) or not bool((std > 0).all() & torch.isfinite(std).all()):
            raise ValueError("base mean must be finite and base std finite and positive")
        if (low is None) != (high is None) or (
            low is not None and not (math.isfinite(low) and math.isfinite(high) and low < high)
        ):
            raise ValueError(f"a GaussianBase's box needs finite low < high (or neither), got low={low}, high={high}")
        self.mean, self.std, self.low, self.high = mean.double(), std.double(), low, high
        self._log_mass = _log_normal_mass(*self._standard_box()) if low is not None else None
        self._grad_terms = None  # (dtype and device, mean, 1 / std^2 in them), made on first use
        self._pass_terms = None  # (dtype and device, the native leapfrog's constants), made on first use
        self._log_normalizer = None  # the coordinates' log normalizers summed, made on first use

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.mean.shape)

    @property
    def log_partition(self) -> float:
        return 0.0

    def to(self, device=None) -> GaussianBase:
        return GaussianBase(self.mean.to(device), self.std.to(device), self.low, self.high)

    def _standard_box(self) -> tuple[Tensor, Tensor]:
        return (self.low - self.mean) / self.std, (self.high - self.mean) / self.std

    def log_prob(self, x: Tensor) -> Tensor:
        """log p_0(x) for x (*B, *shape), float64 shaped (*B,) (-inf outside the box). -|z|^2 / 2 plus one constant
        (the coordinates' normalizers summed once): HMC takes it at every transition's ends, so few passes."""
        event_start = x.dim() - self.mean.dim()
        z = x.to(torch.float64, copy=True).sub_(self.mean).div_(self.std)  # a copy: x itself stays
        out = z.square_().flatten(start_dim=event_start).sum(-1).mul_(-0.5).sub_(self.log_normalizer)
        if self._log_mass is not None:
            if x.device.type != "cpu" or not self.low <= float(x.min()) <= float(x.max()) <= self.high:
                # (on the CPU, a look at the extremes first: chains inside the box, as HMC's always are, skip the
                # comparisons, which cost several times an arithmetic pass there)
                outside = ((x < self.low) | (x > self.high)).flatten(start_dim=event_start).any(-1)
                out = out.masked_fill(outside, -math.inf)
        return out

    def grad_log_prob(self, x: Tensor, weight: float = 1.0) -> Tensor:
        """`weight` times the gradient of log p_0 at x (*B, *shape), in x's dtype (HMC's every leapfrog step: two
        operations; the weight folds into the precision, shaped like one example)."""
        mean, precision = self.grad_terms(x.dtype, x.device)
        return (mean - x).mul_(precision if weight == 1.0 else precision * weight)

    @property
    def log_normalizer(self) -> Tensor:
        """The coordinates' log normalizers summed (truncation included), float64 scalar: log p_0(x) is
        -|(x - mean) / std|^2 / 2 less this inside the box."""
        if self._log_normalizer is None or self._log_normalizer.device != self.mean.device:
            terms = torch.log(self.std) + 0.5 * math.log(2 * math.pi)
            self._log_normalizer = (terms if self._log_mass is None else terms + self._log_mass).sum()
        return self._log_normalizer

    def grad_terms(self, dtype: torch.dtype, device) -> tuple[Tensor, Tensor]:
        """(mean, 1 / std^2) in `dtype` on `device`, shaped like one example: the gradient of log p_0 at x is
        (mean - x) / std^2. Kept for the last dtype and device asked."""
        key = (dtype, torch.device(device))
        if self._grad_terms is None or self._grad_terms[0] != key:
            self._grad_terms = (key, self.mean.to(device, dtype), (1 / self.std**2).to(device, dtype))
        return self._grad_terms[1], self._grad_terms[2]

    def pass_terms(self, dtype: torch.dtype, device) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(mean, 1 / std^2, std) in `dtype` and (mean, 1 / std) in float64, contiguous, on `device`, shaped like one
        example: the constants HMC's native leapfrog reads at every transition (`kernels.energy_leapfrog`). Kept
        for the last dtype and device asked."""
        key = (dtype, torch.device(device))
        if self._pass_terms is None or self._pass_terms[0] != key:
            mean, precision = self.grad_terms(dtype, device)
            terms = (mean, precision, self.std.to(device, dtype), self.mean.to(device), (1 / self.std).to(device))
            self._pass_terms = (key, tuple(t.contiguous() for t in terms))
        return self._pass_terms[1]

    def sample(self, batch_shape: tuple, generator: torch.Generator, dtype=None) -> Tensor:
        """Exact draws shaped (*batch_shape, *shape) (inverse CDF on the box), in `dtype`."""
        u = torch.rand((*batch_shape, *self.shape), generator=generator, dtype=torch.float64, device=self.mean.device)
        if self.low is None:
            x = self.mean + self.std * torch.special.ndtri(u.clamp(1e-300, 1 - 1e-16))
        else:
            a, b = self._standard_box()
            # draw in the tail nearer zero (upper tails mirrored), through the log of the CDF (torch's ndtr loses
            # its digits below about -6 and underflows below -8.3; its log does neither)
            flip = a > 0
            lo, hi = torch.where(flip, -b, a), torch.where(flip, -a, b)
            log_lo, log_hi = torch.special.log_ndtr(lo), torch.special.log_ndtr(hi)
            log_c = log_hi + torch.log(u + (1 - u) * torch.exp(log_lo - log_hi))  # log(c_lo + u (c_hi - c_lo))
            z = torch.clamp(_log_ndtri(log_c), lo, hi)
            x = (self.mean + self.std * torch.where(flip, -z, z)).clamp(self.low, self.high)
        return x.to(dtype or torch.get_default_dtype())


class SiteBase:
    """Independent discrete sites: p_0(x) = prod_i softmax(logits[i])[x_i], logits shaped (*event_shape, q).
    Normalized, so log Z_0 = 0."""

    kind = "sites"

    def __init__(self, logits: Tensor):
        logits = torch.as_tensor(logits)
        if logits.dim() < 2 or logits.shape[-1] < 2 or not bool(torch.isfinite(logits).all()):
            raise ValueError(f"base logits must be finite and shaped (*event_shape, q), got {tuple(logits.shape)}")
        self.logits = logits.double()
        self.log_probs = torch.log_softmax(self.logits, dim=-1)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.logits.shape[:-1])

    @property
    def log_partition(self) -> float:
        return 0.0

    def to(self, device=None) -> SiteBase:
        return SiteBase(self.logits.to(device))

    def log_prob(self, codes: Tensor) -> Tensor:
        """log p_0 of codes (*B, *shape), float64 shaped (*B,)."""
        table = self.log_probs.expand(*codes.shape, self.logits.shape[-1])
        per_site = table.gather(-1, codes.unsqueeze(-1)).squeeze(-1)
        return per_site.flatten(start_dim=codes.dim() - len(self.shape)).sum(-1)

    def sample(self, batch_shape: tuple, generator: torch.Generator, dtype=None) -> Tensor:
        """Exact draws, int64 codes shaped (*batch_shape, *shape) (inverse CDF)."""
        cdf = self.log_probs.exp().cumsum(-1)
        u = torch.rand((*batch_shape, *self.shape), generator=generator, dtype=torch.float64, device=cdf.device)
        return (cdf[..., :-1] < (u * cdf[..., -1]).unsqueeze(-1)).sum(-1)


Base = Union[GaussianBase, SiteBase]


def _log_normal_mass(a: Tensor, b: Tensor) -> Tensor:
    """log(Phi(b) - Phi(a)) for a < b, accurate in both tails (the upper tail mirrored to the lower)."""
    flip = a > 0
    lo, hi = torch.where(flip, -b, a), torch.where(flip, -a, b)
    log_hi, log_lo = torch.special.log_ndtr(hi), torch.special.log_ndtr(lo)
    return log_hi + torch.log1p(-torch.exp(log_lo - log_hi))


def _log_ndtri(log_p: Tensor) -> Tensor:
    """z with log Phi(z) = log_p (float64): torch's ndtri where Phi(z) >= 1/2, else Newton's method on log Phi from
    ndtri's answer or, where p underflows, the tail's -sqrt(-2 log p) (log Phi is concave: the iterates approach
    the root from below, its slope at least 0.79 there, so that a few steps reach full precision)."""
    z = torch.special.ndtri(log_p.exp().clamp(max=1 - 1e-16))
    lower = log_p < -math.log(2)
    z = torch.where(lower & ~torch.isfinite(z), -torch.sqrt(-2 * log_p), z)
    for _ in range(6):
        log_phi = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
        log_cdf = torch.special.log_ndtr(z)
        step = (log_cdf - log_p) * torch.exp(log_cdf - log_phi)
        z = torch.where(lower, z - step, z)
    return z


# ----------------------------------------------------------------------------------------------- the model
class EnergyModel:
    """The user's energy E as a model of the 'energy' family: log f(x) = -E(x) (see the module docstring).

    Args:
        energy: an `nn.Module` or a function mapping (N, *event_shape) (categorical: (N, *event_shape, q) one-hot)
            to energies shaped (N,).
        support: 'real', ('real', low, high), 'binary', 'spin' or categorical(q) (or a `Support`).
        event_shape: the shape of one example, e.g. (784,) or (1, 28, 28).
        base: the start of the annealing path, a `GaussianBase` (real) or `SiteBase` (discrete), or None: the path
            then uses `fit_base` on training data or, with none, `default_base`.
        dtype: the energy's input dtype; by default its parameters' (a function's: the default dtype).

    The energy is tried on a probe batch here; what is wrong with it is refused (ValueError), before any estimate.
    """

    family = "energy"

    def __init__(self, energy: Callable[[Tensor], Tensor], support="real", event_shape=(1,), base=None, dtype=None):
        if inspect.isclass(energy):
            raise ValueError(f"energy is the class {energy.__name__}, not a module: pass an instance, "
                             f"{energy.__name__}(...)")  # fmt: skip
        if not callable(energy):
            raise ValueError(f"energy must be an nn.Module or a function of a batch, got a {type(energy).__name__}")
        self.support = as_support(support)
        self.event_shape = _event_shape(event_shape)
        self.energy = energy
        module = isinstance(energy, torch.nn.Module)
        params = [*energy.parameters(), *energy.buffers()] if module else []
        floats = [p for p in params if p.is_floating_point()]
        if dtype is not None and floats and floats[0].dtype != dtype:
            raise ValueError(f"dtype is {dtype} but the energy's parameters are {floats[0].dtype}: leave dtype None "
                             f"(the parameters' dtype) or convert the module (energy.to({dtype}))")  # fmt: skip
        self._dtype = dtype or (floats[0].dtype if floats else torch.get_default_dtype())
        self._device = params[0].device if params else torch.device("cpu")
        if not self._dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating point dtype, got {self._dtype}")
        self.base = None if base is None else check_base(self, base)
        self._watch_gradients()
        check_energy(self)

    def __getstate__(self) -> dict:
        """Picklable (torch.save, spawned workers): the weak reference to the last gradient is left out."""
        return {**self.__dict__, "_last_gradient": None}

    def _watch_gradients(self) -> None:
        """Start watching the gradients the energy's backward returns: the last one (weakly held) and whether it
        returns memory it reuses (`log_f_and_grad`), which check_energy's two gradient calls find before any use."""
        self._last_gradient: Optional[weakref.ref] = None
        self._copies_gradient = False

    # ---------------------------------------------------------------- what the model declares
    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def n_visible(self) -> int:
        """Coordinates (sites) in one example: the product of event_shape."""
        return math.prod(self.event_shape)

    @property
    def num_states(self) -> int:
        """States per site q (0 on real support)."""
        return self.support.num_states

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one example as the energy receives it (categorical: event_shape + (q,))."""
        return self.event_shape + ((self.num_states,) if self.support.kind == "categorical" else ())

    def describe(self) -> str:
        """E.g. 'energy real[0, 1](1x28x28) MLP'."""
        shape = "x".join(str(s) for s in self.event_shape)
        name = type(self.energy).__name__ if isinstance(self.energy, torch.nn.Module) else _function_name(self.energy)
        return f"energy {self.support.describe()}({shape}) {name}"

    def __repr__(self) -> str:
        """E.g. "EnergyModel(MLP, support='real[0, 1]', event_shape=(784,), dtype=torch.float32, device=cpu)"."""
        name = type(self.energy).__name__ if isinstance(self.energy, torch.nn.Module) else _function_name(self.energy)
        return (f"EnergyModel({name}, support={self.support.describe()!r}, event_shape={self.event_shape}, "
                f"dtype={self.dtype}, device={self.device})")  # fmt: skip

    def digest_parts(self) -> tuple[list[Tensor], float]:
        """The energy's parameters and buffers (a resume file's model digest); none for a plain function."""
        if isinstance(self.energy, torch.nn.Module):
            return [*self.energy.parameters(), *self.energy.buffers()], 1.0
        return [], 1.0

    def to(self, device=None, dtype=None) -> EnergyModel:
        """A copy on `device` in `dtype` (a module is deep-copied; a function keeps its own tensors), its energy tried
        again (`check_energy`)."""
        energy = self.energy
        if isinstance(energy, torch.nn.Module):
            energy = copy.deepcopy(energy).to(device=device, dtype=dtype)
        base = None if self.base is None else self.base.to(device)
        model = EnergyModel.__new__(EnergyModel)
        model.support, model.event_shape, model.energy, model.base = self.support, self.event_shape, energy, base
        model._dtype = dtype or self._dtype
        model._device = torch.device(device) if device is not None else self._device
        model._watch_gradients()
        check_energy(model)  # the energy in its new dtype and device is another function: tried again
        return model

    # ---------------------------------------------------------------- states and data
    def state_from_data(self, x: Tensor, what: str = "x") -> Tensor:
        """The chain state of examples x shaped (*B, *event_shape): real: floats in the model's dtype (inside the
        box); discrete: int64 codes. A ValueError naming `what` for anything else."""
        if not isinstance(x, Tensor):
            convert = " (convert it: torch.from_numpy(x))" if type(x).__module__ == "numpy" else ""
            raise ValueError(f"{what} must be a tensor shaped (..., {_shape_text(self.event_shape)}), got a "
                             f"{type(x).__name__}{convert}")  # fmt: skip
        k = len(self.event_shape)
        if x.dim() < k or tuple(x.shape[x.dim() - k:]) != self.event_shape:
            raise ValueError(
                f"{what} must be shaped (..., {_shape_text(self.event_shape)}) (the model's event_shape), got "
                f"{tuple(x.shape)}"
            )
        kind = self.support.kind
        if kind == "real":
            if not x.is_floating_point():
                raise ValueError(f"{what} must hold real numbers of a floating point dtype, got {x.dtype}: convert "
                                 f"them (x.to({self.dtype}))")  # fmt: skip
            finite = torch.isfinite(x).flatten(start_dim=x.dim() - k).all(-1)
            if not bool(finite.all()):
                first = tuple(int(i) for i in (~finite).nonzero()[0]) if finite.dim() else ()
                at = f" (the first: example {first[0] if len(first) == 1 else first})" if first else ""
                raise ValueError(f"{what} must hold finite real numbers, found NaN or infinite values in "
                                 f"{int((~finite).sum())} of its examples{at}")  # fmt: skip
            low, high = self.support.low, self.support.high
            if self.support.bounded and x.numel() and not bool(((x >= low) & (x <= high)).all()):
                raise ValueError(f"{what} must lie in the support's box {self.support.describe()}, found "
                                 f"{float(x.min()):g}..{float(x.max()):g}: {_box_hint(x, low, high)}")  # fmt: skip
            return x.to(device=self.device, dtype=self.dtype)
        if kind == "categorical":
            q = self.num_states
            if x.is_floating_point() and not bool((x == x.round()).all()):
                raise ValueError(f"{what} must hold integer codes 0..{q - 1}, found a fraction")
            if x.numel() and not bool(((x >= 0) & (x < q)).all()):
                raise ValueError(
                    f"{what} must hold integer codes 0..{q - 1}, found {float(x.min()):g}..{float(x.max()):g}"
                )
            return x.to(device=self.device, dtype=torch.int64)
        low, high = TWO_STATE_VALUES[kind]
        if x.numel() and not bool(((x == low) | (x == high)).all()):
            raise ValueError(f"{what} must hold {kind} values {low:g}/{high:g} only, found {_values_text(x)}"
                             f"{_two_state_hint(x, kind)}")  # fmt: skip
        return (x.to(self.device) == high).to(torch.int64)

    def data_from_state(self, state: Tensor) -> Tensor:
        """Examples in the user's convention (real: the floats; binary / spin: floats; categorical: codes)."""
        if self.support.kind in TWO_STATE_VALUES:
            low, high = TWO_STATE_VALUES[self.support.kind]
            return torch.where(state.bool(), high, low).to(self.dtype)
        return state

    def energy_input(self, state: Tensor) -> Tensor:
        """What the energy receives for chain states (*B, *event_shape): real: the state; binary / spin: the
        site values; categorical: one-hot floats (*B, *event_shape, q); in the model's dtype."""
        kind = self.support.kind
        if kind == "real":
            return state if state.dtype == self.dtype else state.to(self.dtype)
        if kind == "categorical":
            return torch.nn.functional.one_hot(state, self.num_states).to(self.dtype)
        return self.data_from_state(state)

    # ---------------------------------------------------------------- densities
    def energies(self, inputs: Tensor) -> Tensor:
        """E of energy inputs (*B, *input_shape), shaped (*B,) (the energy is called on the flattened batch)."""
        batch = inputs.shape[: inputs.dim() - len(self.input_shape)]
        # one batch dimension (HMC's chains) goes in and out as it is: a view each way costs a node in the graph
        flat = inputs if len(batch) == 1 else inputs.reshape(-1, *self.input_shape)
        out = self.energy(flat)
        if not isinstance(out, Tensor) or out.shape != flat.shape[:1]:
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(f"the energy must return one energy per example, shaped ({flat.shape[0]},), got {got}")
        return out if len(batch) == 1 else out.reshape(batch)

    def log_unnormalized_state(self, state: Tensor) -> Tensor:
        """log f = -E of chain states (*B, *event_shape), float64 shaped (*B,) (no gradient kept)."""
        with torch.no_grad():
            return -self.energies(self.energy_input(state)).double()

    def log_unnormalized(self, x: Tensor) -> Tensor:
        """log f(x) = -E(x) of examples x (*B, *event_shape) in the user's convention, float64 shaped (*B,)."""
        return self.log_unnormalized_state(self.state_from_data(x))

    def log_f_and_grad(self, state: Tensor) -> tuple[Tensor, Tensor]:
        """(log f, its gradient with respect to the energy's input) at chain states: float64 (*B,) and the input's
        shape (*B, *input_shape) in the model's dtype. One forward and one backward pass."""
        with torch.enable_grad():
            inputs = self.energy_input(state).detach().requires_grad_(True)
            energy = self.energies(inputs)
            differentiable = energy.requires_grad
            if differentiable:  # the gradient of log f = -E: the sign in the output's gradient (-1 per example,
                # no sum or negation to run forward and backward), not on the gradient itself
                minus_ones = torch.full(energy.shape, -1.0, dtype=energy.dtype, device=energy.device)
                (grad,) = torch.autograd.grad(energy, inputs, grad_outputs=minus_ones, allow_unused=True)
        if not differentiable or grad is None:
            raise ValueError("the energy is not differentiable in its input (no gradient reached x): avoid "
                             ".detach(), .item() and numpy inside it")  # fmt: skip
        # An energy whose backward returns a buffer it keeps and rewrites (a custom autograd.Function writing into
        # out=) would change a chain's kept gradient at the next pass: seen as this gradient sharing memory with the
        # last one returned while that one is still held, and from then on each gradient is copied.
        last = None if self._last_gradient is None else self._last_gradient()
        if last is not None and _shares_memory(last, grad):
            self._copies_gradient = True
        self._last_gradient = weakref.ref(grad)
        return energy.detach().to(torch.float64, copy=True).neg_(), grad.clone() if self._copies_gradient else grad


def _shares_memory(a: Tensor, b: Tensor) -> bool:
    """Whether two tensors lie in the same storage."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _event_shape(event_shape) -> tuple[int, ...]:
    shape = (event_shape,) if isinstance(event_shape, int) else event_shape
    try:
        shape = tuple(shape)
    except TypeError:
        shape = None
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
        raise ValueError(f"event_shape must be positive integers, e.g. (784,) or (1, 28, 28), got {event_shape!r}")
    return shape


def _values_text(x: Tensor) -> str:
    """'-1/1' for data of at most four distinct values, else 'min..max' (one line for an error)."""
    values = torch.unique(x) if x.numel() else x
    if values.numel() <= 4:
        return "/".join(f"{float(v):g}" for v in values)
    return f"{float(x.min()):g}..{float(x.max()):g}"


def _two_state_hint(x: Tensor, kind: str) -> str:
    """How to fix binary data given to a spin support and the other way round, 8-bit images of two levels (0/255) and
    grey levels in [0, 1] (else nothing)."""
    other = "spin" if kind == "binary" else "binary"
    low, high = TWO_STATE_VALUES[other]
    if bool(((x == low) | (x == high)).all()):
        mapped = "(x + 1) / 2" if kind == "binary" else "2 * x - 1"
        return f": these are {other} values; declare support={other!r}, or map them with {mapped}"
    if bool(((x == 0) | (x == 255)).all()):
        return f": 8-bit images of two levels? {'x / 255' if kind == 'binary' else '2 * x / 255 - 1'} maps them"
    if float(x.min()) >= 0 and float(x.max()) <= 1:
        return ": grey levels? binarize them as the model's training data were (e.g. x > 0.5)"
    return ""


def _box_hint(x: Tensor, low: float, high: float) -> str:
    """How to fix data outside the box: 8-bit pixels (integers up to 255) for a box [0, 1] are named as such."""
    if (low, high) == (0.0, 1.0) and float(x.min()) >= 0 and float(x.max()) <= 255 and bool((x == x.round()).all()):
        return "pixels 0..255? scale them as the model's training data were (x / 255, or dequantized: (x + u) / 256)"
    return "rescale them into the box as for training, or declare a support ('real', low, high) that holds them"


def _shape_text(shape: tuple[int, ...]) -> str:
    return ", ".join(str(s) for s in shape)


def _function_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


# ----------------------------------------------------------------------------------------------- bases of a model
def default_base(model: EnergyModel) -> Base:
    """The base when no training data is given: uniform sites (discrete); N(0, 1) per coordinate (real); on a box,
    the Gaussian centred in it with the box's width as std, truncated to it."""
    s = model.support
    if s.discrete:
        return SiteBase(torch.zeros(*model.event_shape, s.num_states, dtype=torch.float64, device=model.device))
    zeros = torch.zeros(model.event_shape, dtype=torch.float64, device=model.device)
    if not s.bounded:
        return GaussianBase(zeros, zeros + 1.0)
    return GaussianBase(zeros + (s.low + s.high) / 2, zeros + (s.high - s.low), s.low, s.high)


def describe_default_base(model: EnergyModel) -> str:
    """`default_base(model)` in words, for a report."""
    s = model.support
    if s.discrete:
        return "uniform sites"
    if not s.bounded:
        return "N(0, 1) per coordinate"
    return f"a Gaussian centred in the box [{s.low:g}, {s.high:g}], its width as std, truncated to it"


def fit_base(model: EnergyModel, train_data: Tensor, *, min_std: float = 1e-2, pseudocount: float = 1e-3) -> Base:
    """The base fitted to training data (N, *event_shape): real: each coordinate's mean and standard deviation
    (at least `min_std` times the box's width, or `min_std`, so that constant pixels keep a proper density), the
    Gaussian truncated to the box if any; discrete: each site's state frequencies, mixed with the uniform one by
    `pseudocount` so that no state has probability zero."""
    state = model.state_from_data(train_data, "training data")
    if state.dim() != 1 + len(model.event_shape) or state.shape[0] == 0:
        raise ValueError(f"training data must be shaped (N, {_shape_text(model.event_shape)}) with N >= 1")
    check_data_energies(model, state, "training data")  # the base must not be fitted to examples of no density
    s = model.support
    if s.discrete:
        if not 0 < pseudocount < 1:
            raise ValueError(f"pseudocount must be in (0, 1), got {pseudocount}")
        freq = torch.nn.functional.one_hot(state, s.num_states).double().mean(0)
        return SiteBase(torch.log((1 - pseudocount) * freq + pseudocount / s.num_states))
    if not min_std > 0:
        raise ValueError(f"min_std must be positive, got {min_std}")
    x = state.double()
    floor = min_std * ((s.high - s.low) if s.bounded else 1.0)
    std = x.std(0, unbiased=False).clamp(min=floor) if x.shape[0] > 1 else torch.full_like(x[0], floor)
    return GaussianBase(x.mean(0), std, s.low, s.high)


def check_base(model: EnergyModel, base) -> Base:
    """`base` if it fits the model's support and event_shape, else a ValueError saying what does not."""
    s = model.support
    want = "SiteBase" if s.discrete else "GaussianBase"
    if not isinstance(base, (GaussianBase, SiteBase)) or (base.kind == "sites") != s.discrete:
        raise ValueError(f"base of a {s.describe()} energy must be a {want}, got a {type(base).__name__}")
    if base.shape != model.event_shape:
        raise ValueError(f"base is shaped {base.shape}, the model's event_shape is {model.event_shape}")
    if s.discrete and base.logits.shape[-1] != s.num_states:
        raise ValueError(f"base has {base.logits.shape[-1]} states per site, the support {s.num_states}")
    if not s.discrete and (base.low, base.high) != (s.low, s.high):
        raise ValueError(f"base's box ({base.low}, {base.high}) is not the support's ({s.low}, {s.high})")
    return base.to(model.device)


__all__ = [
    "KINDS",
    "EnergyModel",
    "GaussianBase",
    "SiteBase",
    "Support",
    "as_support",
    "categorical",
    "check_base",
    "default_base",
    "describe_default_base",
    "fit_base",
]
