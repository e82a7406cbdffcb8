"""The annealing step of the geometric path of a chain of binary layers, as a step program (`contracts.StepProgram`).

The same step as `BoltzmannPath.transition_` followed by its `weight_update_` (block Gibbs with the odd layers summed
out, `kernels.block_gibbs`), written with the inverse temperatures as float64 tensors on the device so that a CUDA
graph can capture many steps (`step_programs`). With base biases c, the model's biases b, d = b - c and the
weight scale s, the chain at beta has logits

    z_l(beta) = c_l + beta (d_l + s a_l),   a_l = x_{l-1} W_{l-1} + x_{l+1} W_l^T  (the unscaled input),

and log f_beta(x_even) = sum_even z_l . x_l (with a_l = 0) + sum_odd sum_j softplus(z_lj(beta)). One step from beta to
beta' samples every odd layer from p = sigmoid(z(beta)) (carried from the last weight update), every even layer
that is not clamped given them, recomputes the odd inputs, and adds the log-weight increment

    (beta' - beta) sum_even d_l . x_l + sum_odd sum_j [softplus(z_lj(beta')) - softplus(z_lj(beta))],

each odd unit's difference as -log1p(expm1(-dz) sigmoid(z')) where |dz| = |(beta' - beta)(d + s a)| <= 1 (the
accurate form for the small steps of a long schedule), as the difference of the softplus functions elsewhere; the
sum over units in float64, and sigmoid(z(beta')) kept for the next step. The states stay in the model's dtype; the
products run in it (`products='model'`) or, for float32 models on CUDA, on bfloat16 copies of the states times the
weights split into bfloat16 terms (`products='half-split'`, `kernels.split_products`), or on float32 copies of the
states times the weights' two TF32 terms on the TF32 tensor cores (`products='tf32-split'`: not exact, within a
reported bound), on float16 copies of the states times the weights rounded to float16 (`products='half-path'`), or
on the states as they are times the weights rounded to TF32 on the TF32 tensor cores (`products='tf32-path'`).

The half and TF32 paths (and any `surrogate` weights W~) change the path, not its ends: the chains anneal the model
with weights W~, f~_beta, for every beta < 1, and the path's distribution at beta = 1 is the model's own, f_1, with
the identity as the transition between f~_1 and f_1. A run that reaches beta = 1 (AIS) adds log f_1(x) - log f~_1(x)
of its last state (`finish`); a run that starts there (RAISE, heating's reverse) from the model's own states adds log
f~_1(x) - log f_1(x) of its first (`begin`, at the run's step 0). Each is a link of an annealing path like any other:
AIS stays unbiased for the model's own Z, and RAISE (from the model's own states) for the annealing model of the
rounded path, whose limit is the rounded model's likelihood (`evaluation.rounding` measures the difference). At beta =
0 the two paths agree (the base has no weights). The states this program hands out (`state`) carry the model's own odd
inputs.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.kernels.block_gibbs import BoltzmannState
from raise_eval.kernels.split_products import (
    HALF,
    HALF_PATH,
    SplitWeight,
    out_dtype_products_available,
    path_weights,
    split_error_bound,
    split_terms,
    terms_needed,
    tf32_products,
    tf32_terms,
)


def _probs_(acc: Tensor, base: Tensor, drift: Tensor, scale: float, beta: Tensor) -> Tensor:
    """acc <- sigmoid(c + beta (d + s acc)), in place."""
    if scale != 1.0:
        acc.mul_(scale)
    acc.add_(drift)
    return torch.addcmul(base, acc, beta, out=acc).sigmoid_()


def _odd_logits(inputs: Tensor, base: Tensor, drift: Tensor, scale: float, beta: Tensor, probs: Tensor):
    """(d + s u, z(beta) = c + beta (d + s u)), with sigmoid(z(beta)) written into `probs`: the one formula of an
    odd layer's probabilities, at a run's start and in every weight update (so a continued run has the same bits)."""
    g = torch.add(drift, inputs, alpha=scale)
    z = torch.addcmul(base, g, beta)
    torch.sigmoid(z, out=probs)
    return g, z


def _odd_update(
    inputs: Tensor, base: Tensor, drift: Tensor, scale: float, beta_from: Tensor, beta_to: Tensor, probs: Tensor
) -> Tensor:
    """sum_j softplus(z_j(beta_to)) - softplus(z_j(beta_from)) in float64, shaped (N,), with sigmoid(z(beta_to))
    written into `probs` (module docstring)."""
    g, z_to = _odd_logits(inputs, base, drift, scale, beta_to, probs)
    dz = g.mul_(beta_to - beta_from)
    small = torch.expm1(-dz).mul_(probs).log1p_().neg_()
    large = F.softplus(z_to).sub_(F.softplus(z_to.sub_(dz)))
    return torch.where(dz.abs_() <= 1.0, small, large).sum(-1, dtype=torch.float64)


def _even_term(x: Tensor, drift: Tensor) -> Tensor:
    """d . x in float64, shaped (N,) (x binary: each product exact, summed in float64)."""
    return (x * drift).sum(-1, dtype=torch.float64)


def _sample_even_fused(x: Tensor, acc: Tensor, base: Tensor, drift: Tensor, scale: float, beta: Tensor, uniform):
    """x <- 1{uniform < sigmoid(c + beta (d + s acc))}: an even layer's sample in one pass (when compiled)."""
    z = base + beta.to(acc.dtype) * (drift + scale * acc)
    x.copy_((uniform < torch.sigmoid(z)).to(x.dtype))


