"""The geometric path of a directed model: f_beta(z) = p(z) p(x | z)^beta, from the prior (beta = 0, normalized)
to the unnormalized posterior (beta = 1, normalizer p(x)), for N examples x chains at once.

The state caches log p(z) and log p(x | z) (and, for continuous latents, their gradients), so the density and
its gradient at any beta, and the weight update (beta' - beta) log p(x | z), cost no model evaluation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from raise_eval.kernels.binary_gibbs import BinaryGibbsKernel
from raise_eval.kernels.directed_state import DirectedState, select_state  # noqa: F401 (select_state: re-exported)
from raise_eval.models.directed.base import DirectedLatentModel


class DirectedPath:
    """f_beta(z) = p(z) p(x_n | z)^beta for each example x_n.

    Args:
        model: a `DirectedLatentModel`.
        x: observations shaped (N, data_dim); chains are added as a second batch dimension.
        kernel: the default transition (state, beta, generator) -> state; binary latents get single-site Gibbs
            when None, continuous latents need a tuned `HMCKernel` (see `tune_hmc`).
    """

    log_partition_initial = 0.0  # the prior is normalized

    def __init__(self, model: DirectedLatentModel, x: Tensor, kernel=None):
        if x.dim() != 2 or x.shape[1] != model.data_dim:
            raise ValueError(f"x must be shaped (N, {model.data_dim}), got {tuple(x.shape)}")
        model.check_data(x, "x")  # e.g. a DecoderModel: data outside its likelihood's support, once per path
        self.model = model
        self.x = x
        self._x = x.unsqueeze(1)  # (N, 1, D): broadcasts over chains
        self._kernel = kernel
        if kernel is None and model.latent_type == "binary":
            self._kernel = BinaryGibbsKernel(self)

    @property
    def num_examples(self) -> int:
        return self.x.shape[0]

    def state_from_latents(self, z: Tensor) -> DirectedState:
        """The state of latents z shaped (N, C, latent_dim), with every cached value computed."""
        if z.dim() != 3 or z.shape[0] != self.num_examples:
            raise ValueError(f"latents must be shaped (N={self.num_examples}, C, latent_dim), got {tuple(z.shape)}")
        m = self.model
        if m.latent_type == "binary":
            logits = m.data_logits(z)  # None where the model has no closed form
            ll = m.log_likelihood_from_logits(self._x, logits) if logits is not None else m.log_likelihood(self._x, z)
            return DirectedState(z, m.log_prior(z), ll, data_logits=logits)
        lp, glp = m.log_prior_and_grad(z)
        ll, gll = m.log_likelihood_and_grad(self._x, z)
        return DirectedState(z, lp, ll, glp, gll)

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> DirectedState:
        """`num_chains` prior samples per example, batch (N, num_chains)."""
        return self.state_from_latents(self.model.sample_prior((self.num_examples, num_chains), generator))

    def log_density(self, state: DirectedState, beta: float) -> Tensor:
        """log p(z) + beta log p(x | z), shaped (N, C)."""
        return state.log_prior + beta * state.log_likelihood

    def grad_log_density(self, state: DirectedState, beta: float) -> Tensor:
        """d/dz of log f_beta, shaped (N, C, latent_dim) (continuous latents)."""
        return state.grad_log_prior + beta * state.grad_log_likelihood

    def log_density_ratio(self, state: DirectedState, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to} - log f_{beta_from} = (beta_to - beta_from) log p(x | z), shaped (N, C)."""
        return (beta_to - beta_from) * state.log_likelihood

    def transition(self, state: DirectedState, beta: float, generator: torch.Generator) -> DirectedState:
        if self._kernel is None:
            raise ValueError(
                "continuous latents have no default kernel: pass kernel=HMCKernel(path, step_sizes) "
                "(raise_eval.kernels.hmc; tune the step sizes with tune_hmc)"
            )
        return self._kernel(state, beta, generator)
