"""The state of chains on a directed model's path (`raise_eval.paths.directed`): what its kernels (single-site Gibbs,
HMC) take and return, kept below both so that the path can choose a kernel and the kernels need no path module."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor


class DirectedState(NamedTuple):
    """Latents and cached values, batch dimensions (N, C) (examples, chains).

    z: (N, C, latent_dim); log_prior, log_likelihood: (N, C);
    grad_log_prior, grad_log_likelihood: (N, C, latent_dim) for continuous latents, else None;
    data_logits: (N, C, data_dim) for models with logits linear in z (sigmoid belief nets), else None.
    """

    z: Tensor
    log_prior: Tensor
    log_likelihood: Tensor
    grad_log_prior: Optional[Tensor] = None
    grad_log_likelihood: Optional[Tensor] = None
    data_logits: Optional[Tensor] = None


def select_state(accept: Tensor, new: DirectedState, old: DirectedState) -> DirectedState:
    """Per chain, `new` where accept (N, C) is true, else `old`."""

    def pick(a, b):
        if a is None:
            return None
        mask = accept.reshape(accept.shape + (1,) * (a.dim() - accept.dim()))
        return torch.where(mask, a, b)

    return DirectedState(*(pick(a, b) for a, b in zip(new, old)))