def _update_fused(log_weights: Tensor, evens: list, odds: list, scale: float, beta_from: Tensor, beta_to: Tensor):
    """The weight update (module docstring) added to `log_weights` in place, the odd layers' sigmoid(z(beta_to))
    written into their probability buffers: evens holds (x, d) of every even layer, odds (u, c, d, probs) of every
    odd one. One expression, which torch.compile fuses into a few kernels."""
    delta = beta_to - beta_from
    total = None
    for x, drift in evens:
        term = (x * drift).sum(-1, dtype=torch.float64) * delta
        total = term if total is None else total + term
    for inputs, base, drift, probs in odds:
        g = drift + scale * inputs
        z_to = base + beta_to.to(g.dtype) * g
        p = torch.sigmoid(z_to)
        probs.copy_(p)
        dz = delta.to(g.dtype) * g
        small = -torch.log1p(torch.expm1(-dz) * p)
        large = F.softplus(z_to) - F.softplus(base + beta_from.to(g.dtype) * g)
        total = total + torch.where(dz.abs() <= 1.0, small, large).sum(-1, dtype=torch.float64)
    log_weights.add_(total)


FUSED = {"none": None, "fused": (_sample_even_fused, _update_fused)}


def _fused(fuse: str):
    """The fused functions of `fuse`: None ('none': the unfused ops), as they are ('fused', for tests), or compiled
    ('compile': symbolic sizes, so that one compilation serves every batch and layer width)."""
    if fuse == "compile":
        options = {"fullgraph": True, "dynamic": True}
        return tuple(torch.compile(f, **options) for f in FUSED["fused"])
    return FUSED[fuse]


