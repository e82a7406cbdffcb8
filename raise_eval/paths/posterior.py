"""Annealing paths from a factorial proposal q(h | v) to the posterior of a DBM or DBN with v clamped.

Run by the generic `raise_eval.annealing.anneal`, they estimate f(v) = sum_h f(v, h) per test vector without bias:

    f_beta(h) = q(h | v)^(1 - beta) f(v, h)^beta,   Z_0(v) = sum_h f_0(h),   Z_1(v) = f(v),

so f-hat(v) = Z_0(v) mean_c exp(log w_c) over the chains c of a vector, where log w_c is the annealing log-weight
(AIS, Neal 2001). With one step (betas [0, 1]) this is importance sampling with q; more steps let the chains move
from q's mode to the posterior modes q misses, which importance sampling can only reach by luck.

States carry batch dimensions (N, C): N test vectors, C chains per vector. Per-vector constants (q's logits, the
visible layer's products) travel in the state, so one path serves any set of test vectors. Layers are in the
model's dtype; log-weights and log Z_0 in float64.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval import native
from raise_eval.models.boltzmann.dbm import DBM, mean_field_logits
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.products import neighbour_product
from raise_eval.models.numerics import expm1_
from raise_eval.models.sampling import sample_bernoulli_logits, sample_bernoulli_logits_

# Below this |logit step| the increment softplus(z + d) - softplus(z) is taken as log1p(sigmoid(z) expm1(d))
# (accurate for small d); above it the plain difference has no cancellation to fear and expm1 could overflow.
_LOG1P_FORM_MAX_STEP = 30.0


def softplus_increment(z_from: Tensor, z_to: Tensor) -> Tensor:
    """softplus(z_to) - softplus(z_from) elementwise, accurate when the two are close (any shape, any float dtype).

    With lo = min(z_from, z_to) and a = |z_to - z_from|, softplus(lo + a) - softplus(lo) = log1p(sigmoid(lo)
    expm1(a)): no difference of two nearly equal numbers, and the log1p argument is non-negative.
    """
    step = z_to - z_from
    a = step.abs()
    lo = torch.minimum(z_from, z_to)
    small = torch.log1p(torch.sigmoid(lo) * torch.expm1(a.clamp(max=_LOG1P_FORM_MAX_STEP)))
    small = torch.where(step >= 0, small, -small)
    # logaddexp(x, 0): softplus without F.softplus's switch to x above 20 (an error up to e^-20 there)
    zero = z_to.new_zeros(())
    return torch.where(a <= _LOG1P_FORM_MAX_STEP, small, torch.logaddexp(z_to, zero) - torch.logaddexp(z_from, zero))


def _softplus_(x: Tensor, out: Tensor) -> Tensor:
    """softplus(x) written into `out` (the ATen out= variant, the same function as F.softplus)."""
    return torch.ops.aten.softplus.out(x, 1.0, 20.0, out=out)


# ===================================================================================================== DBM
class DBMPosteriorState(NamedTuple):
    """State of `DBMPosteriorPath`, batch dimensions (N, C); the odd hidden layers are summed out.

    layers: per layer l, the even hidden layers (l = 2, 4, ...) shaped (N, C, n_l) in the model's dtype; None for
        the visible layer and the odd layers.
    odd_inputs: per odd layer l, its unscaled input x_{l-1} W_{l-1} + x_{l+1} W_l^T (v W_0 included for l = 1),
        (N, C, n_l), needed by the weight update and by the next transition; None for even layers.
    base_logits: per hidden layer l, q's logits lambda_l shaped (N, 1, n_l) (None for l = 0).
    visible_input: v W_0, shaped (N, 1, n_1).
    visible_bias_term: v . b_0 in float64, shaped (N, 1).
    base_logits64, slopes64: per hidden layer, lambda_l and b_l - lambda_l in float64, shaped (N, 1, n_l): the
        weight update's per-vector constants, converted once rather than at every step.
    """

    layers: tuple
    odd_inputs: tuple
    base_logits: tuple
    visible_input: Tensor
    visible_bias_term: Tensor
    base_logits64: tuple = ()
    slopes64: tuple = ()


class DBMPosteriorPath:
    """Geometric path from the mean-field posterior q(h | v) to the DBM's posterior p(h | v), per test vector.

    q(h | v) = prod over every hidden layer l of Bernoulli(sigmoid(lambda_l)), lambda_l the logits of the
    mean-field marginals clamped to [-20, 20]. f_beta(h) = q(h)^(1 - beta) f(v, h)^beta is again a chain over the
    hidden layers: layer l's logits given its neighbours are (1 - beta) lambda_l + beta (b_l + input from the
    neighbours), v W_0 feeding x_1. The state holds the even hidden layers; the odd ones factorize given them and
    are summed out:

        log f_beta(h_even) = sum_{even l >= 2} h_l . ((1 - beta) lambda_l + beta b_l) + beta v . b_0
                             + sum_{odd l} sum_j softplus((1 - beta) lambda_l + beta (b_l + u_l))_j

    with u_l the odd layer's unscaled input. log Z_0(v) = sum over all hidden layers of sum_j softplus(lambda_lj).
    The kernel is block Gibbs (odd layers given the even ones and v, then the even hidden layers given the odd
    ones): reversible with respect to f_beta(h_even).
    """

    def __init__(self, model: DBM):
        if model.family != "DBM":
            raise ValueError("DBMPosteriorPath needs a DBM with at least two hidden layers")
        if model.weight_scale != 1.0:  # the products below leave the scale out
            raise ValueError(f"DBMPosteriorPath needs a model with weight_scale 1, got {model.weight_scale}")
        self.model = model
        self._odd = list(range(1, model.num_layers, 2))
        self._even = list(range(2, model.num_layers, 2))

    def state_elements(self) -> int:
        """Entries of one chain's state (even layers and odd inputs), for sizing chunks of test vectors."""
        return sum(self.model.layer_sizes[1:])

    def start(self, v: Tensor, num_chains: int, generator: torch.Generator) -> tuple[DBMPosteriorState, Tensor]:
        """(`num_chains` exact samples of q over the even hidden layers for each row of v, log Z_0(v)).

        Args:
            v: binary test vectors shaped (N, n_visible).
        Returns:
            the state with batch dimensions (N, num_chains), and log Z_0(v) in float64 shaped (N,).
        """
        m = self.model
        v = v.to(dtype=m.dtype, device=m.device)
        n = v.shape[0]
        # Logits in the model's dtype: that rounding defines q, and log Z_0 is computed from the same numbers.
        logits = [None] + [x.to(m.dtype).unsqueeze(1) for x in mean_field_logits(m.mean_field(v)[1:])]
        log_z0 = sum(F.softplus(logits[l].squeeze(1).double()).sum(-1) for l in range(1, m.num_layers))  # (N,)
        layers = [None] * m.num_layers
        for l in self._even:
            layers[l] = sample_bernoulli_logits(logits[l].expand(n, num_chains, -1), generator)  # a new tensor
        visible_input = torch.matmul(v, m.weights[0]).unsqueeze(1)
        visible_bias_term = torch.mv(v.double(), m.biases[0].double()).unsqueeze(1)
        logits64 = [None] + [x.double() for x in logits[1:]]
        slopes64 = [None] + [m.biases[l].double() - logits64[l] for l in range(1, m.num_layers)]
        state = DBMPosteriorState(
            tuple(layers), (), tuple(logits), visible_input, visible_bias_term, tuple(logits64), tuple(slopes64)
        )
        return state._replace(odd_inputs=self._odd_inputs(state.layers, visible_input)), log_z0

    def _odd_inputs(self, layers, visible_input: Tensor) -> tuple:
        m = self.model
        inputs = [None] * m.num_layers
        for l in self._odd:
            if l == 1:  # v W_0 is fixed: only the product with x_2 is new
                inputs[1] = torch.matmul(layers[2], m.weights[1].t()).add_(visible_input)
            else:
                inputs[l] = m.unscaled_input(layers, l)
        return tuple(inputs)

    def log_density_ratio(self, state: DBMPosteriorState, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(h_even) - log f_{beta_from}(h_even) in float64, shaped (N, C).

        Term by term: the even layers and v are linear in beta; each odd unit contributes softplus(z_to) -
        softplus(z_from) by `softplus_increment`, z = lambda + beta (b + u - lambda) in float64.
        """
        d = beta_to - beta_from
        total = d * state.visible_bias_term
        for l in self._even:
            total = total + d * (state.layers[l].double() * state.slopes64[l]).sum(-1)
        for l in self._odd:
            lam = state.base_logits64[l]
            # d z / d beta = u + b - lambda, (N, C, n_l); out of place: in float64 .double() is odd_inputs itself
            slope = state.odd_inputs[l].double() + state.slopes64[l]
            z_from = torch.add(lam, slope, alpha=beta_from)
            z_to = torch.add(lam, slope, alpha=beta_to)
            total = total + softplus_increment(z_from, z_to).sum(-1)
        return total

    def transition(self, state: DBMPosteriorState, beta: float, generator: torch.Generator) -> DBMPosteriorState:
        """Block Gibbs step at `beta`: odd layers given the even ones and v, then even hidden layers given the odd
        ones. Returns a new state (`state` is not modified)."""
        m = self.model
        full = list(state.layers)
        for l in self._odd:
            # (1 - beta) lambda + beta (b + u), lerp'd in one pass into a fresh buffer that becomes the sample
            full[l] = sample_bernoulli_logits_(
                torch.lerp(state.base_logits[l], state.odd_inputs[l] + m.biases[l], beta), generator
            )
        for l in self._even:
            full[l] = sample_bernoulli_logits_(
                torch.lerp(state.base_logits[l], m.unscaled_input(full, l).add_(m.biases[l]), beta), generator
            )
        layers = tuple(full[l] if l in self._even else None for l in range(m.num_layers))
        return state._replace(layers=layers, odd_inputs=self._odd_inputs(layers, state.visible_input))


# ===================================================================================================== DBN
def _log_range(dtype: torch.dtype) -> float:
    """|log y| below which y and 1 / y are normal numbers of `dtype`, with a margin (about 80 for float32)."""
    info = torch.finfo(dtype)
    return 0.9 * min(math.log(info.max), -math.log(info.tiny))


def _fold_plan(weights: Tensor, limit: float) -> int:
    """How many times a sweep may fold its per-input factors in half before taking logs (see `DBNPosteriorPath`).

    weights: W_{l-1} shaped (n_below, n_l). The factor of input i for unit j lies in [e^-|w_ij|, e^|w_ij|], so a
    product over a group of inputs lies within e^(+-sum of |w_ij| over the group): the folds stop before that sum
    passes `limit` for any unit.
    """
    sums = weights.abs().double().t().contiguous()  # (n_l, n_below)
    if float(sums.max()) > limit:
        raise ValueError(
            f"a weight of magnitude {float(sums.max()):.3g} is beyond what the DBN posterior sweep computes in "
            f"{weights.dtype} (|w| <= {limit:.0f}); convert the model to float64"
        )
    width, folds = sums.shape[1], 0
    while width > 1:
        half = width // 2
        folded = sums[:, :half] + sums[:, width - half : width]
        if float(folded.max()) > limit:
            break
        sums = torch.cat([folded, sums[:, half : width - half]], dim=1)
        width -= half
        folds += 1
    return folds


def _fold_views(factors: Tensor, folds: int) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
    """The pairs (left half, right half) of views of a (rows, n) buffer that `folds` pairwise foldings multiply
    (element i with i + width - half, the middle one of an odd width left alone), and the view of what is left."""
    pairs, width = [], factors.shape[-1]
    for _ in range(folds):
        half = width // 2
        pairs.append((factors[:, :half], factors[:, width - half : width]))
        width -= half
    return pairs, factors[:, :width]


def _fold_log_sum(pairs: list[tuple[Tensor, Tensor]], rest: Tensor) -> Tensor:
    """sum of the logs of a (rows, n) buffer's entries over its last dimension, shaped (rows,): the entries are
    multiplied pairwise in place along `pairs` (`_fold_views`), then the logs of the `rest` are summed."""
    for left, right in pairs:
        left.mul_(right)
    return torch.log(rest).sum(-1)


def _copy_rows_(dest: Tensor, index: Tensor, source: Tensor) -> None:
    """dest[index] = source along dimension 0 (index_copy_), bit for bit.

    ATen's index_copy_ on the CPU moves one element at a time, so rows of many small elements copy at a fraction of
    memory speed: where both tensors are contiguous with the same dtype and a row's bytes allow, both are viewed as
    complex128 (16-byte elements, a plain copy of the same bytes), which is three times faster for the sweep's rows
    of 3 x 784 float32 (650 -> 190 us for 360 rows). Anything else goes to index_copy_ as it is.
    """
    fast = (
        dest.device.type == "cpu"
        and dest.dim() >= 2
        and index.numel() > 0
        and dest.dtype == source.dtype
        and dest.is_contiguous()
        and source.is_contiguous()
        and dest[0].numel() * dest.element_size() % 16 == 0
        and all(t.storage_offset() * t.element_size() % 16 == 0 for t in (dest, source))
    )
    if fast:
        dest.flatten(1).view(torch.complex128).index_copy_(0, index, source.flatten(1).view(torch.complex128))
    else:
        dest.index_copy_(0, index, source)


_SWEEPS = ("auto", "native", "bounded", "full")
_NATIVE_LANES = 16  # LANES of dbn_sweep.c: the inputs a group's products advance by
_NATIVE_CARRIED_LIMIT = 0.9 * math.log(torch.finfo(torch.float64).max)  # |log| of the double carried between logs
_NATIVE_TILE_BYTES = 32 * 1024  # a tile of rows' moments, visited by every unit in turn: within the L1 cache


def _native_plan(weights: Tensor, limit: float) -> Optional[tuple[Tensor, Tensor]]:
    """The native sweep's groups of inputs for a layer (see dbn_sweep.c): (ends, take_log), int64 and uint8, or None.

    weights: W_{l-1} shaped (n_below, n_l). A factor of input i for unit j lies within e^(+-|w_ij|), so a product
    over a group stays within e^(+-b), b the largest sum of |w_ij| over the group's inputs for any unit: groups
    grow by LANES inputs while b stays below `limit` (the dtype's range), and a group's product is carried in a
    double, its log taken before the carried bound would pass 0.9 log(DBL_MAX). None if LANES inputs alone can
    leave the range (the other sweeps then serve)."""
    magnitudes = weights.abs().double()  # (n_below, n_l)
    n_below = magnitudes.shape[0]
    chunks = [magnitudes[i : i + _NATIVE_LANES].sum(0) for i in range(0, n_below, _NATIVE_LANES)]  # each (n_l,)
    ends, bounds = [], []
    current, end = None, 0
    for chunk in chunks:
        grown = chunk if current is None else current + chunk
        if float(grown.max()) > limit:
            if current is None:
                return None
            ends.append(end)
            bounds.append(float(current.max()))
            grown = chunk
            if float(grown.max()) > limit:
                return None
        current, end = grown, min(end + _NATIVE_LANES, n_below)
    ends.append(end)
    bounds.append(float(current.max()))
    take_log, carried = [], 0.0
    for k, b in enumerate(bounds):
        carried += b
        last = k == len(bounds) - 1
        take = last or carried + bounds[k + 1] > _NATIVE_CARRIED_LIMIT
        take_log.append(1 if take else 0)
        if take:
            carried = 0.0
    return torch.tensor(ends, dtype=torch.int64), torch.tensor(take_log, dtype=torch.uint8)


# Largest |weight| for which the bounded sweep's bound on the Taylor rest, |w|^3 e^|w| / 6, stays useful and finite.
_BOUNDED_MAX_WEIGHT = 20.0
_BOUND_BLOCK = 16  # units whose bounds the bounded sweep computes at once (and moves after each flip in the block)
_SERIES_MAX_STEP = 0.1  # |step| up to which the increment is log1p(sigmoid(z) (e^step - 1)) (argument above -0.1)


def _softplus_increment_sum(z_from: Tensor, step: Tensor, scratch: Tensor) -> Tensor:
    """sum over the last dimension of softplus(z_from + step) - softplus(z_from), in float64, shaped like the
    batch; z_from and step (same shape) are overwritten, `scratch` (same shape) is used.

    Each term is accurate relative to itself (no cancellation), computed in the inputs' dtype: log1p(sigmoid(
    z_from) (e^step - 1)) when every |step| is at most _SERIES_MAX_STEP (the log1p argument is then above -0.1;
    e^step - 1 from `expm1_`, a short series on the CPU), else the form of `softplus_increment`, sign(step)
    log1p(sigmoid(min(z_from, z_from + step)) (e^|step| - 1)); steps beyond _LOG1P_FORM_MAX_STEP go to
    `softplus_increment` in float64.
    """
    if step.numel() == 0:
        return step.new_zeros(step.shape[:-1], dtype=torch.float64)
    low, high = torch.aminmax(step)
    largest = max(-float(low), float(high))
    if largest > _LOG1P_FORM_MAX_STEP:
        return softplus_increment(z_from.double(), z_from.double() + step.double()).sum(-1)
    if largest <= _SERIES_MAX_STEP:
        terms = expm1_(step, scratch=scratch, largest=largest).mul_(z_from.sigmoid_()).log1p_()
    else:
        torch.minimum(z_from, torch.add(z_from, step, out=scratch), out=z_from).sigmoid_()
        terms = torch.abs(step, out=scratch).expm1_().mul_(z_from).log1p_().copysign_(step)
    # terms accurate relative to themselves: a sum in the inputs' dtype keeps that
    return terms.sum(-1).double()


def _sum_softplus(logits: Tensor, sigmoid_of_minus: Tensor, scratch: Tensor) -> Tensor:
    """sum of softplus(logits) over the last dimension in float64, from sigmoid(-logits) (already computed; scratch:
    a buffer of its shape): -log sigmoid(-a) is a logarithm where softplus is an exponential and a logarithm.
    Where sigmoid(-a) underflowed to 0 (a beyond about 100 in float32) the sum is recomputed with softplus."""
    # summed in the model's dtype: the weight takes this times a step of beta
    total = -torch.log(sigmoid_of_minus, out=scratch).sum(-1).double()
    if not bool(torch.isfinite(total).all()):
        total = F.softplus(logits.double()).sum(-1)
    return total


class DBNPosteriorState(NamedTuple):
    """State of `DBNPosteriorPath`, batch dimensions (N, C); the top layer x_L is summed out.

    layers: (None, x_1, ..., x_{L-1}), each (N, C, n_l) in the model's dtype (None for the clamped visible layer).
    below: (None, a_0, ..., a_{L-2}): entry l is a_{l-1} = x_l W_{l-1}^T + b_{l-1}, the logits of layer l - 1
        given layer l, shaped (N, C, n_{l-1}), exact for the layers (recomputed after every sweep).
    below_on, below_off: sigmoid(a) and sigmoid(-a) of each entry of `below` (both kept: each is accurate where
        the other is close to 1).
    top_input: t = x_{L-1} W_{L-1} + b_L, shaped (N, C, n_L).
    base_logits: (None, rho_1, ..., rho_L), the base's logits shaped (N, 1, n_l) (see `DBNPosteriorPath`).
    visible: v shaped (N, 1, n_0); visible_input: v W_0 shaped (N, 1, n_1); visible_bias_term: v . b_0 in
        float64 shaped (N, 1).

    A state is a function of (v, layers) (`DBNPosteriorPath.state_from_layers` rebuilds it bit for bit), which is
    what a saved annealing run keeps: `odd_inputs` (empty) and `probs_key` (None) are the fields of the resume
    record's format that a DBN's posterior state leaves empty.
    """

    layers: tuple
    below: tuple
    below_on: tuple
    below_off: tuple
    top_input: Tensor
    base_logits: tuple
    visible: Tensor
    visible_input: Tensor
    visible_bias_term: Tensor

    @property
    def hidden(self) -> Tensor:
        """x_1, shaped (N, C, n_1)."""
        return self.layers[1]

    @property
    def odd_inputs(self) -> tuple:
        return ()

    @property
    def odd_probs(self) -> None:
        return None

    @property
    def probs_key(self) -> None:
        return None


class DBNPosteriorPath:
    """Geometric path from a factorial proposal to the posterior p(x_1, ..., x_{L-1} | v) of a DBN, per test vector.

    The DBN's layers are v = x_0, x_1, ..., x_L: sigmoid layers p(x_l | x_{l+1}) for l < L - 1 and a top RBM over
    (x_{L-1}, x_L). With v clamped, the path runs over the hidden layers h = (x_1, ..., x_L) from the factorial
    base q(h) = prod_l prod_j Bernoulli(sigmoid(rho_lj)) to the DBN's joint f(v, h):

        f_beta(h) = q(h)^(1 - beta) f(v, h)^beta,   log f(v, h) = sum_{l=0}^{L-2} [x_l . a_l - sum softplus(a_l)]
                                                                  + x_{L-1} . b_{L-1} + x_L . t,

    with a_l = W_l x_{l+1} + b_l (the logits of layer l given layer l + 1) and t = x_{L-1} W_{L-1} + b_L. The base
    logits are the recognition pass in mean field: rho_1 = v W_0 + r_1 (q(x_1 | v) itself), rho_l = sigmoid(rho_
    {l-1}) W_{l-1} + r_l and rho_L = sigmoid(rho_{L-1}) W_{L-1} + b_L. The top layer x_L factorizes given
    x_{L-1} at every beta and is summed out of the densities (the weights are Rao-Blackwellized over it):

        log f_beta(x_1..x_{L-1}) = (1 - beta) sum_{l<L} x_l . rho_l + beta [sum_{l=0}^{L-2} (x_l . a_l - sum
                                   softplus(a_l)) + x_{L-1} . b_{L-1}] + sum_k softplus(rho_Lk + beta (t_k - rho_Lk)),

    so log Z_0(v) = sum_{l=1}^{L} sum_j softplus(rho_lj) and log Z_1(v) = log f(v). With one step this is
    importance sampling with the base (for two hidden layers, the recognition distribution q(x_1 | v)).

    Kernel at beta (leaves f_beta(x_1..x_L) invariant, hence its marginal f_beta(x_1..x_{L-1})): layer by layer from
    x_1 up, a systematic-scan Gibbs sweep over the units of x_l given its neighbours, with x_L drawn from its
    factorial conditional, as a block, just before the sweep of x_{L-1}. A unit of x_l has the logit
        (1 - beta) rho_lj + beta [(x_{l-1} W_{l-1})_j + above_j - (sum softplus(a_{l-1} | x_lj = 1)
                                                                     - sum softplus(a_{l-1} | x_lj = 0))],
    above = a_l for l < L - 1 and b_{L-1} + W_{L-1} x_L for l = L - 1: carrying x_L in the sweep is what keeps a
    flip's cost to the n_{l-1} softplus terms below it. Those differences are computed without a softplus: with
    p = sigmoid(a), p' = sigmoid(-a) and s = +1 (turn on) or -1 (turn off),
        sum_i softplus(a_i + s w_ij) - softplus(a_i) = sum_i log(p'_i + p_i e^(s w_ij)),
    each factor a sum of two non-negative terms (no cancellation) in [e^-|w_ij|, e^|w_ij|]: the factors are
    multiplied pairwise while the product stays within the dtype's range (`_fold_plan`, fixed per model), so a
    unit takes a few multiplications per input and a handful of logarithms. A flip updates a, p and p' of the
    chains that flipped; after each layer's sweep they are recomputed exactly from the layer. The scan order is
    fixed, so the kernel is not reversible, which forward AIS does not need: do not run it on a reversed schedule.

    Three implementations draw this kernel (`sweep`): the native one (`raise_eval.native`, C compiled on first use:
    chain by chain in tiles that stay in the L1 cache, every logit computed, about a third of the bounded sweep's
    time on the 784-500-2000 DBN), the bounded one (PyTorch, unit by unit over all chains: most draws decided by
    bounds on the logit, the rest computed) and the full one (PyTorch, every logit: what a GPU runs). The native and
    bounded sweeps draw their uniforms alike and each draw equals the one from the exact logit (up to roundings
    within 1e-4 of the threshold), so they give the same samples but in rare ties.
    """

    # State entries per chunk of per-vector AIS (`raise_eval.estimators.unnormalized.ais_chunk_vectors`): four times
    # the default, because the sweep's per-unit work (a dozen small ops per unit, gathers of the chains that flip)
    # costs the same for few rows as for many: 731 us per chain-step at 760 rows against 504 at 4,000 (784-500-2000,
    # one thread; with the second-order bounds, 653 us at 1,300 rows against 528 to 585 at 3,070 to 4,000).
    chunk_elements = 2**25

    def __init__(self, model: DBN, bounded: Optional[bool] = None, sweep: str = "auto"):
        """sweep: "native" (the C kernel of `raise_eval.native`, CPU only), "bounded" (PyTorch, the draws decided by
        bounds where they can be, CPU only), "full" (PyTorch, every logit computed: what a GPU runs) or "auto" (the
        first of these that the device, the model's weights and the machine allow). `bounded` (True or False) is
        the older spelling of "bounded" and "full"."""
        if model.family != "DBN":
            raise ValueError("DBNPosteriorPath needs a DBN")
        if bounded is not None:
            if sweep != "auto":
                raise ValueError("give either bounded or sweep, not both")
            sweep = "bounded" if bounded else "full"
        if sweep not in _SWEEPS:
            raise ValueError(f"sweep must be one of {', '.join(_SWEEPS)}, got {sweep!r}")
        self.model = model
        L = len(model.weights)
        self._L = L
        limit = _log_range(model.dtype)
        self._folds = [None] + [_fold_plan(model.weights[l - 1], limit) for l in range(1, L)]
        # Per directed hidden layer l: row j of W_{l-1}^T moves a_{l-1} when unit j flips; its factors e^(+-w).
        self._rows = [None] + [model.weights[l - 1].t().contiguous() for l in range(1, L)]
        self._exp_rows = [None] + [torch.stack([w.exp(), (-w).exp()], dim=1) for w in self._rows[1:]]  # (n_l, 2, n)
        # The bounded sweep's Taylor coefficients per unit, stored transposed like _rows (a block of units is a block
        # of contiguous rows): (n_l, 2, n_{l-1}) holding w^2 / 2 (the second-order term) and |w|^3 e^|w| / 6 (the
        # bound on the rest) side by side; and per unit eps times the sum of all three coefficients' magnitudes,
        # the unit of the bounds' rounding errors (a list of floats).
        # The bounded sweep keeps p = sigmoid(a) and 1 - p of the layer below by multiplicative updates, accurate
        # relative to themselves only while neither underflows (once 0, p stays 0 through later flips: a reviewer's
        # finding). `_fragile[l]`: the logits a_{l-1} can reach beyond the dtype's range (over every configuration
        # of x_l), so the sweep recomputes the rows whose p or 1 - p fell below the smallest normal number.
        eps = torch.finfo(model.dtype).eps
        self._taylor, self._rounding, self._fragile = [None] * L, [None] * L, [False] * L
        for l in range(1, L):
            w, b = model.weights[l - 1].double(), model.biases[l - 1].double()
            # for every layer: the native sweep updates the moments multiplicatively too, whatever the weights
            reach = torch.maximum((b + w.clamp(max=0).sum(1)).abs(), (b + w.clamp(min=0).sum(1)).abs())
            self._fragile[l] = float(reach.max()) > limit
            if float(w.abs().max()) <= _BOUNDED_MAX_WEIGHT:
                second, rest = 0.5 * w.square(), w.abs().pow(3) * w.abs().exp() / 6
                self._taylor[l] = torch.stack([second.t(), rest.t()], dim=1).contiguous().to(model.dtype)
                self._rounding[l] = (eps * (w.abs() + second + rest).sum(0)).tolist()
        if sweep == "bounded" and any(c is None for c in self._taylor[1:]):
            raise ValueError(f"the bounded sweep needs weights within +-{_BOUNDED_MAX_WEIGHT:g}")
        # The native sweep's plan per layer: None where a group of LANES inputs could leave the dtype's range, or
        # for dtypes the kernel has no version for
        native_dtype = model.dtype in (torch.float32, torch.float64)
        self._native_plans = [None] + [
            _native_plan(model.weights[l - 1], limit) if native_dtype else None for l in range(1, L)
        ]
        if sweep == "native":
            if not native_dtype:
                raise ValueError(f"the native sweep runs float32 and float64 models, not {model.dtype}")
            if model.device.type != "cpu":
                raise ValueError(f"the native sweep runs on the CPU; this model is on {model.device}")
            if native.library() is None:
                raise ValueError(f"the native sweep is unavailable here: {native.unavailable_reason()}")
            if any(plan is None for plan in self._native_plans[1:]):
                raise ValueError(
                    "the native sweep needs weights whose 16 consecutive inputs stay within the dtype's range"
                )
        self.sweep = sweep
        self._buffers: dict[str, Tensor] = {}  # the sweep's temporaries, reused while the shapes stay

    def state_elements(self) -> int:
        """Entries of one chain's state and sweep buffers, for sizing chunks of test vectors: the layers, the
        logits and moments of the layers below them, the top layer's input and sample, and the sweep's unit-major
        copies of a layer and its logits with the uniforms' logits in float64 (two entries each, drawn and kept)."""
        sizes = self.model.layer_sizes
        return 7 * sum(sizes[1:-1]) + 5 * sum(sizes[:-2]) + 2 * sizes[-1]

    # ----------------------------------------------------------------- states
    def base_logits(self, v: Tensor) -> tuple:
        """(None, rho_1, ..., rho_L), each shaped (N, 1, n_l) in the model's dtype, for v shaped (N, n_visible)."""
        m, L = self.model, self._L
        rho = [None, torch.matmul(v, m.weights[0]) + m.recognition_biases[0]]
        for l in range(2, L + 1):
            bias = m.recognition_biases[l - 1] if l < L else m.biases[L]
            rho.append(torch.matmul(torch.sigmoid(rho[-1]), m.weights[l - 1]) + bias)
        return tuple(None if x is None else x.unsqueeze(1) for x in rho)

    def base_log_partition(self, v: Tensor, base_logits=None) -> Tensor:
        """log Z_0(v) = sum_{l=1}^{L} sum_j softplus(rho_lj) in float64, shaped (N,), for v shaped (N, n_visible)."""
        rho = base_logits
        if rho is None:
            rho = self.base_logits(v.to(dtype=self.model.dtype, device=self.model.device))
        return sum(F.softplus(x.squeeze(1).double()).sum(-1) for x in rho[1:])

    def start(self, v: Tensor, num_chains: int, generator: torch.Generator) -> tuple[DBNPosteriorState, Tensor]:
        """(`num_chains` exact samples of the base for each row of v, log Z_0(v)).

        Args:
            v: binary test vectors shaped (N, n_visible).
        Returns:
            the state with batch dimensions (N, num_chains), and log Z_0(v) in float64 shaped (N,).
        """
        m = self.model
        v = v.to(dtype=m.dtype, device=m.device)
        n = v.shape[0]
        rho = self.base_logits(v)
        log_z0 = self.base_log_partition(v, rho)
        layers = [None] + [
            sample_bernoulli_logits(rho[l].expand(n, num_chains, -1).contiguous(), generator) for l in range(1, self._L)
        ]
        return self.state_from_layers(v, layers, rho), log_z0

    def state_from_layers(self, v: Tensor, layers, base_logits=None) -> DBNPosteriorState:
        """The state of the layers (None, x_1, ..., x_{L-1}) (each (N, C, n_l)) for the test vectors v (N, n_0),
        everything else computed from them (the same bits as the state the annealing loop carries)."""
        m = self.model
        v = v.to(dtype=m.dtype, device=m.device)
        rho = self.base_logits(v) if base_logits is None else tuple(base_logits)
        layers = tuple(layers)
        below, on, off = [None], [None], [None]
        for l in range(1, self._L):
            a = self._below_logits(layers[l], l)
            below.append(a)
            on.append(torch.sigmoid(a))
            off.append(torch.sigmoid(-a))
        top_input = self._binary_product(layers[-1], m.weights[-1], False, m.biases[-1])
        visible_bias_term = torch.mv(v.double(), m.biases[0].double()).unsqueeze(1)
        visible_input = torch.matmul(v, m.weights[0]).unsqueeze(1)
        return DBNPosteriorState(
            layers, tuple(below), tuple(on), tuple(off), top_input, rho, v.unsqueeze(1), visible_input,
            visible_bias_term,
        )  # fmt: skip

    def _below_logits(self, x: Tensor, l: int, out: Optional[Tensor] = None) -> Tensor:
        """a_{l-1} = x_l W_{l-1}^T + b_{l-1}, shaped (*batch, n_{l-1})."""
        return self._binary_product(x, self._rows[l], False, self.model.biases[l - 1], out)

    @staticmethod
    def _binary_product(x: Tensor, weight: Tensor, transposed: bool, bias: Tensor, out: Optional[Tensor] = None):
        """bias + x W (x W^T when `transposed`) for binary x shaped (*batch, n), through the product route the
        models' sampling steps use (`raise_eval.models.boltzmann.products`: on the CPU, the fastest of torch.mm,
        oneDNN and the table of subset sums, chosen by timing once per shape). The state is rebuilt from its
        layers with the same function (`state_from_layers`), so it has the same bits as the one the kernel
        carries."""
        batch = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1]).contiguous()
        cols = weight.shape[0] if transposed else weight.shape[1]
        flat_out = None if out is None else out.view(-1, cols)
        result = neighbour_product([(x, weight, transposed)], flat_out, bias=bias, binary=True)
        return result.view(*batch, cols) if out is None else out

    # ----------------------------------------------------------------- densities
    def log_target_minus_base(self, state: DBNPosteriorState) -> Tensor:
        """The part of d log f_beta / d beta that is linear in beta, in float64 shaped (N, C):
        sum_{l=0}^{L-2} (x_l . a_l - sum softplus(a_l)) + x_{L-1} . b_{L-1} - sum_{l<L} x_l . rho_l."""
        m, L = self.model, self._L
        # v . a_0 = v . b_0 + x_1 . (v W_0)
        linear = state.visible_input.double() - state.base_logits[1].double()
        total = state.visible_bias_term + (state.layers[1].double() * linear).sum(-1)
        for l in range(1, L):
            if l > 1:
                total = total + (state.layers[l - 1].double() * state.below[l].double()).sum(-1)
                total = total - (state.layers[l].double() * state.base_logits[l].double()).sum(-1)
            total = total - _sum_softplus(state.below[l], state.below_off[l], self._buffer(f"log{l}", state.below[l]))
        return total + torch.matmul(state.layers[L - 1].double(), m.biases[L - 1].double())

    def log_density_ratio(self, state: DBNPosteriorState, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(x) - log f_{beta_from}(x) in float64, shaped (N, C): (beta_to - beta_from) times the
        linear part, plus the summed-out top layer's softplus increments."""
        rho, t = state.base_logits[self._L], state.top_input
        step = torch.sub(t, rho, out=self._buffer("top step", t))
        z_from = torch.add(rho, step, alpha=beta_from, out=self._buffer("top z", t))
        step.mul_(beta_to - beta_from)
        top = _softplus_increment_sum(z_from, step, self._buffer("top scratch", t))
        return (beta_to - beta_from) * self.log_target_minus_base(state) + top

    # ----------------------------------------------------------------- kernel
    def clone_state(self, state: DBNPosteriorState) -> DBNPosteriorState:
        """A copy of `state` whose per-chain tensors are new (what `transition_` overwrites); the per-vector
        constants are shared."""

        def copy(ts):
            return tuple(None if t is None else t.clone(memory_format=torch.contiguous_format) for t in ts)

        return state._replace(
            layers=copy(state.layers), below=copy(state.below), below_on=copy(state.below_on),
            below_off=copy(state.below_off), top_input=state.top_input.clone(memory_format=torch.contiguous_format),
        )  # fmt: skip

    def transition(self, state: DBNPosteriorState, beta: float, generator: torch.Generator) -> DBNPosteriorState:
        """One sweep at `beta` (see the class docstring), all chains and vectors at once. Returns a new state
        (`state` is not modified)."""
        return self.transition_(self.clone_state(state), beta, generator)

    def transition_(self, state: DBNPosteriorState, beta: float, generator: torch.Generator) -> DBNPosteriorState:
        """`transition` writing into `state`'s own per-chain tensors (for loops that own their state: `anneal`
        clones the start once with `clone_state`). Returns `state`."""
        m, L = self.model, self._L
        layers, below = state.layers, state.below
        for l in range(1, L):
            x = layers[l]
            if l == L - 1:  # x_L given x_{L-1}, a block: the coefficient of x_{L-1} from the top RBM
                t = state.top_input
                x_top = torch.lerp(state.base_logits[L], t, beta, out=self._buffer("top z", t))
                sample_bernoulli_logits_(x_top, generator)
                above = self._buffer(f"linear{l}", x)
                self._binary_product(x_top, m.weights[L - 1], True, m.biases[L - 1], out=above)
            else:  # a_l, the logits of x_l given x_{l+1}
                above = self._buffer(f"linear{l}", x).copy_(below[l + 1])
            from_below = state.visible_input if l == 1 else torch.matmul(layers[l - 1], m.weights[l - 1])
            # (1 - beta) rho + beta (input from below + from above), in place
            linear = torch.lerp(state.base_logits[l], above.add_(from_below), beta, out=above)
            self._sweep_(l, layers[l], linear, below[l], state.below_on[l], state.below_off[l], beta, generator)
            # exact again: the sweep's incremental updates carry roundings
            a = self._below_logits(layers[l], l, out=below[l])
            torch.sigmoid(a, out=state.below_on[l])
            torch.neg(a, out=state.below_off[l]).sigmoid_()
        self._binary_product(layers[L - 1], m.weights[L - 1], False, m.biases[L], out=state.top_input)
        return state

    def _buffer(self, name: str, like: Tensor, shape: Optional[tuple] = None) -> Tensor:
        """A reused temporary with `like`'s dtype and device, shaped like it or `shape`."""
        shape = like.shape if shape is None else torch.Size(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.shape != shape or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._buffers[name] = torch.empty(shape, dtype=like.dtype, device=like.device)
        return buf

    def _rows_buffer(self, name: str, like: Tensor, rows: int) -> Tensor:
        """A reused temporary of `rows` rows shaped like `like`'s rows (dtype and device too): the first rows of a
        buffer that grows to the most rows asked for. The sweep's gathers of the chains that flip or stay
        undecided vary in count from unit to unit; fresh multi-megabyte temporaries would page-fault each time.
        They stay at their largest size (at most the rows; `state_elements` leaves them out, as it left out the
        temporaries they replace: the memory model's bytes per state entry cover them, e.g. 3,161 entries per chain
        at their largest against 7,820 counted, after four sweeps of a random 784-500-200 DBN on 400 chains)."""
        tail = like.shape[1:]
        buf = self._buffers.get(name)
        fits = buf is not None and buf.shape[1:] == tail and buf.shape[0] >= rows
        if not fits or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._buffers[name] = torch.empty((rows,) + tuple(tail), dtype=like.dtype, device=like.device)
        return buf[:rows]

    def _sweep_(self, l, x, linear, a, p_on, p_off, beta, generator) -> None:
        """Systematic-scan Gibbs over the units of x_l, in place. linear: the logits without the softplus terms of
        the layer below, (N, C, n_l); a, p_on, p_off: that layer's logits and their sigmoids (updated in place
        where a unit flips)."""
        x = x.view(-1, x.shape[-1])
        linear = linear.reshape(x.shape)
        a, p_on, p_off = (t.view(x.shape[0], -1) for t in (a, p_on, p_off))
        route = self.sweep_route(l, x.device)
        if route == "native":
            self._native_sweep_(l, x, linear, p_on, p_off, beta, generator)
        elif route == "bounded":
            self._bounded_sweep_(l, x, linear, a, p_on, p_off, beta, generator)
        else:
            self._full_sweep_(l, x, linear, a, p_on, p_off, beta, generator)

    def sweep_route(self, l: int, device: torch.device) -> str:
        """The sweep that layer l takes on `device`: the requested one, or for "auto" the native kernel on the CPU
        where it compiles and the weights allow, else the bounded sweep on the CPU (it picks rows with indices: on
        a GPU each pick would wait for the host), else the full one."""
        if self.sweep != "auto":
            return self.sweep
        if device.type != "cpu":
            return "full"
        if self._native_plans[l] is not None and native.library() is not None:
            return "native"
        return "bounded" if self._taylor[l] is not None else "full"

    def takes_native_sweep(self, device: torch.device) -> bool:
        """Whether every directed hidden layer's sweep runs in the native kernel on `device`."""
        return all(self.sweep_route(l, device) == "native" for l in range(1, self._L))

    def _native_sweep_(self, l, x, linear, p_on, p_off, beta, generator) -> None:
        """The sweep of `raise_eval.native` (dbn_sweep.c: every logit computed exactly, chain by chain in tiles),
        tensors as in `_sweep_`, flattened to (rows, n); p_on and p_off are updated where a unit flips. The
        uniforms are drawn as the bounded sweep draws them, so both see the same thresholds."""
        rows, n_units, n_below = x.shape[0], x.shape[1], p_on.shape[1]
        if not (x.device.type == "cpu" and all(t.is_contiguous() for t in (x, p_on, p_off))):
            raise ValueError("the native sweep runs on contiguous CPU tensors")
        linear = linear.contiguous()
        thresholds = torch.rand(x.shape, generator=generator, dtype=torch.float64, device=x.device).logit_()
        ends, take_log = self._native_plans[l]
        fragile = None
        if self._fragile[l]:
            tiny = torch.finfo(x.dtype).tiny
            fragile = (p_on.lt(tiny) | p_off.lt(tiny)).any(1).to(torch.uint8)
        kernel = getattr(native.library(), "dbn_sweep_float64" if x.dtype == torch.float64 else "dbn_sweep_float32")
        tile = max(1, _NATIVE_TILE_BYTES // (2 * n_below * x.element_size()))
        bias = self.model.biases[l - 1].contiguous()  # held: the kernel reads it through a pointer
        pointers = (x.data_ptr(), linear.data_ptr(), thresholds.data_ptr(), p_on.data_ptr(), p_off.data_ptr(),
                    self._exp_rows[l].data_ptr())  # fmt: skip
        tail = (
            ends.data_ptr(), take_log.data_ptr(), ends.numel(), tile, torch.finfo(x.dtype).tiny,
            0 if fragile is None else fragile.data_ptr(), self._rows[l].data_ptr(), bias.data_ptr(),
        )  # fmt: skip

        def run(begin: int, end: int) -> None:
            kernel(begin, end, n_units, n_below, *pointers, float(beta), *tail)

        # rows are independent: split between threads (ctypes releases the GIL), the same bits for any split
        parts = max(1, min(torch.get_num_threads(), -(-rows // tile)))
        native.run_in_parts(run, [rows * k // parts for k in range(parts + 1)])

    def _full_sweep_(self, l, x, linear, a, p_on, p_off, beta, generator) -> None:
        """The sweep computing every chain's logit exactly; tensors as in `_sweep_`, flattened to (rows, n)."""
        rows, exp_rows = self._rows[l], self._exp_rows[l]
        scale, factors = self._buffer("scale", a), self._buffer("factors", a)
        folds = _fold_views(factors, self._folds[l])
        on_cpu = x.device.type == "cpu"
        for j in range(x.shape[-1]):
            x_j = x[:, j]
            # e^(s w_j) per chain: row 0 (e^w) where x_j = 0 (a flip turns it on), row 1 (e^-w) where x_j = 1
            torch.index_select(exp_rows[j], 0, x_j.long(), out=scale)
            torch.addcmul(p_off, p_on, scale, out=factors)
            log_ratio = _fold_log_sum(*folds)
            sign = 1.0 - 2.0 * x_j
            # softplus(on) - softplus(off) = s * log_ratio
            new = sample_bernoulli_logits_(torch.addcmul(linear[:, j], sign, log_ratio, value=-beta), generator)
            change = new.sub_(x_j)  # +-1 where the unit flipped (= s), else 0
            x_j.add_(change)
            if on_cpu:  # update only the chains that flipped
                idx = torch.nonzero(change).squeeze(-1)
                if idx.numel() > 0:
                    self._flip_rows_(l, j, idx, change.index_select(0, idx), a, p_on, p_off)
            else:  # no host synchronisation per unit: every chain, most of them adding 0
                a.addcmul_(change.unsqueeze(-1), rows[j])
                torch.sigmoid(a, out=p_on)
                torch.neg(a, out=p_off).sigmoid_()

    def _flip_rows_(self, l, j, idx, change, a, p_on, p_off) -> None:
        """Moves the rows `idx` (chains whose unit j of layer l flipped by `change`, +-1) of a, p_on, p_off."""
        moved = a.index_select(0, idx).addcmul_(change.unsqueeze(-1), self._rows[l][j])
        _copy_rows_(a, idx, moved)
        _copy_rows_(p_on, idx, torch.sigmoid(moved))
        _copy_rows_(p_off, idx, moved.neg_().sigmoid_())

    def _recompute_fragile_rows_(self, l, units, idx, moved, fragile, tiny) -> None:
        """Rows `idx` just flipped, their moments updated into `moved` (flipped, 3, n): where a row held or now
        holds a p or 1 - p below `tiny` (a multiplicative update cannot bring an underflowed value back), its
        moments are recomputed from its logits a = x W^T + b, and `fragile` (rows,) is updated for it. units: the
        layer x_l being swept, unit-major (n_l, rows)."""
        suspect = fragile.index_select(0, idx) | moved[:, :2].lt(tiny).flatten(1).any(1)
        where = torch.nonzero(suspect).squeeze(-1)
        if where.numel() == 0:
            return
        rows = idx.index_select(0, where)
        x = units.index_select(1, rows).t().contiguous()  # (len(rows), n_l), as the chain-major layer's rows
        # torch.addmm, not `_below_logits`: a few rows of varying count would each have their product route timed
        a = torch.addmm(self.model.biases[l - 1], x, self._rows[l])
        fresh = moved.new_empty((rows.numel(),) + moved.shape[1:])
        torch.sigmoid(a, out=fresh[:, 0])  # as the state's below_on and below_off are computed
        torch.neg(a, out=fresh[:, 1]).sigmoid_()
        torch.mul(fresh[:, 0], fresh[:, 1], out=fresh[:, 2])
        moved.index_copy_(0, where, fresh)
        fragile.index_copy_(0, rows, fresh[:, :2].lt(tiny).flatten(1).any(1))

    def _bounded_sweep_(self, l, x, linear, a, p_on, p_off, beta, generator) -> None:
        """The sweep with the logits bounded by products, computed exactly only where the bounds leave the draw
        undecided; tensors as in `_sweep_`, flattened to (rows, n).

        With p = sigmoid(a) and s = 1 - 2 x_j, the softplus term of unit j's logit is s G_j, G_j = sum_i
        g_i(s w_ij) with g_i(y) = softplus(a_i + y) - softplus(a_i): g_i(0) = 0, g_i'(0) = p_i, g_i''(0) = p_i (1 -
        p_i) and |g_i'''| = sigma (1 - sigma) |1 - 2 sigma| (a_i + y) <= p_i (1 - p_i) e^|y| on [0, y], so by Taylor
        s G_j = S_j + s Q_j + s R_j with S_j = sum_i p_i w_ij, Q_j = sum_i p_i (1 - p_i) w_ij^2 / 2 and |R_j| <=
        T_j = sum_i p_i (1 - p_i) |w_ij|^3 e^|w_ij| / 6: three products of the chains' moments (p W, and p (1 - p)
        times two fixed matrices). The logit lin_j - beta s G_j lies within beta T_j of c = lin_j - beta (S_j +
        s Q_j). The unit is drawn as 1{l < logit} with l the logit of a uniform: where l falls outside that interval
        (widened by a margin for roundings) the draw is decided, and only the other chains compute G_j. After a
        flip, S, Q and T of the units still to come in the block are moved by the flipped rows' changes of the
        moments (small products).

        Layout: what the sweep reads unit by unit (the layer, its logits without the softplus terms, the uniforms'
        logits) is held unit-major, (n_l, rows), so that a unit's values for all chains are contiguous (column j of
        a chain-major (rows, n_l) tensor is strided: its ops touch a cache line and nearly a page per chain); the
        layer is written back after the sweep. The gathers of the chains that flip or stay undecided go into reused
        buffers (`_rows_buffer`). The bounds only decide which draws are computed exactly, so how they are rounded
        (e.g. the order of a product's sums) does not change the samples, as long as they stay within their margins.
        """
        n_units, n_rows, n_below = x.shape[-1], x.shape[0], a.shape[-1]
        exp_rows, rounding, folds = self._exp_rows[l], self._rounding[l], self._folds[l]
        slopes, taylor = self._rows[l], self._taylor[l].view(-1, n_below)  # (n_l, n), (2 n_l, n): Q's and T's rows
        # The sweep's own copy of p, 1 - p and p (1 - p), interleaved per chain so that the rows of chains that
        # flip move in one gather and one scatter; the state's tensors are recomputed after the sweep. Buffers are
        # kept per layer (a deeper DBN sweeps layers of other widths in turn).
        work = self._buffer(f"sweep rows{l}", a, (n_rows, 3, n_below))
        work[:, 0].copy_(p_on)
        work[:, 1].copy_(p_off)
        torch.mul(p_on, p_off, out=work[:, 2])
        p, pq = work[:, 0], work[:, 2]
        units = self._buffer(f"sweep units{l}", x, (n_units, n_rows)).copy_(x.t())
        lin = self._buffer(f"sweep linear{l}", x, (n_units, n_rows)).copy_(linear.t())
        # logits of uniforms, in float64: thresholds up to +-36 before they saturate (drawn chain-major, as before)
        uniforms = torch.rand(x.shape, generator=generator, dtype=torch.float64, device=x.device)
        thresholds = self._buffer(f"sweep thresholds{l}", uniforms, (n_units, n_rows)).copy_(uniforms.t()).logit_()
        del uniforms
        # Roundings, in units of eps sum_i |coefficients of unit j| (`_rounding`): a product of n terms errs by at
        # most n of them (the block's products, then one per flip in the block for its shift), and the moments
        # carry a few roundings from the sigmoids and from each flip's update (8 a flip, generously). The rest of
        # the interval's computation (c from lin, S and Q) errs by a few eps |lin| plus the same units.
        flips = torch.zeros(n_rows, dtype=x.dtype, device=x.device)
        errors = torch.empty_like(flips)
        tiny = torch.finfo(x.dtype).tiny
        # rows holding a p or 1 - p below the smallest normal number (only where the logits can get there)
        fragile = work[:, :2].lt(tiny).flatten(1).any(1) if self._fragile[l] else None
        slack = torch.abs(lin).mul_(8 * torch.finfo(x.dtype).eps).add_(1e-4)
        for begin in range(0, n_units, _BOUND_BLOCK):
            # S, and (Q, T) side by side, of a block of units for every chain: (rows, block) and (rows, 2 block),
            # chain-major (small enough to stay in the cache when read a column at a time); a flip inside the
            # block moves the rows that flipped
            end = min(begin + _BOUND_BLOCK, n_units)
            slope_sums = torch.mm(p, slopes[begin:end].t())
            taylor_sums = torch.mm(pq, taylor[2 * begin : 2 * end].t())
            torch.add(flips, 1.0, out=errors).mul_(8.0).add_(n_below + 8)
            for j in range(begin, end):
                x_j, k = units[j], j - begin
                second, rest = taylor_sums[:, 2 * k], taylor_sums[:, 2 * k + 1]
                # c = lin - beta S - beta (1 - 2 x) Q
                center = torch.add(lin[j], slope_sums[:, k], alpha=-beta).sub_(second, alpha=beta)
                center.addcmul_(second, x_j, value=2.0 * beta)
                # beta T, widened for the roundings
                half_width = torch.add(slack[j], rest, alpha=beta).add_(errors, alpha=beta * rounding[j])
                low = torch.sub(center, half_width)
                high = center.add_(half_width)
                level = thresholds[j]
                new = (level < low).to(x.dtype)
                undecided = torch.nonzero((level >= low) & (level < high)).squeeze(-1)
                if undecided.numel() > 0:
                    count = undecided.numel()
                    x_u = x_j.index_select(0, undecided)
                    picked = self._rows_buffer(f"undecided{l}", work, count)
                    torch.index_select(work, 0, undecided, out=picked)
                    scale = self._rows_buffer(f"undecided scale{l}", a, count)
                    torch.index_select(exp_rows[j], 0, x_u.long(), out=scale)
                    factors = torch.addcmul(picked[:, 1], picked[:, 0], scale, out=scale)
                    log_ratio = _fold_log_sum(*_fold_views(factors, folds))
                    logit = torch.addcmul(lin[j].index_select(0, undecided), 1.0 - 2.0 * x_u, log_ratio, value=-beta)
                    new.index_copy_(0, undecided, (level.index_select(0, undecided) < logit).to(x.dtype))
                change = new.sub_(x_j)
                x_j.add_(change)
                idx = torch.nonzero(change).squeeze(-1)
                if idx.numel() > 0:
                    count = idx.numel()
                    # a moves by s w: p' = p e^(s w) / F and 1 - p' = (1 - p) / F, F = 1 - p + p e^(s w)
                    before = self._rows_buffer(f"flip before{l}", work, count)
                    torch.index_select(work, 0, idx, out=before)
                    moved = self._rows_buffer(f"flip moved{l}", work, count)
                    turned_off = change.index_select(0, idx).lt(0).long()
                    scale = self._rows_buffer(f"flip scale{l}", a, count)
                    torch.index_select(exp_rows[j], 0, turned_off, out=scale)
                    on = torch.mul(before[:, 0], scale, out=moved[:, 0])
                    factor = torch.add(before[:, 1], on, out=scale)
                    on.div_(factor)
                    off = torch.div(before[:, 1], factor, out=moved[:, 1])
                    torch.mul(on, off, out=moved[:, 2])
                    if fragile is not None:
                        self._recompute_fragile_rows_(l, units, idx, moved, fragile, tiny)
                    _copy_rows_(work, idx, moved)
                    flips.index_add_(0, idx, torch.ones_like(idx, dtype=x.dtype))
                    # the shifts' products (n each, and their sums) and the flip's update of the moments
                    errors.index_add_(0, idx, torch.full_like(idx, n_below + 16, dtype=x.dtype))
                    if j + 1 < end:
                        delta = before[:, 0::2]  # (flipped, 2, n): the changes of p and p (1 - p)
                        torch.sub(moved[:, 0::2], delta, out=delta)
                        # (units to come, flipped) products, read transposed: a third faster than (flipped, units)
                        # with so few columns (any rounding of the bounds is within their margin)
                        slope_sums[:, k + 1 :].index_add_(0, idx, torch.mm(slopes[j + 1 : end], delta[:, 0].t()).t())
                        taylor_sums[:, 2 * k + 2 :].index_add_(
                            0, idx, torch.mm(taylor[2 * j + 2 : 2 * end], delta[:, 1].t()).t()
                        )
        x.copy_(units.t())


def posterior_path(model) -> DBMPosteriorPath | DBNPosteriorPath:
    """The posterior annealing path of a DBM or a DBN."""
    if model.family == "DBN":  # declared by the class (`models.contracts.Model`)
        return DBNPosteriorPath(model)
    return DBMPosteriorPath(model)


__all__ = [
    "DBMPosteriorPath",
    "DBMPosteriorState",
    "DBNPosteriorPath",
    "DBNPosteriorState",
    "posterior_path",
    "softplus_increment",
]
