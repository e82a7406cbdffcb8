"""Discrete kernels for an energy model (`paths.energy.EnergyPath` on binary, spin or categorical support).

The path's density is log f_beta(x) = (1 - beta) log p_0(x) + beta log f(x), p_0 the independent-site base. Sites
are the D coordinates of x flattened (row-major over event_shape); states are int64 codes.

- `MetropolisScanKernel`: single-site Metropolis updates in the palindromic order 0..D-1, D-1..0: each site proposes
  another state uniformly (a flip for two-state sites) and accepts with min(1, f_beta(x') / f_beta(x)). Each update
  is reversible with respect to p_beta, and a palindromic product of reversible updates is reversible, so the
  reversed annealing schedule (RAISE) runs the exact reversal of the forward chain. Cost: 2D forward passes.
- `GibbsWithGradientsKernel` (Grathwohl et al., 2021): the change of log f_beta from setting site i to state a is
  estimated to first order from the gradient of log f with respect to the energy's input (the base's part is
  exact), d(x)[i, a]; the proposal draws (i, a) from softmax(d(x) / 2) over every other state of every site, and
  the Metropolis-Hastings correction min(1, f_beta(x') q(x | x') / (f_beta(x) q(x' | x))) makes each step
  reversible with respect to p_beta whatever the quality of the estimate. Cost: one forward and backward pass per
  proposal (the current state's gradient travels in `EnergyState`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from raise_eval.contracts import KernelInfo
from raise_eval.kernels.energy_state import EnergyState, non_finite_share, select_state
from raise_eval.models.energy import TWO_STATE_VALUES


def _check_discrete(path, what: str) -> None:
    if not path.model.support.discrete:
        raise ValueError(f"{what} needs discrete support; this energy's is {path.model.support.describe()} "
                         "(use HMC or MALA)")  # fmt: skip


def _flat(x: Tensor, event_dims: int) -> Tensor:
    return x.flatten(start_dim=x.dim() - event_dims)


class MetropolisScanKernel:
    """The palindromic single-site Metropolis scan at beta (`contracts.InfoKernel`; info 'acceptance': the mean
    acceptance probability of the scan's 2D proposals per chain, shaped (*B,); 'non_finite': the share of them whose
    log ratio was NaN or +inf, rejected for it).

    Args:
        path: an `EnergyPath` on discrete support (`model`, `log_base_sites`, `state_from_codes`).
    """

    def __init__(self, path):
        _check_discrete(path, "the Metropolis scan")
        self.path = path

    def step(self, state: EnergyState, beta: float, generator: torch.Generator) -> tuple[EnergyState, KernelInfo]:
        path, model = self.path, self.path.model
        event_dims, q = len(model.event_shape), model.num_states
        codes = _flat(state.x, event_dims).clone()  # (*B, D)
        batch = codes.shape[:-1]
        log_f = state.log_f
        base = path.base.log_probs.reshape(-1, q)  # (D, q)
        acceptance = torch.zeros(batch, dtype=torch.float64, device=codes.device)
        non_finite = torch.zeros(batch, dtype=torch.float64, device=codes.device)
        order = [*range(codes.shape[-1]), *reversed(range(codes.shape[-1]))]
        for i in order:
            u = torch.rand((2, *batch), generator=generator, dtype=torch.float64, device=codes.device)
            old = codes[..., i]
            shift = 1 + (u[0] * (q - 1)).long().clamp_(max=q - 2)  # uniform over the q - 1 other states
            new = (old + shift) % q
            proposal = codes.clone()
            proposal[..., i] = new
            log_f_new = model.log_unnormalized_state(proposal.reshape(*batch, *model.event_shape))
            log_ratio = (1 - beta) * (base[i][new] - base[i][old]) + beta * (log_f_new - log_f)
            non_finite += non_finite_share(log_ratio)
            # NaN or +inf (the energy NaN or -inf at the proposal): rejected, as HMC's and the other kernels' are
            prob = torch.exp(torch.nan_to_num(log_ratio, nan=-torch.inf, posinf=-torch.inf).clamp(max=0.0))
            acceptance += prob
            accept = u[1] < prob
            codes[..., i] = torch.where(accept, new, old)
            log_f = torch.where(accept, log_f_new, log_f)
        new_state = EnergyState(codes.reshape(state.x.shape), log_f, None)
        return new_state, KernelInfo(acceptance=acceptance / len(order), non_finite=non_finite / len(order))

    def __call__(self, state: EnergyState, beta: float, generator: torch.Generator) -> EnergyState:
        return self.step(state, beta, generator)[0]


def first_order_changes(path, state: EnergyState, beta: float) -> Tensor:
    """d[..., i, a]: the change of log f_beta from setting site i to state a, the base's part exact and the energy's
    to first order in its input (gradient at x), float64 shaped (*B, D, q); -inf at each site's own state."""
    model = path.model
    event_dims, q = len(model.event_shape), model.num_states
    codes = _flat(state.x, event_dims)  # (*B, D)
    own = codes.unsqueeze(-1)
    if model.support.kind == "categorical":
        grad = state.grad.double().flatten(start_dim=state.grad.dim() - event_dims - 1, end_dim=-2)  # (*B, D, q)
        change = grad - grad.gather(-1, own)
    else:
        values = torch.tensor(TWO_STATE_VALUES[model.support.kind], dtype=torch.float64, device=codes.device)
        grad = _flat(state.grad.double(), event_dims).unsqueeze(-1)  # (*B, D, 1)
        change = grad * (values - values[codes].unsqueeze(-1))
    base = path.base.log_probs.reshape(-1, q)  # (D, q)
    base_change = base - base.expand(*codes.shape, q).gather(-1, own)
    d = (1 - beta) * base_change + beta * change
    return d.scatter(-1, own, -torch.inf)