def log_f_gap(layers: list, exact: list, surrogate: list, biases: list, scale: float) -> Tensor:
    """log f_1(x) - log f~_1(x), float64 shaped (rows,): the marginal log-densities of even layers x (odd layers
    summed out) under weights `exact` and `surrogate` (float64 lists, W_l between layers l and l + 1), the same
    biases and weight scale s. Only the odd layers' terms differ: sum_j softplus(b_l + s a_l) with
    a_l = x_{l-1} W_{l-1} + x_{l+1} W_l^T, each computed in float64. layers: per layer (rows, n_l) for the even
    ones, None for the odd; biases: the odd layers' b_l (None for the even)."""
    rows = next(x for x in layers if x is not None).shape[0]
    total = torch.zeros(rows, dtype=torch.float64, device=exact[0].device)
    for l in range(1, len(layers), 2):
        bias = biases[l].double()
        for weights, sign in ((exact, 1.0), (surrogate, -1.0)):
            inputs = None
            for n in (l - 1, l + 1):
                if 0 <= n < len(layers):
                    w = weights[min(n, l)]
                    term = layers[n].double() @ (w if n < l else w.t())
                    inputs = term if inputs is None else inputs.add_(term)
            total.add_(F.softplus(inputs.mul_(scale).add_(bias)).sum(-1), alpha=sign)
    return total


