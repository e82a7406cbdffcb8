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

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.models.boltzmann.dbm import DBM, mean_field_logits
from raise_eval.models.boltzmann.dbn import DBN
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
        if hasattr(model, "sample_recognition") or model.num_layers < 3:
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
class DBNPosteriorState(NamedTuple):
    """State of `DBNPosteriorPath`, batch dimensions (N, C); the top layer x_2 is summed out.

    hidden: x_1 shaped (N, C, n_1) in the model's dtype.
    inputs: [a | t] shaped (N, C, n_0 + n_2): a = x_1 W_0^T + b_0 (the visible logits) and t = x_1 W_1 + b_2 (the
        top layer's input), kept up to date unit by unit during a sweep.
    softplus: softplus(inputs), same shape: a unit's conditional compares it with its value after a flip.
    base_logits: rho = v W_0 + r_1, q's logits, shaped (N, 1, n_1).
    linear: c = v W_0 + b_1, x_1's coefficient in log f(v, x_1), shaped (N, 1, n_1).
    visible_bias_term: v . b_0 in float64, shaped (N, 1).
    """

    hidden: Tensor
    inputs: Tensor
    softplus: Tensor
    base_logits: Tensor
    linear: Tensor
    visible_bias_term: Tensor


class DBNPosteriorPath:
    """Geometric path from the recognition distribution q(x_1 | v) to the posterior p(x_1 | v) of a DBN with two
    hidden layers (v <- x_1 sigmoid, top RBM over (x_1, x_2)), per test vector.

    q(x_1 | v) = prod_j Bernoulli(sigmoid(rho_j)), rho = v W_0 + r_1. The target, with x_2 summed out, is

        log f(v, x_1) = log p(v | x_1) + log f_top(x_1)
                      = v . b_0 + x_1 . c - sum_i softplus(a_i) + sum_k softplus(t_k),   c = v W_0 + b_1,

    and log f_beta(x_1) = (1 - beta) x_1 . rho + beta log f(v, x_1), so log Z_0(v) = sum_j softplus(rho_j) and
    the weight increment is (beta' - beta) (log f(v, x_1) - x_1 . rho), with x_1 . (c - rho) = x_1 . (b_1 - r_1).

    p(v | x_1) does not factorize over x_1, so the kernel is a systematic-scan Gibbs sweep over the units of x_1,
    each drawn from its exact conditional under f_beta given the others. It leaves f_beta invariant but is not
    reversible (a fixed scan order), which forward AIS does not need; do not run it on a reversed schedule.
    """

    def __init__(self, model: DBN):
        if not hasattr(model, "sample_recognition"):
            raise ValueError("DBNPosteriorPath needs a DBN")
        if len(model.weights) != 2:
            raise ValueError(
                f"the AIS method supports DBNs with two hidden layers; this DBN has {len(model.weights)} "
                "(use method='importance')"
            )
        self.model = model
        w0, w1 = model.weights
        # Row j: how unit j of x_1 moves [a | t] when it turns on.
        self._rows = torch.cat([w0.t(), w1], dim=1).contiguous()
        self._bias = torch.cat([model.biases[0], model.biases[2]])
        # log f(v, x_1) counts softplus(a) negatively (Bernoulli normalizers), softplus(t) positively (top RBM).
        self._sign = torch.cat([-torch.ones_like(model.biases[0]), torch.ones_like(model.biases[2])])
        self._sign64 = self._sign.double()
        self._linear_minus_base = (model.biases[1] - model.recognition_biases[0]).double()  # c - rho = b_1 - r_1

    def state_elements(self) -> int:
        """Entries of one chain's state and sweep buffers, for sizing chunks of test vectors."""
        n0, n1, n2 = self.model.layer_sizes
        return n1 + 5 * (n0 + n2)

    def start(self, v: Tensor, num_chains: int, generator: torch.Generator) -> tuple[DBNPosteriorState, Tensor]:
        """(`num_chains` exact samples of q(x_1 | v) for each row of v, log Z_0(v)).

        Args:
            v: binary test vectors shaped (N, n_visible).
        Returns:
            the state with batch dimensions (N, num_chains), and log Z_0(v) in float64 shaped (N,).
        """
        m = self.model
        v = v.to(dtype=m.dtype, device=m.device)
        n = v.shape[0]
        v_input = torch.matmul(v, m.weights[0])
        rho = (v_input + m.recognition_biases[0]).unsqueeze(1)
        linear = (v_input + m.biases[1]).unsqueeze(1)
        log_z0 = F.softplus(rho.squeeze(1).double()).sum(-1)
        hidden = sample_bernoulli_logits(rho.expand(n, num_chains, -1).contiguous(), generator)
        inputs = torch.matmul(hidden, self._rows).add_(self._bias)
        visible_bias_term = torch.mv(v.double(), m.biases[0].double()).unsqueeze(1)
        return DBNPosteriorState(hidden, inputs, F.softplus(inputs), rho, linear, visible_bias_term), log_z0

    def log_target_minus_base(self, state: DBNPosteriorState) -> Tensor:
        """log f(v, x_1) - x_1 . rho in float64, shaped (N, C): d log f_beta / d beta."""
        return (
            state.visible_bias_term
            + torch.matmul(state.hidden.double(), self._linear_minus_base)
            + torch.matmul(state.softplus.double(), self._sign64)
        )

    def log_density_ratio(self, state: DBNPosteriorState, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(x_1) - log f_{beta_from}(x_1) = (beta_to - beta_from) (log f(v, x_1) - x_1 . rho), in
        float64, shaped (N, C): linear in beta, so a product rather than a difference."""
        return (beta_to - beta_from) * self.log_target_minus_base(state)

    def transition(self, state: DBNPosteriorState, beta: float, generator: torch.Generator) -> DBNPosteriorState:
        """One systematic-scan Gibbs sweep over the units of x_1 at `beta`, all chains and vectors at once.
        Returns a new state (`state` is not modified)."""
        hidden, inputs, sp = state.hidden.clone(), state.inputs.clone(), state.softplus.clone()
        work = torch.empty_like(inputs)
        for j in range(hidden.shape[-1]):
            x_j = hidden[..., j]
            s = 1.0 - 2.0 * x_j  # +1 turns unit j on, -1 off: [a | t] after flipping it is inputs + s row_j
            row = self._rows[j]
            _softplus_(torch.addcmul(inputs, s.unsqueeze(-1), row, out=work), work)
            diff = work.sub_(sp)  # softplus after the flip minus now, (N, C, n_0 + n_2)
            # log f(x_j = 1) - log f(x_j = 0) = c_j + s * sum sign (softplus(flipped) - softplus(now))
            logit = torch.lerp(
                state.base_logits[..., j], torch.addcmul(state.linear[..., j], s, torch.matmul(diff, self._sign)), beta
            )
            new = sample_bernoulli_logits_(logit, generator)
            change = (new - x_j).unsqueeze(-1)  # s where the unit flipped, else 0
            hidden[..., j] = new
            # Flipped chains add s row_j, as `work` did before the softplus; the others add 0.
            inputs.addcmul_(change, row)
            sp.addcmul_(change.abs_(), diff)
        # The incremental softplus picked up a rounding per flip: the weight update gets the exact one.
        return state._replace(hidden=hidden, inputs=inputs, softplus=_softplus_(inputs, sp))


def posterior_path(model) -> DBMPosteriorPath | DBNPosteriorPath:
    """The posterior annealing path of a DBM or a two-hidden-layer DBN."""
    if hasattr(model, "sample_recognition"):
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
