"""Boltzmann machines over a chain of binary layers: one energy, its conditionals and its partial sums.

Layers x_0 (visible), x_1, ..., x_L are binary vectors; weights W_l, shaped (n_l, n_{l+1}), connect x_l
and x_{l+1}. The unnormalized log-probability is

    log f(x) = sum_l b_l . x_l + s * sum_l x_l^T W_l x_{l+1}

where s is a weight scale (1 for a trained model). An RBM is the two-layer chain, a DBM a longer one.

Any set of pairwise non-adjacent layers can be summed out analytically, because given its neighbours each such
layer factorizes into independent units: sum_{x_l} exp(x_l . a_l) = prod_j (1 + exp(a_{l,j})). Every method takes
a list of layers in which summed-out layers are None; tensors carry any leading batch dimensions, (*batch, n_l).

The geometric path between an independent base distribution (no weights, biases c_l) and this model is again a
chain with interpolated parameters, W_beta = beta * W and b_beta = (1 - beta) c + beta b, so `annealed` returns a
view that shares the weight tensors and only rescales them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F
from raise_eval.models.boltzmann.products import neighbour_product
from raise_eval.models.contracts import undirected_family
from raise_eval.models.numerics import expm1_
from raise_eval.models.sampling import sample_bernoulli_logits_
from torch import Tensor

Layers = Sequence[Optional[Tensor]]


def as_parameter(name: str, value: Any) -> Tensor:
    """A model parameter as a tensor: a torch.Tensor as given; a numpy array copied into a CPU tensor of its own
    dtype (float64 stays float64: pass `array.astype(np.float32)` for float32; all parameters must then share one
    dtype); TypeError naming the parameter for anything else."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        try:  # a C-ordered copy: later changes to the array do not reach the model
            return torch.tensor(np.ascontiguousarray(value))
        except TypeError:
            raise TypeError(f"{name} is a numpy array of {value.dtype}; parameters must be floating point") from None
    raise TypeError(f"{name} must be a torch.Tensor or a numpy array, got {type(value).__name__}")


def _check_finite(name: str, t: Tensor) -> None:
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        n_nan = int(torch.isnan(t).sum())
        n_inf = int(bad.sum()) - n_nan
        raise ValueError(
            f"{name} has {n_nan} NaN and {n_inf} infinite entries; the parameters are corrupt "
            "(did training diverge?). Evaluate a checkpoint with finite weights."
        )


def _softplus_(x: Tensor) -> Tensor:
    """softplus in place (the ATen out= variant: F.softplus has no in-place form)."""
    return torch.ops.aten.softplus.out(x, 1.0, 20.0, out=x)


# Factors of _sum_log1p lie in [e^-2, e^2]: the product of a block of this many stays within float64's normal range
# (e^-708 to e^709) with room to spare.
_PRODUCT_BLOCK = 256