class GibbsWithGradientsKernel:
    """Gibbs with gradients (see the module docstring) at beta (`contracts.InfoKernel`; info 'acceptance': the mean
    acceptance probability of the transition's proposals per chain, shaped (*B,); 'non_finite': the share of them
    whose log acceptance was NaN or +inf, rejected for it).

    Args:
        path: an `EnergyPath` on discrete support whose energy is differentiable in its input.
        num_proposals: Metropolis-Hastings steps per transition (a power of a reversible kernel is reversible).
    """

    def __init__(self, path, num_proposals: int = 1):
        _check_discrete(path, "Gibbs with gradients")
        if isinstance(num_proposals, bool) or not isinstance(num_proposals, int) or num_proposals < 1:
            raise ValueError(f"num_proposals must be an integer of at least 1, got {num_proposals!r}")
        self.path, self.num_proposals = path, num_proposals

    def step(self, state: EnergyState, beta: float, generator: torch.Generator) -> tuple[EnergyState, KernelInfo]:
        path, model = self.path, self.path.model
        event_dims, q = len(model.event_shape), model.num_states
        state = path.with_grad(state)
        total = torch.zeros(state.log_f.shape, dtype=torch.float64, device=state.x.device)
        non_finite = torch.zeros_like(total)
        for _ in range(self.num_proposals):
            log_q = torch.log_softmax(_flat(first_order_changes(path, state, beta) / 2, 2), dim=-1)  # (*B, D q)
            u = torch.rand((2, *state.log_f.shape), generator=generator, dtype=torch.float64, device=log_q.device)
            cdf = log_q.exp().cumsum(-1)
            pick = (cdf[..., :-1] < (u[0] * cdf[..., -1]).unsqueeze(-1)).sum(-1)  # (*B,) index i * q + a
            site, value = pick // q, pick % q
            codes = _flat(state.x, event_dims)
            old = codes.gather(-1, site.unsqueeze(-1)).squeeze(-1)
            moved = codes.scatter(-1, site.unsqueeze(-1), value.unsqueeze(-1)).reshape(state.x.shape)
            proposal = path.state_with_grad(moved)
            log_q_back = torch.log_softmax(_flat(first_order_changes(path, proposal, beta) / 2, 2), dim=-1)
            forward = log_q.gather(-1, pick.unsqueeze(-1)).squeeze(-1)
            backward = log_q_back.gather(-1, (site * q + old).unsqueeze(-1)).squeeze(-1)
            log_accept = path.log_density(proposal, beta) - path.log_density(state, beta) + backward - forward
            non_finite += non_finite_share(log_accept)
            log_accept = torch.nan_to_num(log_accept, nan=-torch.inf, posinf=-torch.inf)
            prob = log_accept.clamp(max=0.0).exp()
            total += prob
            state = select_state(u[1] < prob, proposal, state)
        return state, KernelInfo(acceptance=total / self.num_proposals, non_finite=non_finite / self.num_proposals)

    def __call__(self, state: EnergyState, beta: float, generator: torch.Generator) -> EnergyState:
        return self.step(state, beta, generator)[0]