class BinaryGibbsProgram:
    """Block Gibbs annealing on `path` (a `paths.boltzmann.BoltzmannPath`) as a step program.

    Args:
        path: the geometric path (model, base biases, clamped even layers).
        products: 'model', 'half-split', 'tf32-split', 'half-path' or 'tf32-path' (module docstring).
        fuse: 'none' (one op at a time), 'compile' (the elementwise work of a step in a few kernels by torch.compile)
            or 'fused' (the functions compile would compile, run as they are: for tests).
        surrogate: weights W~ shaped like the model's, multiplied in the model's dtype (products='model' only): the
            chains anneal the model with these weights, the ends at beta = 1 being the model's (module docstring).
            products='half-path' takes fp16(W), 'tf32-path' tf32(W).
    """

    def __init__(self, path, products: str = "model", fuse: str = "none", surrogate: Optional[list] = None):
        model = path.model
        self.path = path
        self.device, self.dtype = model.device, model.dtype
        self.num_layers = model.num_layers
        self.scale = float(model.weight_scale)
        self.base = [c.contiguous() for c in path.base_biases]
        self.drift = [(b - c).contiguous() for b, c in zip(model.biases, path.base_biases)]
        self.odd = list(range(1, self.num_layers, 2))
        self.sampled_even = [l for l in range(0, self.num_layers, 2) if l not in path.clamped]
        self.tf32 = products == "tf32-split"
        self.half_path = products == "half-path"
        self.tf32_path = products == "tf32-path"  # the states as they are, times tf32(W) on the TF32 tensor cores
        # the states (repeated), times stacked weight terms, as operands of a dtype of their own
        self.stacked = products == "half-split" or self.tf32 or self.half_path
        if surrogate is not None and products != "model":
            raise ValueError(f"surrogate weights multiply in the model's dtype (products='model'), not {products!r}")
        if self.stacked or self.tf32_path:
            if self.dtype != torch.float32 or self.device.type != "cuda":
                raise ValueError(
                    f"products='{products}' needs a float32 model on a CUDA device; this one is {self.dtype} on "
                    f"{self.device} (use products='model')"
                )
        if self.half_path:
            if not out_dtype_products_available(self.device, HALF_PATH):
                raise ValueError(
                    "products='half-path' needs torch.mm(..., out_dtype=torch.float32) for float16 matrices, which "
                    f"this torch ({torch.__version__}) lacks on {self.device} (use products='model')"
                )
            rounded = [path_weights(products, w) for w in model.weights]
            self.split = [SplitWeight([w]) for w in rounded]
            self.terms = 1
            surrogate = rounded
        elif self.tf32:
            self.split = [SplitWeight(tf32_terms(w)) for w in model.weights]
            self.terms = 2
        elif self.stacked:
            if not out_dtype_products_available(self.device):
                raise ValueError(
                    "products='half-split' needs torch.mm(..., out_dtype=torch.float32) for bfloat16 matrices, which "
                    f"this torch ({torch.__version__}) lacks on {self.device} (use products='model')"
                )
            self.terms = terms_needed(model.weights)
            if not math.isfinite(split_error_bound(model.weights, self.scale, self.terms)):
                raise ValueError(
                    "products='half-split' cannot hold these weights: some are too large for bfloat16 terms "
                    "(|W| >= 3.39e38); use products='model'"
                )
            self.split = [SplitWeight(split_terms(w, self.terms)) for w in model.weights]
        else:
            self.terms = 1
            if self.tf32_path:
                surrogate = [path_weights(products, w) for w in model.weights]  # read exactly by TF32 cores
            if surrogate is not None and [tuple(w.shape) for w in surrogate] != [tuple(w.shape) for w in model.weights]:
                raise ValueError("surrogate weights must be shaped like the model's, one matrix per pair of layers")
            chosen = model.weights if surrogate is None else surrogate
            self.weights = [w.to(self.dtype).contiguous() for w in chosen]
        # float64 copies for the corrections at beta = 1 (None: the chains anneal the model's own path)
        self.surrogate = None if surrogate is None else [w.double() for w in surrogate]
        self.exact = None if surrogate is None else [w.double() for w in model.weights]
        self.fuse = fuse
        self.log_weights: Optional[Tensor] = None  # set by `begin`
        self.note: Optional[str] = None  # why 'auto' fusion was not taken, where it failed

    # ------------------------------------------------------------------ state
    def begin(
        self, state: BoltzmannState, log_weights: Optional[Tensor], beta: float, steps: int = 0, start_step: int = 0
    ) -> None:
        """Load `state` (not modified) and the log-weights to accumulate into (float64 shaped like the state's batch;
        zeros when None; a given tensor is added to in place, as `anneal` does), at inverse temperature `beta`, for a
        run of `steps` steps in all (which decides 'auto' fusion: the whole run's length, so that a continued run
        fuses as the uninterrupted one did), `start_step` of them done already (a continued run). With surrogate
        weights, a run's step 0 at beta = 1 takes the link from the model's f_1 to f~_1 (module docstring)."""
        first = next(x for x in state.layers if x is not None)
        self.batch_shape = first.shape[:-1]
        rows = first.reshape(-1, first.shape[-1]).shape[0]
        sizes = [None] * self.num_layers

        def flat(x: Tensor) -> Tensor:
            return x.reshape(-1, x.shape[-1]).clone(memory_format=torch.contiguous_format)

        self.layers = [None if x is None else flat(x) for x in state.layers]
        self.inputs = [None if u is None else flat(u) for u in state.odd_inputs]
        for l in range(self.num_layers):
            sizes[l] = (self.layers[l] if l % 2 == 0 else self.inputs[l]).shape[-1]
        self.sizes = sizes
        self.probs = [None if u is None else torch.empty_like(u) for u in self.inputs]
        def scratch(l: int, wanted: bool):
            return torch.empty(rows, sizes[l], dtype=self.dtype, device=self.device) if wanted else None

        # uniforms for the sampled even layers (and the odd ones' draws with half-split operands), products' sums
        # for the sampled even layers
        self.uniform = [scratch(l, l in self.sampled_even or (l % 2 == 1 and self.stacked)) for l in range(len(sizes))]
        self.acc = [scratch(l, l in self.sampled_even) for l in range(len(sizes))]
        if self.stacked:
            operand_dtype = self.dtype if self.tf32 else HALF_PATH if self.half_path else HALF
            self.operand = [torch.empty(rows, self.terms * n, dtype=operand_dtype, device=self.device) for n in sizes]
            for l in range(0, self.num_layers, 2):
                self._refresh_operand(l, self.layers[l])
        else:  # the even layers multiply as they are; the odd samples get buffers of their own
            self.operand = [x if l % 2 == 0 else torch.empty_like(self.inputs[l]) for l, x in enumerate(self.layers)]
        if log_weights is None:
            log_weights = torch.zeros(self.batch_shape, dtype=torch.float64, device=self.device)
        # accumulated in place; a non-contiguous tensor through a contiguous copy (`finish` writes it back)
        self._given = log_weights
        self.log_weights = log_weights if log_weights.is_contiguous() else log_weights.contiguous()
        self._flat_log_weights = self.log_weights.view(-1)
        if self.surrogate is not None:  # the given inputs are the model's: the chains' are x W~
            for l in self.odd:
                self._neighbour_input(l, self.inputs[l])
            if start_step == 0 and beta == 1.0:
                self._flat_log_weights.sub_(self._exact_minus_surrogate())
        beta_t = torch.tensor(beta, dtype=torch.float64, device=self.device)
        for l in self.odd:
            _odd_logits(self.inputs[l], self.base[l], self.drift[l], self.scale, beta_t, self.probs[l])
        self._choose_fusion(rows * steps, beta_t)

    def finish(self, beta: float) -> Tensor:
        """The log-weights the run was given (or made), holding the run's sums, the run having ended at `beta` (with
        surrogate weights, a run that ended at beta = 1 takes the link from f~_1 to the model's f_1)."""
        if self.surrogate is not None and beta == 1.0:
            self._flat_log_weights.add_(self._exact_minus_surrogate())
        if self._given is not self.log_weights:
            self._given.copy_(self.log_weights)
        return self._given

    def _exact_minus_surrogate(self) -> Tensor:
        """log f_1(x) - log f~_1(x) of the chains' even layers, float64 shaped (rows,) (`log_f_gap`)."""
        biases = [None if l % 2 == 0 else b for l, b in enumerate(self.path.model.biases)]  # as the report's
        return log_f_gap(self.layers, self.exact, self.surrogate, biases, self.scale)

    def _choose_fusion(self, chain_steps: int, beta: Tensor) -> None:
        """Set the fused functions: with 'auto', compiled where the run is long enough (`LoopOptions.fuse_for`) and
        they compile here, on scratch copies of this run's tensors (a failure is noted, and the ops run unfused)."""
        from raise_eval.step_programs import LoopOptions

        fuse = LoopOptions(fuse=self.fuse).fuse_for(self.device, chain_steps) if self.fuse == "auto" else self.fuse
        self._fused = _fused(fuse)
        # compiled functions get betas of their own (aligned, never views): a view of the schedule or of a graph's
        # window would be another input to the compiler's guards, and a recompilation cannot happen inside a capture
        self._own_betas = fuse == "compile"
        if fuse != "compile":
            return
        try:  # compile now, outside any capture
            for l in self.sampled_even:
                sample_even = self._fused[0]
                sample_even(self.layers[l].clone(), self.acc[l], self.base[l], self.drift[l], self.scale,
                            beta.clone(), self.uniform[l])  # fmt: skip
            evens = [(self.layers[l], self.drift[l]) for l in range(0, self.num_layers, 2)]
            odds = [(self.inputs[l], self.base[l], self.drift[l], self.probs[l].clone()) for l in self.odd]
            self._fused[1](self._flat_log_weights.clone(), evens, odds, self.scale, beta.clone(), beta.clone())
        except Exception as e:  # noqa: BLE001 (any compiler failure: the unfused ops compute the same)
            if self.fuse != "auto":
                raise
            self.note = f"the fused elementwise work did not compile ({type(e).__name__}: {e}); it ran unfused"
            warnings.warn(self.note, RuntimeWarning, stacklevel=2)
            self._fused, self._own_betas = None, False

    def _refresh_operand(self, l: int, x: Tensor) -> None:
        rows, n = x.shape
        self.operand[l].view(rows, self.terms, n).copy_(x.unsqueeze(1).expand(rows, self.terms, n))

    def state(self, beta: float) -> BoltzmannState:
        """The chains' state (views of the program's tensors, batch-shaped), with the odd layers' probabilities at
        `beta` (the inverse temperature of the last step's end)."""
        shape = self.batch_shape

        def view(x):
            return None if x is None else x.view(*shape, x.shape[-1])

        if self.surrogate is not None:  # the model's own odd inputs (and no probabilities: they were W~'s)
            return self.path.state_from_layers([view(x) for x in self.layers])
        layers, inputs, probs = (tuple(map(view, xs)) for xs in (self.layers, self.inputs, self.probs))
        state = BoltzmannState(layers, inputs, probs)
        return state._replace(probs_key=self.path.probs_key(beta, state))

    # ------------------------------------------------------------------ products
    def _product(self, l: int, into: int, out: Tensor, accumulate: bool) -> Tensor:
        """out (+)= x_l W (into = l + 1) or x_l W^T (into = l - 1), for the sampled layer l."""
        w = min(l, into)
        forward = into > l
        if self.stacked:
            matrix = self.split[w].forward if forward else self.split[w].backward
        else:
            matrix = self.weights[w] if forward else self.weights[w].t()
        # half-precision terms: a float32 result (out_dtype); TF32 terms or weights: float32 on the TF32 cores
        options = {"out_dtype": torch.float32} if self.stacked and not self.tf32 else {}
        with tf32_products() if self.tf32 or self.tf32_path else contextlib.nullcontext():
            if accumulate:
                return torch.addmm(out, self.operand[l], matrix, out=out, **options)
            return torch.mm(self.operand[l], matrix, out=out, **options)

    def _neighbour_input(self, l: int, out: Tensor) -> Tensor:
        first = True
        for n in (l - 1, l + 1):
            if 0 <= n < self.num_layers:
                self._product(n, l, out, accumulate=not first)
                first = False
        return out

    def _sample(self, l: int, probs: Tensor, generator: torch.Generator) -> None:
        """Layer l's sample from `probs` into its state (even) and its product operand."""
        if l % 2 == 0:
            target = self.layers[l]
        else:
            target = self.uniform[l] if self.stacked else self.operand[l]
        torch.rand(target.shape, generator=generator, dtype=target.dtype, device=self.device, out=target)
        target.lt_(probs)
        if self.stacked:
            self._refresh_operand(l, target)

    # ------------------------------------------------------------------ the step
    def step(self, beta_from: Tensor, beta_to: Tensor, generator: torch.Generator) -> None:
        """One transition at beta_from and the weight update to beta_to (0-d float64 tensors on the device)."""
        if self._own_betas:
            beta_from, beta_to = beta_from.clone(), beta_to.clone()
        for l in self.odd:
            self._sample(l, self.probs[l], generator)
        for l in self.sampled_even:
            acc = self._neighbour_input(l, self.acc[l])
            if self._fused is None:
                self._sample(l, _probs_(acc, self.base[l], self.drift[l], self.scale, beta_from), generator)
            else:
                uniform = self.uniform[l]
                torch.rand(uniform.shape, generator=generator, dtype=uniform.dtype, device=self.device, out=uniform)
                self._fused[0](self.layers[l], acc, self.base[l], self.drift[l], self.scale, beta_from, uniform)
                if self.stacked:
                    self._refresh_operand(l, self.layers[l])
        for l in self.odd:
            self._neighbour_input(l, self.inputs[l])
        lw = self._flat_log_weights
        if self._fused is not None:
            evens = [(self.layers[l], self.drift[l]) for l in range(0, self.num_layers, 2)]
            odds = [(self.inputs[l], self.base[l], self.drift[l], self.probs[l]) for l in self.odd]
            self._fused[1](lw, evens, odds, self.scale, beta_from, beta_to)
            return
        delta = beta_to - beta_from
        for l in range(0, self.num_layers, 2):
            lw.addcmul_(_even_term(self.layers[l], self.drift[l]), delta)
        for l in self.odd:
            base, drift = self.base[l], self.drift[l]
            lw.add_(_odd_update(self.inputs[l], base, drift, self.scale, beta_from, beta_to, self.probs[l]))
