"""The DBM posterior path: from the mean-field posterior q(h | v) to p(h | v), block Gibbs on the hidden layers."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.models.boltzmann.dbm import DBM, mean_field_logits
from raise_eval.models.sampling import sample_bernoulli_logits, sample_bernoulli_logits_
from raise_eval.paths.posterior.common import softplus_increment


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
