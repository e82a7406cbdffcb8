"""The state of chains on an energy model's path (`raise_eval.paths.energy`): what its kernels (HMC, MALA, the
Metropolis scan, Gibbs with gradients) take and return, kept below both so that the path can choose a kernel and the
kernels need no path module.

The state carries log f(x) of the target (beta = 1) and, once a kernel has needed it, its gradient with respect to
the energy's input: a transition then costs exactly its own energy evaluations (HMC: one forward and backward pass
per leapfrog step), and the weight update (beta' - beta)(log f(x) - log f_base(x)) costs no energy evaluation."""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor


class EnergyState(NamedTuple):
    """Chains' states with batch dimensions B.

    x: real support: floats (*B, *event_shape) in the model's dtype; discrete: int64 codes (*B, *event_shape).
    log_f: log f(x) = -E(x), float64 (*B,).
    grad: the gradient of log f with respect to the energy's input (*B, *input_shape), or None (not computed).
    """

    x: Tensor
    log_f: Tensor
    grad: Optional[Tensor] = None


def select_state(accept: Tensor, new: EnergyState, old: EnergyState) -> EnergyState:
    """Per chain, `new` where `accept` (*B,) is true, else `old` (a gradient kept only where both have one)."""

    def pick(a: Tensor, b: Tensor) -> Tensor:
        mask = accept.reshape(accept.shape + (1,) * (a.dim() - accept.dim()))
        return torch.where(mask, a, b)

    grad = None if new.grad is None or old.grad is None else pick(new.grad, old.grad)
    return EnergyState(pick(new.x, old.x), pick(new.log_f, old.log_f), grad)


def batch_sum(values: Tensor, event_dims: int) -> Tensor:
    """Sum over the last `event_dims` dimensions: (*B, *event) -> (*B,)."""
    return values.flatten(start_dim=values.dim() - event_dims).sum(-1) if event_dims else values


def non_finite_share(log_accept: Tensor) -> Tensor:
    """1.0 where a proposal's log acceptance probability is NaN or +inf, else 0.0, float64 shaped like log_accept
    (*B,): the energy was NaN (or -inf) at the proposal, or the trajectory overflowed. The kernels reject such
    proposals, which treats those points as having zero density; their info's 'non_finite' counts them, so that a
    report can say so rather than stay silent."""
    return (torch.isnan(log_accept) | (log_accept == math.inf)).double()
