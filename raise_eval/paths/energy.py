"""The geometric path of a user's energy model (`EnergyModel`) from a normalized base.

f_beta(x) = f_base(x)^(1 - beta) f(x)^beta, log f = -E: p_0 the base (`GaussianBase`, diagonal and truncated to the
box on a bounded real support, or `SiteBase`, independent sites), normalized in closed form, so log Z_0 = 0 and it
is sampled exactly. The state (`kernels.energy_state.EnergyState`) carries log f(x) and, once computed, its
gradient, so the weight update (beta' - beta)(log f(x) - log p_0(x)) evaluates no energy. RAISE starts at each test
vector itself (no hidden units: its start weight is f(v) / Z_0), which the path declares by offering
`test_vector_start`.

The default kernel: HMC (10 leapfrog steps, step size 0.1 times the base's standard deviations) on real support,
the palindromic Metropolis scan on discrete support; pass a tuned one (`kernels.energy_hmc.tune_step_sizes`) or
another kernel (`MALAKernel`, `GibbsWithGradientsKernel`) to `ais` and `raise_log_likelihood` as `kernel`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

from raise_eval.kernels.energy_hmc import EnergyHMCKernel
from raise_eval.kernels.energy_sites import MetropolisScanKernel
from raise_eval.kernels.energy_state import EnergyState
from raise_eval.models.energy import EnergyModel, check_base, default_base


class EnergyPath:
    """Geometric path from the base (beta = 0) to an energy model (beta = 1).

    Args:
        model: the `EnergyModel`.
        base: a `GaussianBase` / `SiteBase` (or a one-element sequence holding it, as `make_path`'s base_biases);
            the model's own `base` when None, else `models.energy.default_base`.
    """

    def __init__(self, model: EnergyModel, base=None):
        if isinstance(base, (list, tuple)):
            if len(base) != 1:
                raise ValueError(f"an energy model's base is one object (GaussianBase or SiteBase), got {len(base)}")
            base = base[0]
        if base is None:
            base = model.base if model.base is not None else default_base(model)
        self.model = model
        self.base = check_base(model, base)
        self.base_biases = [self.base]
        self.clamped = ()
        self._kernel = None

    # ---------------------------------------------------------------- the base
    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the base, float64 (0: it is normalized)."""
        return float(self.base.log_partition)

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> EnergyState:
        """`num_chains` exact samples of the base, batch shape (num_chains,)."""
        return self.state_from_x(self.base.sample((num_chains,), generator, dtype=self.model.dtype))

    def log_base_prob(self, x: Tensor) -> Tensor:
        """log p_0(x) of chain states x (*B, *event_shape) (codes for discrete support), float64 (*B,)."""
        return self.base.log_prob(x)

    def step_scale(self) -> Tensor:
        """The per-coordinate scale of HMC's moves (event_shape): the base's standard deviations on real support."""
        return self.base.std

    # ---------------------------------------------------------------- states
    def state_from_x(self, x: Tensor) -> EnergyState:
        """The state of chain states x (*B, *event_shape) (real: floats; discrete: codes), log f computed."""
        return EnergyState(x, self.model.log_unnormalized_state(x), None)

    def state_with_grad(self, x: Tensor) -> EnergyState:
        """The state of x with log f and its gradient (one forward and one backward pass)."""
        log_f, grad = self.model.log_f_and_grad(x)
        return EnergyState(x, log_f, grad)

    def with_grad(self, state: EnergyState) -> EnergyState:
        """`state` with its gradient computed if it has none."""
        return state if state.grad is not None else self.state_with_grad(state.x)

    def state_from_data(self, data: Tensor, what: str = "x") -> EnergyState:
        """The state of examples in the user's convention (checked against the support, naming `what`)."""
        return self.state_from_x(self.model.state_from_data(data, what))

    def test_vector_start(self, data: Tensor, num_chains: int, what: str = "test data") -> tuple[EnergyState, Tensor]:
        """RAISE's start at the test vectors themselves: (the state with batch (N, num_chains), log f(v) float64
        (N,)). data: (N, *event_shape)."""
        state = self.state_from_data(data, what)
        if state.x.dim() != 1 + len(self.model.event_shape):
            raise ValueError(f"{what} must be shaped (N, {', '.join(map(str, self.model.event_shape))}), got "
                             f"{tuple(data.shape)}")  # fmt: skip
        n = state.x.shape[0]
        x = state.x.unsqueeze(1).expand(n, num_chains, *state.x.shape[1:]).contiguous()
        log_f = state.log_f.unsqueeze(1).expand(n, num_chains).contiguous()
        return EnergyState(x, log_f, None), state.log_f

    def state_from_record(self, record: dict) -> EnergyState:
        """The state a resume file kept (`contracts.ResumableState`): its layers are x, log f and the gradient."""
        return EnergyState(*record["layers"])

    def clone_state(self, state: EnergyState) -> EnergyState:
        return EnergyState(*(None if t is None else t.clone() for t in state))

    # ---------------------------------------------------------------- densities and kernel
    def log_density(self, state: EnergyState, beta: float) -> Tensor:
        """log f_beta(x) = (1 - beta) log p_0(x) + beta log f(x), float64 (*B,)."""
        return (1 - beta) * self.log_base_prob(state.x) + beta * state.log_f

    def log_density_ratio(self, state: EnergyState, beta_from: float, beta_to: float) -> Tensor:
        """(beta_to - beta_from)(log f(x) - log p_0(x)), float64 (*B,)."""
        return (beta_to - beta_from) * (state.log_f - self.log_base_prob(state.x))

    def grad_log_density(self, state: EnergyState, beta: float) -> Tensor:
        """The gradient of log f_beta at a real state with its gradient, shaped like x, in x's dtype."""
        return self.base.grad_log_prob(state.x, 1 - beta).add_(state.grad.to(state.x.dtype), alpha=beta)

    @property
    def kernel(self):
        """The default kernel (see the module docstring)."""
        if self._kernel is None:
            discrete = self.model.support.discrete
            self._kernel = MetropolisScanKernel(self) if discrete else EnergyHMCKernel(self, 0.1, 10)
        return self._kernel

    def transition(self, state: EnergyState, beta: float, generator: torch.Generator) -> EnergyState:
        """The default kernel's transition at beta (reversible, leaves p_beta invariant)."""
        return self.kernel(state, beta, generator)

    def step_program(self, options) -> None:
        """None: the eager loop runs an energy's path (the user's energy is not captured in CUDA graphs)."""
        return None


def energy_path(model: EnergyModel, base_biases: Optional[Sequence] = None, clamped: Sequence[int] = ()) -> EnergyPath:
    """`make_path` for the 'energy' family: base_biases is the base (or a one-element sequence of it)."""
    if tuple(clamped):
        raise ValueError(f"an energy model has no layers to clamp, got clamped={tuple(clamped)}")
    return EnergyPath(model, base_biases)