def _sum_log1p(x: Tensor, buffer: Optional[Tensor] = None) -> Tensor:
    """sum over the last dimension of log1p(x), in float64, shaped x.shape[:-1], for x in [e^-2 - 1, e^2 - 1]
    (overwrites x when it is float64; `buffer`, float64 shaped like x, is used for a float32 x).

    The log of the product of 1 + x over blocks of _PRODUCT_BLOCK units: 1 + x of a float32 x is exact in float64
    (for |x| >= 2^-29, else within 2^-53), and a block's product has a relative error of at most its length times
    2^-53, so the result is within about 1e-13 of the exact sum of the log1p of the given x.
    """
    if x.dtype == torch.float64:
        factors = x.add_(1.0)
    else:
        factors = (torch.empty(x.shape, dtype=torch.float64) if buffer is None else buffer).copy_(x).add_(1.0)
    n = x.shape[-1]
    blocks = max(1, -(-n // _PRODUCT_BLOCK))
    if n % blocks == 0:
        return factors.view(*x.shape[:-1], blocks, n // blocks).prod(-1).log_().sum(-1)
    size = -(-n // blocks)
    total = None
    for start in range(0, n, size):
        part = factors[..., start : start + size].prod(-1).log_()
        total = part if total is None else total.add_(part)
    return total


def random_chain_parameters(
    layer_sizes: Sequence[int],
    *,
    weight_std: float,
    bias_std: float,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> tuple[list[Tensor], list[Tensor]]:
    """Gaussian random (weights, biases) for a chain with the given layer sizes (for tests and examples)."""

    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype, device=device)

    sizes = list(layer_sizes)
    weights = [randn(a, b) * weight_std for a, b in zip(sizes[:-1], sizes[1:])]
    return weights, [randn(n) * bias_std for n in sizes]


def _native_log1p_expm1(
    u: Tensor,
    probs: Tensor,
    model_from: LayeredBoltzmannMachine,
    model_to: LayeredBoltzmannMachine,
    l: int,
    ds: float,
    bound: float,
    fill_probs: bool = False,
) -> Optional[Tensor]:
    """-sum_j log1p(expm1(-d_j) p_j) over layer l's units, float64 shaped (*batch,), by the C kernel (step.c), with
    -d = (b_from - b_to) - ds u; None where it cannot run (no kernel, not the CPU, another dtype, no series for the
    bound): the caller's PyTorch passes serve.

    p = probs as given; or, with fill_probs (float32 only), p = sigmoid(z'), z' = b_to + s_to u, computed by the
    kernel in the same pass into `probs` (contiguous, shaped like u): z' formed in double and rounded to float32, the
    sigmoid in float32 within 1.3 2^-23 relative."""
    from raise_eval.models import native
    from raise_eval.models.numerics import expm1_series_degree

    if u.device.type != "cpu" or u.dtype not in (torch.float32, torch.float64) or not u.is_contiguous():
        return None
    if fill_probs and u.dtype != torch.float32:
        return None
    degree = expm1_series_degree(bound, u.dtype, max_degree=_NATIVE_MAX_DEGREE)
    lib = native.library("step") if degree is not None else None
    if lib is None or not probs.is_contiguous() or probs.dtype != u.dtype:
        return None
    n = u.shape[-1]
    rows = u.numel() // n
    base = (model_from.biases[l] - model_to.biases[l]).contiguous()
    out = torch.empty(u.shape[:-1], dtype=torch.float64)
    if fill_probs:
        b_to = model_to.biases[l].contiguous()  # held: the kernel reads it through a pointer
        kernel = lib.weight_update_float32
        pointers = (n, u.data_ptr(), b_to.data_ptr(), float(model_to.weight_scale), base.data_ptr(), float(ds))
        pointers += (max(degree, 1), probs.data_ptr(), out.data_ptr())
    else:
        kernel = lib.log1p_expm1_float32 if u.dtype == torch.float32 else lib.log1p_expm1_float64
        pointers = (n, u.data_ptr(), probs.data_ptr(), base.data_ptr(), float(ds), max(degree, 1), out.data_ptr())

    def run(begin: int, end: int) -> None:
        kernel(begin, end, *pointers)

    native.run_in_parts(run, native.split_rows(rows, torch.get_num_threads() if rows * n >= 1 << 16 else 1))
    return out


_NATIVE_MAX_DEGREE = 30  # step.c's series takes degrees up to 31


class LayeredBoltzmannMachine:
    """A Boltzmann machine over binary layers x_0 (visible), ..., x_L connected in a chain.

    Args:
        weights: L tensors, weights[l] shaped (n_l, n_{l+1}).
        biases: L + 1 tensors, biases[l] shaped (n_l,).
        (numpy arrays are accepted and copied into CPU tensors of their own dtype: `as_parameter`.)
        weight_scale: multiplies every weight (the inverse temperature on the geometric path).
    """

    def __init__(self, weights: Sequence[Tensor], biases: Sequence[Tensor], weight_scale: float = 1.0):
        weights, biases = tuple(weights), tuple(biases)
        if len(weights) < 1:
            raise ValueError("a Boltzmann machine needs at least one weight matrix (two layers)")
        if len(biases) != len(weights) + 1:
            raise ValueError(f"{len(weights)} weight matrices need {len(weights) + 1} bias vectors, got {len(biases)}")
        weights = tuple(as_parameter(f"weights[{i}]", w) for i, w in enumerate(weights))
        biases = tuple(as_parameter(f"biases[{i}]", b) for i, b in enumerate(biases))
        ref = weights[0]
        if not torch.is_floating_point(ref):
            raise TypeError(f"weights must be floating point tensors, got {ref.dtype}")
        for name, t in [(f"weights[{i}]", w) for i, w in enumerate(weights)] + [
            (f"biases[{i}]", b) for i, b in enumerate(biases)
        ]:
            if t.dtype != ref.dtype or t.device != ref.device:
                raise ValueError(
                    f"{name} is {t.dtype} on {t.device} but weights[0] is {ref.dtype} on {ref.device}; "
                    "convert all parameters to one dtype and device"
                )
            _check_finite(name, t)
        for i, b in enumerate(biases):
            if b.dim() != 1:
                raise ValueError(f"biases[{i}] must be a vector, got shape {tuple(b.shape)}")
        for i, w in enumerate(weights):
            expected = (biases[i].shape[0], biases[i + 1].shape[0])
            if tuple(w.shape) != expected:
                raise ValueError(
                    f"weights[{i}] has shape {tuple(w.shape)} but the biases give layer sizes {expected}; "
                    "weights[l] must be shaped (n_l, n_{l+1})"
                )
        self._set(weights, biases, float(weight_scale))

    def _set(self, weights: tuple[Tensor, ...], biases: tuple[Tensor, ...], weight_scale: float) -> None:
        self.weights = weights
        self.biases = biases
        self.weight_scale = weight_scale

    @classmethod
    def _trusted(cls, weights, biases, weight_scale):
        # Used in the annealing loop: parameters come from an already validated model.
        obj = cls.__new__(cls)
        obj._set(tuple(weights), tuple(biases), float(weight_scale))
        return obj

    # ----------------------------------------------------------------- structure
    typed_layers = False  # binary layers, held as 0/1 vectors (`models.contracts.BoltzmannModel`)

    @property
    def family(self) -> str:
        """'RBM' for two layers, 'DBM' for more (`models.contracts`); the RBM and DBM classes declare theirs."""
        return undirected_family(self.num_layers)

    def describe(self) -> str:
        """E.g. 'RBM 784-500'."""
        return f"{self.family} {'-'.join(map(str, self.layer_sizes))}"

    def digest_parts(self) -> tuple[list[Tensor], float]:
        """The weights and biases, and the weight scale (a resume file's model digest)."""
        return [*self.weights, *self.biases], self.weight_scale

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        return tuple(b.shape[0] for b in self.biases)

    @property
    def num_layers(self) -> int:
        return len(self.biases)

    @property
    def n_visible(self) -> int:
        return self.biases[0].shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.weights[0].dtype

    @property
    def device(self) -> torch.device:
        return self.weights[0].device

    def to(self, device=None, dtype=None) -> LayeredBoltzmannMachine:
        """A copy on another device and/or dtype (same class)."""
        return type(self)._trusted(
            [w.to(device=device, dtype=dtype) for w in self.weights],
            [b.to(device=device, dtype=dtype) for b in self.biases],
            self.weight_scale,
        )

    def annealed(self, beta: float, base_biases: Sequence[Tensor]) -> LayeredBoltzmannMachine:
        """The point at `beta` on the geometric path from the independent base with `base_biases` to this model.

        f_beta = f_base^(1 - beta) f^beta, which is the chain with weights beta * W and biases
        (1 - beta) * base + beta * b. The weight tensors are shared, not copied.
        """
        biases = [torch.lerp(c, b, beta) for c, b in zip(base_biases, self.biases)]
        return type(self)._trusted(self.weights, biases, self.weight_scale * beta)

    # ----------------------------------------------------------------- conditionals
    def _neighbour_products(
        self,
        layers: Layers,
        l: int,
        out: Optional[Tensor],
        bias: Optional[Tensor] = None,
        alpha: float = 1.0,
        sampled: bool = False,
    ) -> Tensor:
        """bias + alpha (x_{l-1} W_{l-1} + x_{l+1} W_l^T), or the bare products when bias is None (alpha 1),
        shaped (*batch, n_l); bias and scale are folded into the products. The route (torch.mm, oneDNN, or the
        table and amx routes when `sampled`: the neighbours are samples, 0. and 1. only) is the one
        `products.neighbour_product`'s installed chooser picks (raise-eval's times them once per shape)."""
        terms = []
        if l > 0:
            terms.append((layers[l - 1], self.weights[l - 1], False))
        if l < self.num_layers - 1:
            terms.append((layers[l + 1], self.weights[l], True))
        if any(x is None for x, _, _ in terms):
            raise ValueError(f"layer {l} needs both of its neighbouring layers; one of them is None")
        lead = terms[0][0].shape[:-1]
        flat_out = None if out is None else out.view(-1, self.layer_sizes[l])
        flats = [(x.reshape(-1, x.shape[-1]), w, transposed) for x, w, transposed in terms]
        result = neighbour_product(flats, flat_out, bias, alpha, binary=sampled)
        return result.view(*lead, self.layer_sizes[l])

    def unscaled_input(self, layers: Layers, l: int, out: Optional[Tensor] = None, sampled: bool = False) -> Tensor:
        """x_{l-1} W_{l-1} + x_{l+1} W_l^T, shaped (*batch, n_l): the input layer `l` gets from its neighbours
        before the weight scale (written into `out`, contiguous, when given). Both neighbours that exist in the
        chain must be given; `sampled` promises that they are samples (0. and 1. only), which admits the table
        and amx routes for the products (the same flag as `MixedBoltzmannMachine`'s)."""
        return self._neighbour_products(layers, l, out, sampled=sampled)

    def layer_logits(
        self,
        layers: Layers,
        l: int,
        unscaled_input: Optional[Tensor] = None,
        out: Optional[Tensor] = None,
        sampled: bool = False,
    ) -> Tensor:
        """Logits of p(x_l | neighbours), shaped (*batch, n_l).

        Pass `unscaled_input` when it is cached, and `out` (contiguous, the result's shape) to write into an
        existing buffer; `sampled` as in `unscaled_input`.
        """
        if unscaled_input is None:
            return self._neighbour_products(layers, l, out, bias=self.biases[l], alpha=self.weight_scale, sampled=sampled)
        if out is None:
            return torch.add(self.biases[l], unscaled_input, alpha=self.weight_scale)
        return torch.add(self.biases[l], unscaled_input, alpha=self.weight_scale, out=out)

    def layer_probs(self, layers: Layers, l: int, unscaled_input: Optional[Tensor] = None) -> Tensor:
        """p(x_l = 1 | neighbours) unit by unit, shaped (*batch, n_l)."""
        return torch.sigmoid(self.layer_logits(layers, l, unscaled_input))

    def sample_layer(
        self,
        layers: Layers,
        l: int,
        generator: torch.Generator,
        unscaled_input: Optional[Tensor] = None,
        out: Optional[Tensor] = None,
        sampled: bool = False,
    ) -> Tensor:
        """A sample of x_l ~ p(x_l | neighbours), shaped (*batch, n_l), in the model's dtype (written into
        `out` when given); `sampled` as in `unscaled_input`."""
        logits = self.layer_logits(layers, l, unscaled_input, out=out, sampled=sampled)
        return sample_bernoulli_logits_(logits, generator)

    # ----------------------------------------------------------------- energies
    def log_unnormalized_marginal(
        self, layers: Layers, unscaled_inputs: Optional[Sequence[Optional[Tensor]]] = None
    ) -> Tensor:
        """log sum_{x_l : layers[l] is None} f(x), shaped (*batch,).

        Summed-out layers (None) must not be adjacent. `unscaled_inputs[l]`, when given, is the cached
        `unscaled_input(layers, l)` of a summed-out layer and saves its matrix products.
        """
        if len(layers) != self.num_layers:
            raise ValueError(f"expected {self.num_layers} layers (None for summed-out ones), got {len(layers)}")
        for l in range(self.num_layers - 1):
            if layers[l] is None and layers[l + 1] is None:
                raise ValueError(f"layers {l} and {l + 1} are both summed out; only non-adjacent layers can be")
        total = None
        for l, x in enumerate(layers):
            if x is None:
                cached = None if unscaled_inputs is None else unscaled_inputs[l]
                term = F.softplus(self.layer_logits(layers, l, cached)).sum(-1)
            else:
                term = torch.mv(x.reshape(-1, x.shape[-1]), self.biases[l]).reshape(x.shape[:-1])
                if l + 1 < self.num_layers and layers[l + 1] is not None:
                    # x_l^T W_l x_{l+1}, batched
                    y = layers[l + 1]
                    xw = torch.mm(x.reshape(-1, x.shape[-1]), self.weights[l]).reshape(*x.shape[:-1], -1)
                    term = term + self.weight_scale * (xw * y).sum(-1)
            total = term if total is None else total + term
        return total

    def log_ratio_to(
        self,
        other: LayeredBoltzmannMachine,
        layers: Layers,
        unscaled_inputs: Optional[Sequence[Optional[Tensor]]] = None,
        buffers: Optional[Sequence[Tensor]] = None,
        small_steps: Optional[Sequence[bool]] = None,
        step_bounds: Optional[Sequence[Optional[float]]] = None,
    ) -> Tensor:
        """log f_other(x) - log f_self(x), shaped (*batch,), for `other` on the same path (the same weight tensors
        with another scale and other biases, e.g. two `annealed` points); layers as in
        `log_unnormalized_marginal`.

        Computed term by term, so that the small difference between neighbouring temperatures is not left to
        cancel between two large sums. A summed-out layer contributes sum_j softplus(z'_j) - softplus(z_j) with
        z, z' its logits under self and other; with d = z' - z this equals -log1p(expm1(-d) sigmoid(z')), which
        is cheaper (one transcendental function fewer) and more accurate while |d| is small, but loses accuracy
        when d >> 0 and sigmoid(z') ~ 1. Callers that can guarantee |d| <= 2 for summed-out layer l pass
        small_steps[l] = True to use it; the first buffer of that layer then holds sigmoid(z'), p(x_l = 1 | rest)
        under `other`, for a sampler at other's temperature to reuse. Its log1p terms are summed as the logarithm
        of their product, in float64: each factor 1 + expm1(-d) sigmoid(z') lies between e^-2 and e^2 and is
        formed exactly in float64 from a float32 argument (nearly so from a float64 one), a block of 256 of
        them multiplies without overflow or rounding of note, and one logarithm per block replaces a log1p per
        unit: cheaper than log1p and float32 summation, and more accurate. expm1(-d) is `expm1_`'s: on the CPU a
        short Taylor series where the step's largest |d| allows (within about an epsilon of e^-d - 1, a third of the
        cost of torch.expm1).

        Args:
            buffers: four contiguous scratch tensors per summed-out layer (in layer order), each shaped like that
                layer: two in the model's dtype, one in float64 and one more in the model's dtype, used instead of
                fresh temporaries.
            small_steps: per layer, whether |d| <= 2 is guaranteed (see above).
            step_bounds: per layer, the largest |d| guaranteed (or None): with it the small-step form's sum runs in
                the C kernel of `raise_eval.models.native` where that is available (step.c: one pass, in float64, expm1
                by the series of `expm1_series_degree` for that bound), instead of its PyTorch passes; for a
                float32 model with buffers the same pass computes sigmoid(z') (z' formed in double, then rounded to
                float32; the sigmoid's relative error within 1.3 2^-23, as torch.sigmoid's).
        Returns:
            the log-ratio in float64, shaped (*batch,).
        """
        if other.weights is not self.weights:
            raise ValueError("log_ratio_to compares two points of one path: both must share the weight tensors")
        ds = other.weight_scale - self.weight_scale
        total = None
        spare = iter(buffers) if buffers is not None else None
        for l, x in enumerate(layers):
            if x is None:
                cached = None if unscaled_inputs is None else unscaled_inputs[l]
                if cached is None:
                    cached = self.unscaled_input(layers, l)
                a, b, c, e = (next(spare) for _ in range(4)) if spare is not None else (None,) * 4
                if small_steps is not None and small_steps[l]:
                    # -log1p(expm1(-d) sigmoid(z')): leaves sigmoid(z') in `a`, the probabilities of layer l
                    # under `other`, which a sampler at other's temperature can reuse.
                    bound = None if step_bounds is None else step_bounds[l]
                    term = None
                    if bound is not None and a is not None and cached.dtype == torch.float32:
                        # float32: the probabilities too in the kernel's pass (step.c's sigmoid)
                        term = _native_log1p_expm1(cached, a, self, other, l, ds, bound, fill_probs=True)
                    if term is None:
                        probs = other.layer_logits(layers, l, cached, out=a).sigmoid_()
                        if bound is not None:
                            term = _native_log1p_expm1(cached, probs, self, other, l, ds, bound)
                    if term is None:
                        # -d = (b_self - b_other) - ds u, the exact negation of d: no pass to negate it, and the
                        # sum is negated instead of each term (negation is exact, so the bits are the same).
                        neg_d = torch.add(
                            self.biases[l] - other.biases[l], cached, alpha=-ds, **({} if b is None else {"out": b})
                        )
                        term = _sum_log1p(expm1_(neg_d, scratch=e).mul_(probs), c).neg_()
                else:
                    to_ = _softplus_(other.layer_logits(layers, l, cached, out=a))
                    term = to_.sub_(_softplus_(self.layer_logits(layers, l, cached, out=b))).sum(-1)
            else:
                flat = x.reshape(-1, x.shape[-1])
                term = torch.mv(flat, other.biases[l] - self.biases[l]).reshape(x.shape[:-1])
                if ds != 0.0 and l + 1 < self.num_layers and layers[l + 1] is not None:
                    xw = torch.mm(flat, self.weights[l]).reshape(*x.shape[:-1], -1)
                    term = term + ds * (xw * layers[l + 1]).sum(-1)
            term = term.to(torch.float64)
            total = term if total is None else total + term
        return total

    def log_unnormalized_joint(self, layers: Layers) -> Tensor:
        """log f(x) = -E(x) for a full configuration, shaped (*batch,)."""
        if any(x is None for x in layers):
            raise ValueError("log_unnormalized_joint needs every layer; use log_unnormalized_marginal to sum some out")
        return self.log_unnormalized_marginal(layers)

    def __repr__(self) -> str:
        sizes = "-".join(str(n) for n in self.layer_sizes)
        scale = "" if self.weight_scale == 1.0 else f", weight_scale={self.weight_scale:g}"
        return f"{type(self).__name__}({sizes}, {self.dtype}, {self.device}{scale})"
