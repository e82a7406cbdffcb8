"""Boltzmann machines whose layers have any of the unit types of `units`: Gaussian, categorical (Potts), ±1 spins
and {0, 1} (Bernoulli), in a chain x_0 (visible), x_1, ..., x_L:

    log f(x) = sum_l phi_l(x_l; theta_l) + s * sum_l x_l^T W_l x_{l+1},

weights W_l shaped (width_l, width_{l+1}), theta_l the layer's parameters (`Layer.param_shape`), s the weight scale
(1 for a trained model). An RBM is the two-layer chain. The interface is that of `LayeredBoltzmannMachine` (the
binary machines, which keep their own fast path): `unscaled_input`, `sample_layer`, `log_unnormalized_marginal`
with summed-out layers None (any set of pairwise non-adjacent layers, each independent given its neighbours:
its log-normalizer), `annealed`, so that the paths, the kernel and the exact enumeration serve every pairing.

The geometric path from an independent base (weights off, parameters c_l) is again such a chain: every layer's
phi is linear in its parameters (up to a constant for a Gaussian layer, whose phi is -lam (x - eta / lam)^2 / 2),
so f_base^(1 - beta) f^beta has parameters (1 - beta) c + beta theta and weights beta W; `annealed` returns it.

Normalizable: a discrete layer always is; a Gaussian layer given discrete neighbours too; adjacent Gaussian layers
need a positive definite precision (diag(lam_l) on the diagonal blocks, -W_l off them), checked when built.

The checkpoint conventions of other code (`rbm_from_arrays`, `rbm_arrays`): E(v, h) = -log f(v, h) with
- Gaussian visible: sum_i (v_i - vbias_i)^2 / (2 sigma_i^2) - sum_ij (v_i / sigma_i) W_ij h_j (the coupling of a
  Gaussian hidden layer likewise divided by its `hsigma`);
- categorical visible: -sum_i vbias[i, v_i] - sum_ij W[i, v_i, j] h_j, W shaped (n_v, q, n_h), vbias (n_v, q);
- spin and Bernoulli: -v . vbias - v^T W h;
the hidden layer's terms alike (hbias; a categorical hidden layer's W shaped (n_v, n_h, q_h)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import numpy as np
import torch
from raise_eval.models.boltzmann.layered import as_parameter
from raise_eval.models.boltzmann.products import neighbour_product
from raise_eval.models.boltzmann.supports import BINARY, Support
from raise_eval.models.boltzmann.units import (
    CategoricalLayer,
    GaussianLayer,
    Layer,
    make_layer,
    unit_type,
)
from raise_eval.models.contracts import undirected_family
from torch import Tensor

Layers = Sequence[Optional[Tensor]]


class MixedBoltzmannMachine:
    """A Boltzmann machine over a chain of typed layers (see the module docstring).

    Args:
        layers: L + 1 `Layer`s (their types and sizes), layers[0] the visible one.
        weights: L tensors, weights[l] shaped (layers[l].width, layers[l + 1].width).
        biases: L + 1 tensors, biases[l] shaped layers[l].param_shape (a Gaussian layer's (eta, lam)).
        weight_scale: multiplies every weight (the inverse temperature on the geometric path).
    """

    def __init__(
        self, layers: Sequence[Layer], weights: Sequence[Tensor], biases: Sequence[Tensor], weight_scale: float = 1.0
    ):
        layers, weights, biases = tuple(layers), tuple(weights), tuple(biases)
        if len(layers) < 2:
            raise ValueError("a Boltzmann machine needs at least two layers")
        if len(weights) != len(layers) - 1 or len(biases) != len(layers):
            raise ValueError(
                f"{len(layers)} layers need {len(layers) - 1} weight matrices and {len(layers)} "
                f"parameter tensors, got {len(weights)} and {len(biases)}"
            )
        for l, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise TypeError(f"layers[{l}] must be a Layer (e.g. GaussianLayer(784)), got {type(layer).__name__}")
            if not isinstance(layer.support, Support):  # the declaration everything else dispatches on
                raise TypeError(
                    f"layers[{l}] ({type(layer).__name__}) declares support {layer.support!r}; a layer's support is a "
                    "raise_eval.models.boltzmann.supports.Support (REAL, NONNEGATIVE, BINARY, SPIN or one_hot(q))"
                )
        weights = tuple(as_parameter(f"weights[{l}]", w) for l, w in enumerate(weights))  # numpy arrays copied
        biases = tuple(as_parameter(f"biases[{l}]", b) for l, b in enumerate(biases))
        ref = weights[0]
        if not torch.is_floating_point(ref):
            raise TypeError(f"weights must be floating point tensors, got {ref.dtype}")
        named = [(f"weights[{l}]", w) for l, w in enumerate(weights)] + [
            (f"biases[{l}]", b) for l, b in enumerate(biases)
        ]
        for name, t in named:
            if t.dtype != ref.dtype or t.device != ref.device:
                raise ValueError(
                    f"{name} is {t.dtype} on {t.device} but weights[0] is {ref.dtype} on {ref.device}; "
                    "convert all parameters to one dtype and device"
                )
            if not bool(torch.isfinite(t).all()):
                raise ValueError(
                    f"{name} has NaN or infinite entries; the parameters are corrupt (did training diverge?)"
                )
        for l, (layer, b) in enumerate(zip(layers, biases)):
            layer.check_params(b, f"biases[{l}]")
        for l, w in enumerate(weights):
            expected = (layers[l].width, layers[l + 1].width)
            if tuple(w.shape) != expected:
                raise ValueError(
                    f"weights[{l}] has shape {tuple(w.shape)}; between a {layers[l].describe()} and a "
                    f"{layers[l + 1].describe()} layer it must be {expected}"
                )
        self._set(layers, weights, biases, float(weight_scale))
        self.check_normalizable()

    def _set(self, layers, weights, biases, weight_scale, tables: Optional[dict] = None) -> None:
        self.layers, self.weights, self.biases, self.weight_scale = layers, weights, biases, weight_scale
        # Contiguous copies of W_l^T for the gather route of categorical layers above layer l, made once and shared
        # by the annealed copies (which share the weights).
        self._tables = {} if tables is None else tables

    @classmethod
    def _trusted(cls, layers, weights, biases, weight_scale, tables: Optional[dict] = None):
        obj = cls.__new__(cls)
        obj._set(tuple(layers), tuple(weights), tuple(biases), float(weight_scale), tables)
        return obj

    def check_normalizable(self) -> None:
        """ValueError when adjacent continuous layers may not make a normalizable density, naming the layers and the
        fix. A discrete layer next to a continuous one is normalizable whenever the continuous layer's own
        log-normalizer is finite (its `check_params`); a run of adjacent continuous layers is checked where their
        conditionals are normal (`Layer.normal_conditional`: the joint precision must be positive definite) and
        refused otherwise, since nothing here could vouch for it."""
        l = 0
        while l < self.num_layers:
            if self.layers[l].discrete:
                l += 1
                continue
            run = [l]
            while run[-1] + 1 < self.num_layers and not self.layers[run[-1] + 1].discrete:
                run.append(run[-1] + 1)
            l = run[-1] + 1
            if len(run) == 1:
                continue
            unknown = [i for i in run if not self.layers[i].normal_conditional]
            if unknown:
                names = ", ".join(f"layer {i} ({self.layers[i].describe()})" for i in unknown)
                raise ValueError(
                    f"adjacent continuous layers {run}: whether they make a normalizable density is known only for "
                    f"layers with normal conditionals, and {names} is not one; put a discrete layer between them"
                )
            precision = self._gaussian_precision(run)
            _, info = torch.linalg.cholesky_ex(precision)
            if int(info) != 0:
                names = ", ".join(f"weights[{i}]" for i in run[:-1])
                raise ValueError(
                    f"adjacent Gaussian layers {run} do not make a normalizable density: their joint precision (1 / "
                    f"sigma^2 on the diagonal, minus {names} off it) is not positive definite: the weights are too "
                    "large for the units' spread; lower the weights (a checkpoint's W) or the standard deviations "
                    "(sigma, hsigma)"
                )

    def _gaussian_precision(self, run: list[int]) -> Tensor:
        sizes = [self.layers[i].size for i in run]
        offsets = np.cumsum([0] + sizes).tolist()
        p = torch.zeros(offsets[-1], offsets[-1], dtype=torch.float64, device=self.device)
        for k, i in enumerate(run):
            a, b = offsets[k], offsets[k + 1]
            p[a:b, a:b] = torch.diag(self.biases[i][1].double())
            if k + 1 < len(run):
                c = offsets[k + 2]
                w = self.weight_scale * self.weights[i].double()
                p[a:b, b:c] = -w
                p[b:c, a:b] = -w.t()
        return p

    # ----------------------------------------------------------------- structure
    typed_layers = True  # typed `Layer`s with declared supports (`models.contracts.BoltzmannModel`)

    @property
    def family(self) -> str:
        """'RBM' for two layers, 'DBM' for more (`models.contracts`)."""
        return undirected_family(self.num_layers)

    def digest_parts(self) -> tuple[list[Tensor], float]:
        """The weights and parameters, and the weight scale (a resume file's model digest)."""
        return [*self.weights, *self.biases], self.weight_scale

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """Entries of each layer's state (a categorical layer's sites x q)."""
        return tuple(layer.width for layer in self.layers)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def n_visible(self) -> int:
        return self.layers[0].width

    @property
    def dtype(self) -> torch.dtype:
        return self.weights[0].dtype

    @property
    def device(self) -> torch.device:
        return self.weights[0].device

    @property
    def continuous(self) -> bool:
        """Whether the visible layer's support is continuous (its `Layer.support`): log p(v) is then a density (nats
        per vector in the data's units), not a log-probability."""
        return not self.layers[0].support.discrete

    def describe(self) -> str:
        """The layers in words, e.g. 'categorical(53x21) - bernoulli(20)'."""
        return " - ".join(layer.describe() for layer in self.layers)

    def to(self, device=None, dtype=None) -> MixedBoltzmannMachine:
        """A copy on another device and/or dtype."""
        return type(self)._trusted(
            self.layers,
            [w.to(device=device, dtype=dtype) for w in self.weights],
            [b.to(device=device, dtype=dtype) for b in self.biases],
            self.weight_scale,
        )

    def annealed(self, beta: float, base_biases: Sequence[Tensor]) -> MixedBoltzmannMachine:
        """The point at `beta` of the geometric path from the independent base with parameters `base_biases`:
        parameters lerp(base, theta, beta), weights shared, scale * beta."""
        biases = [torch.lerp(c, b, beta) for c, b in zip(base_biases, self.biases)]
        return type(self)._trusted(self.layers, self.weights, biases, self.weight_scale * beta, self._tables)

    # ----------------------------------------------------------------- conditionals
    def _rows(self, k: int, l: int) -> Tensor:
        """The weights as rows indexed by layer k's entries, (width_k, width_l), for neighbours k and l."""
        if k < l:
            return self.weights[k]
        table = self._tables.get(l)
        if table is None:
            table = self._tables[l] = self.weights[l].t().contiguous()
        return table

    def _products(
        self,
        layers: Layers,
        l: int,
        out: Optional[Tensor],
        codes: Optional[dict],
        bias: Optional[Tensor] = None,
        alpha: float = 1.0,
        sampled: bool = False,
    ) -> Tensor:
        """bias + alpha (x_{l-1} W_{l-1} + x_{l+1} W_l^T) (the bare sum when bias is None, alpha 1), shaped
        (*batch, width_l), into `out` when given. A categorical neighbour whose int64 codes (*batch, sites) are in
        `codes` (the sampler's, by layer) is summed by gathering one weight row per site (torch.embedding_bag):
        sites x width_l additions per vector instead of sites x q x width_l multiply-adds. With `sampled` (the
        neighbours are samples) and only Bernoulli neighbours, which then hold 0. and 1., the product goes the way of
        a binary machine's (`raise_eval.models.boltzmann.products`: torch.mm, oneDNN or the table route of subset
        sums, chosen by timing once per shape)."""
        terms = [k for k in (l - 1, l + 1) if 0 <= k < self.num_layers]
        if any(layers[k] is None for k in terms):
            raise ValueError(f"layer {l} needs both of its neighbouring layers; one of them is None")
        lead = layers[terms[0]].shape[:-1]
        width = self.layer_sizes[l]
        flat_out = None if out is None else out.view(-1, width)
        if sampled and all(self.layers[k].support == BINARY for k in terms):
            flats = [
                (layers[k].reshape(-1, layers[k].shape[-1]), self.weights[min(k, l)], k > l) for k in terms
            ]  # A = W_{l-1} from below, W_l^T from above
            return neighbour_product(flats, flat_out, bias, alpha, binary=True).view(*lead, width)
        acc = None
        for k in terms:
            x = layers[k]
            c = None if codes is None else codes.get(k)
            if c is not None:
                layer = self.layers[k]
                index = c.reshape(-1, layer.size) + layer.q * torch.arange(layer.size, device=c.device)
                offsets = torch.arange(0, index.numel(), layer.size, device=c.device)
                part = torch.embedding_bag(self._rows(k, l), index.reshape(-1), offsets, False, 0)[0]
                if acc is None:
                    if bias is not None:
                        acc = torch.add(bias, part, alpha=alpha, **({} if flat_out is None else {"out": flat_out}))
                    else:
                        acc = part if flat_out is None else flat_out.copy_(part)
                else:
                    acc.add_(part, alpha=alpha)
                continue
            flat = x.reshape(-1, x.shape[-1])
            w = self.weights[k] if k < l else self.weights[l].t()
            if acc is not None:
                acc.addmm_(flat, w, alpha=alpha)
            elif bias is not None:
                acc = torch.addmm(bias, flat, w, alpha=alpha, **({} if flat_out is None else {"out": flat_out}))
            else:
                acc = torch.mm(flat, w) if flat_out is None else torch.mm(flat, w, out=flat_out)
        return acc.view(*lead, width)

    def unscaled_input(
        self,
        layers: Layers,
        l: int,
        out: Optional[Tensor] = None,
        codes: Optional[dict] = None,
        sampled: bool = False,
    ) -> Tensor:
        """x_{l-1} W_{l-1} + x_{l+1} W_l^T, shaped (*batch, width_l) (into `out` when given): layer l's input from
        its neighbours before the weight scale. Both neighbours that exist must be given; `codes`, by layer, the
        int64 codes of categorical neighbours (their rows are then gathered, not multiplied); `sampled` promises
        that the neighbours are samples (Bernoulli ones hold only 0. and 1.), which admits the table route."""
        return self._products(layers, l, out, codes, sampled=sampled)

    def natural_input(
        self,
        layers: Layers,
        l: int,
        out: Optional[Tensor] = None,
        codes: Optional[dict] = None,
        unscaled_input: Optional[Tensor] = None,
        sampled: bool = False,
    ) -> Tensor:
        """field_l + s * (x_{l-1} W_{l-1} + x_{l+1} W_l^T): the natural parameters `Layer.sample_natural_` draws
        layer l from (its field added in the product), into `out` when given; `sampled` as in `unscaled_input`."""
        field = self.layers[l].field(self.biases[l])
        if unscaled_input is not None:
            return torch.add(field, unscaled_input, alpha=self.weight_scale, **({} if out is None else {"out": out}))
        return self._products(layers, l, out, codes, bias=field, alpha=self.weight_scale, sampled=sampled)

    def layer_input(self, layers: Layers, l: int, unscaled_input: Optional[Tensor] = None) -> Tensor:
        """s * (x_{l-1} W_{l-1} + x_{l+1} W_l^T): what layer l's units see from their neighbours."""
        u = self.unscaled_input(layers, l) if unscaled_input is None else unscaled_input
        return u if self.weight_scale == 1.0 else u * self.weight_scale

    def sample_layer(
        self,
        layers: Layers,
        l: int,
        generator: torch.Generator,
        unscaled_input: Optional[Tensor] = None,
        out: Optional[Tensor] = None,
    ) -> Tensor:
        """x_l ~ p(x_l | neighbours), shaped (*batch, width_l), in the model's dtype (into `out` when given)."""
        return self.layers[l].sample(self.biases[l], self.layer_input(layers, l, unscaled_input), generator, out=out)

    def layer_mean(self, layers: Layers, l: int, unscaled_input: Optional[Tensor] = None) -> Tensor:
        """E[x_l | neighbours], shaped (*batch, width_l)."""
        return self.layers[l].mean(self.biases[l], self.layer_input(layers, l, unscaled_input))

    # ----------------------------------------------------------------- energies
    def log_unnormalized_marginal(
        self, layers: Layers, unscaled_inputs: Optional[Sequence[Optional[Tensor]]] = None
    ) -> Tensor:
        """log sum_{x_l : layers[l] is None} f(x) (an integral for Gaussian layers), float64, shaped (*batch,).

        Summed-out layers (None) must not be adjacent; `unscaled_inputs[l]`, when given, is the cached
        `unscaled_input(layers, l)` of a summed-out layer."""
        if len(layers) != self.num_layers:
            raise ValueError(f"expected {self.num_layers} layers (None for summed-out ones), got {len(layers)}")
        for l in range(self.num_layers - 1):
            if layers[l] is None and layers[l + 1] is None:
                raise ValueError(f"layers {l} and {l + 1} are both summed out; only non-adjacent layers can be")
        total = None
        for l, x in enumerate(layers):
            layer = self.layers[l]
            if x is None:
                cached = None if unscaled_inputs is None else unscaled_inputs[l]
                term = layer.log_normalizer(self.biases[l], self.layer_input(layers, l, cached)).double()
            else:
                term = layer.log_potential(self.biases[l], x).double()
                if l + 1 < self.num_layers and layers[l + 1] is not None:
                    y = layers[l + 1]
                    xw = torch.mm(x.reshape(-1, x.shape[-1]), self.weights[l]).reshape(*x.shape[:-1], -1)
                    term = term + self.weight_scale * (xw * y).sum(-1).double()
            total = term if total is None else total + term
        return total

    def log_unnormalized_joint(self, layers: Layers) -> Tensor:
        """log f(x) for a full configuration, float64, shaped (*batch,)."""
        if any(x is None for x in layers):
            raise ValueError("log_unnormalized_joint needs every layer; use log_unnormalized_marginal to sum some out")
        return self.log_unnormalized_marginal(layers)

    def log_unnormalized_prob(self, v: Tensor) -> Tensor:
        """An RBM's log f(v) = log sum_h f(v, h) (minus the free energy), float64, shaped (*batch,)."""
        if self.num_layers != 2:
            raise ValueError(
                "log_unnormalized_prob is an RBM's closed form; a deeper machine sums its hidden layers "
                "by enumeration or estimation"
            )
        return self.log_unnormalized_marginal([v, None])

    # ----------------------------------------------------------------- data
    def prepare_visible(self, data: Tensor, what: str = "data") -> Tensor:
        """The visible layer's states from data in the forms users keep them (`Layer.prepare`), in the model's
        dtype and device (UnitDataError saying how to fix data that are not states of the layer)."""
        data = torch.as_tensor(data)
        return self.layers[0].prepare(data, what).to(device=self.device, dtype=self.dtype)

    def check_visible(self, data: Tensor, what: str = "data") -> Tensor:
        """Check that `data` (N, n_visible) are states of the visible layer as the model holds them."""
        return self.layers[0].check_states(data, what)

    def __repr__(self) -> str:
        scale = "" if self.weight_scale == 1.0 else f", weight_scale={self.weight_scale:g}"
        return f"{type(self).__name__}({self.describe()}, {self.dtype}, {self.device}{scale})"


# ----------------------------------------------------------------------------------------------- conventions
def _as_tensor(x, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        x = np.asarray(x)
        if x.dtype.kind not in "biufc":  # text or objects: torch's words would name neither the key nor the fix
            raise ValueError(f"{name} is a {x.dtype} array of shape {x.shape}; expected real numbers")
    t = x if isinstance(x, Tensor) else torch.as_tensor(x)
    if (
        t.is_complex()
        or t.dtype == torch.bool
        or not (torch.is_floating_point(t) or t.dtype.is_signed or t.dtype == torch.uint8)
    ):
        raise ValueError(f"{name} has dtype {t.dtype}; expected real numbers")
    return t


def rbm_from_arrays(
    visible: str,
    hidden: str,
    W,
    vbias,
    hbias,
    *,
    sigma=None,
    hsigma=None,
    alphabet: Optional[str] = None,
    dtype: Optional[torch.dtype] = None,
) -> MixedBoltzmannMachine:
    """An RBM from arrays in the convention of the module docstring (the .npz keys of docs/units.md).

    Args:
        visible, hidden: unit types ('gaussian', 'categorical', 'spin', 'bernoulli').
        W: (n_v, n_h), with a categorical layer's states as an extra axis after its sites: (n_v, q, n_h) for a
            categorical visible layer, (n_v, n_h, q_h) for a categorical hidden one.
        vbias, hbias: (n,) per layer, (n, q) for a categorical one.
        sigma, hsigma: standard deviations of a Gaussian visible / hidden layer's units, (n,), positive.
        alphabet: the q symbols of a categorical visible layer.
        dtype: float64 or float32 (default: float64 if W is float64, else float32).
    Raises ValueError naming the key and the fix.
    """
    W, vbias, hbias = _as_tensor(W, "W"), _as_tensor(vbias, "vbias"), _as_tensor(hbias, "hbias")
    if dtype is None:
        dtype = torch.float64 if W.dtype == torch.float64 else torch.float32
    W, vbias, hbias = W.to(dtype), vbias.to(dtype), hbias.to(dtype)
    sigmas = {"visible": sigma, "hidden": hsigma}
    names = {"visible": ("vbias", "sigma"), "hidden": ("hbias", "hsigma")}
    layers, params, scales = {}, {}, {}
    for side, kind, bias in (("visible", visible, vbias), ("hidden", hidden, hbias)):
        bias_name, sigma_name = names[side]
        kind = unit_type(kind)  # an unknown name is refused here, never read as binary
        if kind == "categorical":
            if bias.dim() != 2:
                raise ValueError(f"{bias_name} of a categorical layer must be shaped (n, q), got {tuple(bias.shape)}")
            n, q = bias.shape
            layers[side] = CategoricalLayer(int(n), int(q), alphabet if side == "visible" else None)
            params[side] = bias.reshape(-1)
        else:
            if bias.dim() != 1:
                raise ValueError(f"{bias_name} of a {kind} layer must be a vector (n,), got shape {tuple(bias.shape)}")
            layers[side] = make_layer(kind, bias.shape[0])
            params[side] = bias
        s = sigmas[side]
        if kind == "gaussian":
            if s is None:
                raise ValueError(f"a Gaussian {side} layer needs {sigma_name} (n,), its units' standard deviations")
            s = _as_tensor(s, sigma_name).to(dtype).reshape(-1)
            if s.numel() != bias.shape[0]:
                raise ValueError(f"{sigma_name} has {s.numel()} entries for {bias.shape[0]} {side} units")
            bad = ~torch.isfinite(s) | ~(s > 0)
            if bool(bad.any()):
                raise ValueError(
                    f"{sigma_name} must be positive and finite (standard deviations); "
                    f"{int(bad.sum())} entries are not: fix or drop those units"
                )
            lam = (1.0 / s.double().square()).to(dtype)  # in float64 first: 1e30 squared is inf in float32
            bad = ~torch.isfinite(lam) | ~(lam > 0)
            if bool(bad.any()):
                i = int(torch.nonzero(bad)[0][0])
                precision = str(dtype).replace("torch.", "")
                raise ValueError(
                    f"{sigma_name} has {int(bad.sum())} entries (e.g. {s[i].item():g} at index {i}) whose precision "
                    f"1 / sigma^2 is {'0' if lam[i] == 0 else 'infinite'} in {precision}: rescale the data and the "
                    "model to standard deviations nearer 1, or save W in float64"
                )
            params[side] = torch.stack([bias * lam, lam])
            scales[side] = s
        elif s is not None:
            raise ValueError(f"{sigma_name} belongs to a Gaussian {side} layer; this one is {kind}: drop it")
    if alphabet is not None and layers["visible"].kind != "categorical":
        raise ValueError("an alphabet belongs to a categorical visible layer: drop it")
    lv, lh = layers["visible"], layers["hidden"]
    expected = (
        (lv.size,)
        + ((lv.q,) if lv.kind == "categorical" else ())
        + (lh.size,)
        + ((lh.q,) if lh.kind == "categorical" else ())
    )
    if tuple(W.shape) != expected:
        how = (
            "(n_v, q, n_h)"
            if lv.kind == "categorical"
            else "(n_v, n_h, q_h)"
            if lh.kind == "categorical"
            else "(n_v, n_h)"
        )
        raise ValueError(f"W has shape {tuple(W.shape)} but vbias and hbias give {expected}; W must be shaped {how}")
    W = W.reshape(lv.width, lh.width)
    if "visible" in scales:
        W = W / scales["visible"].unsqueeze(1)
    if "hidden" in scales:
        W = W / scales["hidden"].unsqueeze(0)
    return MixedBoltzmannMachine([lv, lh], [W.contiguous()], [params["visible"], params["hidden"]])


def rbm_arrays(model: MixedBoltzmannMachine) -> dict[str, np.ndarray]:
    """The arrays of `rbm_from_arrays`' convention for a two-layer machine: W, vbias, hbias, visible, hidden and,
    as they apply, sigma, hsigma, alphabet (what `save_npz` writes)."""
    if model.num_layers != 2:
        raise ValueError("the .npz convention of visible and hidden unit types describes RBMs (two layers)")
    if model.weight_scale != 1.0:
        raise ValueError(
            f"this machine has weight_scale {model.weight_scale:g} (a point on an annealing path); "
            "save the model itself"
        )
    lv, lh = model.layers
    W = model.weights[0].detach().cpu()
    out: dict[str, np.ndarray] = {"visible": np.array(lv.kind), "hidden": np.array(lh.kind)}
    for side, layer, params, bias_name, sigma_name in (
        ("visible", lv, model.biases[0], "vbias", "sigma"),
        ("hidden", lh, model.biases[1], "hbias", "hsigma"),
    ):
        params = params.detach().cpu()
        if layer.kind == "gaussian":
            mean, lam = GaussianLayer.mean_and_precision(params)
            s = lam.rsqrt()
            out[bias_name], out[sigma_name] = mean.numpy(), s.numpy()
            W = W * (s.unsqueeze(1) if side == "visible" else s.unsqueeze(0))
        elif layer.kind == "categorical":
            out[bias_name] = params.reshape(layer.size, layer.q).numpy()
            if layer.alphabet is not None:
                out["alphabet"] = np.array(layer.alphabet)
        else:
            out[bias_name] = params.numpy()
    shape = (
        (lv.size,)
        + ((lv.q,) if lv.kind == "categorical" else ())
        + (lh.size,)
        + ((lh.q,) if lh.kind == "categorical" else ())
    )
    out["W"] = W.reshape(shape).numpy()
    return out


def random_mixed_machine(
    layers: Sequence[Layer],
    *,
    weight_std: float = 1.0,
    bias_std: float = 1.0,
    sigma: float = 1.0,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> MixedBoltzmannMachine:
    """Gaussian random parameters for `layers` (for tests and examples): weights N(0, weight_std^2) (divided by
    sqrt(width) between two Gaussian layers, keeping them normalizable for moderate weight_std), discrete fields
    N(0, bias_std^2), Gaussian means N(0, bias_std^2) with standard deviation `sigma`."""

    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype, device=device)

    weights = []
    for a, b in zip(layers[:-1], layers[1:]):
        w = randn(a.width, b.width) * weight_std
        if a.kind == b.kind == "gaussian":
            w = w / (a.width + b.width) ** 0.5 / sigma**2
        weights.append(w)
    biases = []
    for layer in layers:
        if layer.kind == "gaussian":
            lam = torch.full((layer.size,), 1.0 / sigma**2, dtype=dtype, device=device)
            biases.append(torch.stack([randn(layer.size) * bias_std * lam, lam]))
        else:
            biases.append(randn(layer.width) * bias_std)
    return MixedBoltzmannMachine(layers, weights, biases)
