"""Single-site Gibbs sampling of binary latents on the directed path f_beta(z) = p(z) p(x | z)^beta.

Each site update samples z_i from p_beta(z_i | z_rest), whose log-odds are
log p(z_i = 1) / p(z_i = 0) + beta [log p(x | z_i = 1, z_rest) - log p(x | z_i = 0, z_rest)].
A sweep visits the sites 0..d-1 and then d-1..0: a palindromic product of reversible updates, hence reversible,
so forward and reverse annealing use the same kernel. For models whose data logits are linear in z (sigmoid belief
nets: a = W z + b) flipping site i moves the logits by +-W[:, i], and the sweep updates the cached logits instead
of re-evaluating the model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from raise_eval.kernels.directed_state import DirectedState
from raise_eval.models.sampling import sample_bernoulli_logits


class BinaryGibbsKernel:
    """Palindromic single-site Gibbs sweep (state, beta, generator) -> state for binary latents.

    Args:
        path: the `raise_eval.paths.directed.DirectedPath` whose model and examples it samples (the path makes this
            kernel its default, so this module does not import it).
    """

    def __init__(self, path):
        self.path = path

    def __call__(self, state: DirectedState, beta: float, generator: torch.Generator) -> DirectedState:
        d = state.z.shape[-1]
        order = list(range(d)) + list(range(d - 1, -1, -1))
        if state.data_logits is not None:
            return self._sweep_linear(state, beta, generator, order)
        return self._sweep_generic(state, beta, generator, order)

    def _prior_log_odds(self, z: Tensor, i: int) -> Tensor:
        m = self.path.model
        on, off = z.clone(), z.clone()
        on[..., i], off[..., i] = 1.0, 0.0
        return m.log_prior(on) - m.log_prior(off)

    def _sweep_linear(self, state: DirectedState, beta: float, generator: torch.Generator, order) -> DirectedState:
        m, x = self.path.model, self.path._x
        z = state.z.clone()
        logits = state.data_logits.clone()
        for i in order:
            w = m.W[:, i]
            base = logits - z[..., i : i + 1] * w  # logits with z_i = 0
            ll0 = m.log_likelihood_from_logits(x, base)
            ll1 = m.log_likelihood_from_logits(x, base + w)
            zi = sample_bernoulli_logits(self._prior_log_odds(z, i) + beta * (ll1 - ll0), generator)
            z[..., i] = zi
            logits = base + zi.unsqueeze(-1) * w
        ll = m.log_likelihood_from_logits(x, logits)
        return DirectedState(z, m.log_prior(z), ll, data_logits=logits)

    def _sweep_generic(self, state: DirectedState, beta: float, generator: torch.Generator, order) -> DirectedState:
        m, x = self.path.model, self.path._x
        z = state.z.clone()
        for i in order:
            on, off = z.clone(), z.clone()
            on[..., i], off[..., i] = 1.0, 0.0
            log_odds = (m.log_prior(on) - m.log_prior(off)) + beta * (
                m.log_likelihood(x, on) - m.log_likelihood(x, off)
            )
            z[..., i] = sample_bernoulli_logits(log_odds, generator)
        return self.path.state_from_latents(z)
