"""The DBN posterior path: from a factorial base to p(x_1, ..., x_L | v), unit-wise Gibbs sweeps (`sweeps`)."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.models import native
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.products import neighbour_product
from raise_eval.models.sampling import sample_bernoulli_logits, sample_bernoulli_logits_
from raise_eval.paths.posterior.sweeps import (
    _BOUNDED_MAX_WEIGHT,
    _SWEEPS,
    DBNSweeps,
    _fold_plan,
    _log_range,
    _native_plan,
    _softplus_increment_sum,
    _sum_softplus,
)


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


class DBNPosteriorPath(DBNSweeps):
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

    Three implementations draw this kernel (`sweep`): the native one (`raise_eval.models.native`, C compiled on first
    use: chain by chain in tiles that stay in the L1 cache, every logit computed, about a third of the bounded sweep's
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
        """sweep: "native" (the C kernel of `raise_eval.models.native`, CPU only), "bounded" (PyTorch, the draws decided
        by bounds where they can be, CPU only), "full" (PyTorch, every logit computed: what a GPU runs) or "auto" (the
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

    def state_from_record(self, record: dict) -> tuple:
        """What a resume file saved of a posterior state (`contracts.ResumableState`): its layers. The state is a
        function of (v, layers): the heating rebuilds it with `state_from_layers(v, layers)`."""
        return tuple(record["layers"])

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
