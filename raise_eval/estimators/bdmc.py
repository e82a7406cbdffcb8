"""Bidirectional Monte Carlo (Grosse, Ghahramani & Adams, 2015) and BREAD (Grosse, Ancha & Roy, 2016).

On data simulated from the model, the latents that generated each example are an exact posterior sample. Forward
AIS from the prior gives a stochastic lower bound on log p(x); reverse AIS from the exact sample a stochastic upper
bound. Together they sandwich the true log marginal likelihood.

BREAD: for single chains, E[log w_fwd] = log p(x) - KL(q_fwd || q_rev) and E[-log w_rev] = log p(x) +
KL(q_rev || q_fwd), so the expected gap E[-log w_rev] - E[log w_fwd] is the Jeffreys divergence between the
forward and reverse chains, which upper-bounds the Jeffreys divergence between the distribution of AIS's
approximate posterior samples and the true posterior (BREAD, Sec. 3.1). We report it per example, estimated by
the per-chain means of the log-weights (not their log-mean-exp, which gives the tighter sandwich).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from raise_eval.annealing import Kernel
from raise_eval.estimators.ais import ais, reverse_ais
from raise_eval.stats import mean_and_stderr


@dataclass
class BDMCResult:
    """Sandwich of log p(x) for N simulated examples.

    lower, upper: per-example stochastic lower and upper bounds, shaped (N,).
    jeffreys_bound: per-example BREAD estimate mean_c(-log w_rev) - mean_c(log w_fwd), shaped (N,); in expectation
        an upper bound on the Jeffreys divergence between AIS's approximate posterior and the true posterior.
    forward_log_weights, reverse_log_weights: per-chain log-weights, float64, shaped (N, C).
    """

    lower: Tensor
    upper: Tensor
    jeffreys_bound: Tensor
    forward_log_weights: Tensor
    reverse_log_weights: Tensor
    num_steps: int
    num_chains: int
    seconds: float

    @property
    def gap(self) -> Tensor:
        """upper - lower per example, shaped (N,)."""
        return self.upper - self.lower

    def summary(self) -> dict:
        """Averages over examples with standard errors."""
        out = {}
        for name, values in (
            ("lower", self.lower),
            ("upper", self.upper),
            ("gap", self.gap),
            ("jeffreys_bound", self.jeffreys_bound),
        ):
            mean, se = mean_and_stderr(values)
            out[name] = {"mean": mean, "stderr": se}
        return out

    def to_dict(self) -> dict:
        return {
            **self.summary(),
            "num_steps": self.num_steps,
            "num_chains": self.num_chains,
            "num_examples": int(self.lower.shape[0]),
            "seconds": self.seconds,
            "per_example": {"lower": self.lower, "upper": self.upper},
        }


def bdmc(
    path,
    exact_state,
    betas: Tensor,
    num_chains: int,
    *,
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    progress: bool = False,
) -> BDMCResult:
    """Forward and reverse AIS on the same path and schedule.

    Args:
        path: annealing path over N examples (e.g. `DirectedPath(model, x)`) whose target normalizers are p(x_n).
        exact_state: exact samples of each example's posterior, batch (N, C) (one exact sample repeated over the C
            reverse chains is fine: each chain's weight is still unbiased for 1/p(x); the reverse chains are then
            not independent, so the result reports standard errors over examples only).
        betas: schedule from 0 to 1.
        num_chains: forward chains per example.
        kernel: transition used in both directions (must be reversible and fixed before the run).
    """
    start = time.perf_counter()
    forward = ais(path, betas, num_chains, generator=generator, kernel=kernel, progress=progress)
    reverse = reverse_ais(
        path, exact_state, betas, generator=generator, kernel=kernel, progress=progress, independent_starts=False
    )
    # Forward weights estimate Z_1 (log Z_0 is folded in); reverse weights estimate Z_0 / Z_1. Both chains' bounds
    # on log Z_1 are therefore log w_fwd and log Z_0 - log w_rev: without log Z_0 the bound would be shifted by it
    # whenever the start is unnormalized (e.g. a Boltzmann path from the uniform base).
    jeffreys = (path.log_partition_initial - reverse.log_weights).mean(-1) - forward.log_weights.mean(-1)
    return BDMCResult(
        lower=forward.log_normalizer,
        upper=reverse.log_normalizer,
        jeffreys_bound=jeffreys,
        forward_log_weights=forward.log_weights,
        reverse_log_weights=reverse.log_weights,
        num_steps=forward.num_steps,
        num_chains=num_chains,
        seconds=time.perf_counter() - start,
    )
