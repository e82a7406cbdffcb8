"""The annealing loop shared by every estimator: AIS, RAISE and both directions of BDMC.

A path supplies log-density ratios between inverse temperatures; a kernel (state, beta, generator) -> state
leaves the beta-distribution invariant and must be reversible (detailed balance), so that running the same loop
on the reversed schedule is the exact reversal of the forward chain. One loop serves all directions:

    for j = 0 .. K-1:   x <- T_{beta_j}(x);   log w += log f_{beta_{j+1}}(x) - log f_{beta_j}(x)

Forward AIS starts from an exact sample of p_0 (its first transition then changes nothing in distribution); RAISE
and reverse AIS run the reversed schedule from their own start. This is the convention of the RAISE derivation
with the index slip of the paper's Algorithm 2 fixed: the state x_k is drawn with the operator of p_{k+1}
(reversible, so equal to its reversal) and weighted by f_k(x_k) / f_{k+1}(x_k).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, TypeVar

import torch
from torch import Tensor
from tqdm.auto import tqdm

S = TypeVar("S")

Kernel = Callable[[Any, float, torch.Generator], Any]
"""A transition (state, beta, generator) -> state that leaves p_beta invariant and satisfies detailed balance."""


class AnnealingPath(Protocol[S]):
    """A family of unnormalized densities f_beta, beta in [0, 1], over states with batch dimensions."""

    def log_density_ratio(self, state: S, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(x) - log f_{beta_from}(x), shaped like the state's batch dimensions."""
        ...

    def transition(self, state: S, beta: float, generator: torch.Generator) -> S:
        """The path's default kernel at `beta`."""
        ...


# Optionally a path also offers `transition_(state, beta, generator)`, the default kernel writing into `state`'s
# own tensors, and `clone_state(state)`; `anneal` then updates a private copy of the start in place.


def anneal(
    path: AnnealingPath[S],
    state: S,
    betas: Tensor,
    *,
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    progress: bool = False,
    desc: str = "annealing",
    log_weights: Optional[Tensor] = None,
) -> tuple[S, Tensor]:
    """Run the annealing chain from `state` through `betas` (beta_0 .. beta_K, in the order given).

    Args:
        path: supplies `log_density_ratio` (and the default kernel, `path.transition`).
        state: the start, with batch dimensions B (not modified).
        betas: the schedule in the direction to run (reversed for RAISE and reverse AIS), shaped (K + 1,).
        generator: the only source of randomness.
        kernel: replaces `path.transition` (the start state is then never modified).
        progress: show a tqdm progress bar.
        log_weights: float64 log-weights shaped B to accumulate into (zeros when None).

    Returns:
        (final state, log-weights), the log-weights in float64 shaped B:
        sum_j log f_{beta_{j+1}}(x_j) - log f_{beta_j}(x_j), x_j the state after the j-th transition.
    """
    if kernel is None and hasattr(path, "transition_"):
        # The loop owns a copy of the start and updates it in place: no multi-megabyte allocation per step.
        state = path.clone_state(state)
        step = path.transition_
    else:
        step = path.transition if kernel is None else kernel
    beta_list = [float(b) for b in betas]  # Python floats: no device sync per step
    bar = tqdm(total=len(beta_list) - 1, desc=desc, disable=not progress, leave=False, mininterval=0.5)
    try:
        for beta_from, beta_to in zip(beta_list[:-1], beta_list[1:]):
            state = step(state, beta_from, generator)
            increment = path.log_density_ratio(state, beta_from, beta_to)
            if log_weights is None:
                log_weights = increment.to(torch.float64)
            else:
                log_weights.add_(increment)  # float64 accumulator
            bar.update(1)
    finally:
        bar.close()
    return state, log_weights
