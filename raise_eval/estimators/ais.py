"""Annealed importance sampling (Neal, 2001): an unbiased estimate of the normalizer of the path's target.

Every chain's weight w_i satisfies E[w_i] = Z_1 (the target's normalizer, with the start's normalizer Z_0 folded
in), so log Z-hat = log mean w is a stochastic lower bound on log Z_1: for an MRF an optimistic log-likelihood, for
a directed model (Z_1 = p(x)) a conservative one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.annealing import Kernel, anneal, check_log_weights, continuation
from raise_eval.schedules import validate_schedule
from raise_eval.settings import check_count
from raise_eval.stats import scalar, summarize_log_weights


@dataclass
class AISResult:
    """AIS estimate of log Z.

    log_weights: per-chain log w, float64, shaped (*batch, num_chains); exp(log_w) is unbiased for Z.
    log_normalizer: log Z-hat = log mean w over chains, shaped (*batch,).
    stderr: standard error of log Z-hat (delta method), shaped (*batch,).
    lower, upper: log(Z-hat -+ 3 SE(Z-hat)), shaped (*batch,); lower is -inf when Z-hat <= 3 SE.
    ess: effective sample size of the weights, shaped (*batch,).
    final_state: the chains' states after the last transition (approximate samples of the target).
    """

    log_weights: Tensor
    log_normalizer: Tensor
    stderr: Tensor
    lower: Tensor
    upper: Tensor
    ess: Tensor
    num_steps: int
    num_chains: int
    seconds: float
    final_state: Any = None

    @classmethod
    def from_log_weights(cls, log_weights: Tensor, num_steps: int, start: float, final_state: Any = None) -> AISResult:
        """The result whose chains have these log-weights (*batch, num_chains), timed from `start`
        (time.perf_counter()); the summaries are computed here."""
        summary = summarize_log_weights(log_weights, dim=-1)
        return cls(
            log_weights=log_weights,
            log_normalizer=summary.estimate,
            stderr=summary.stderr,
            lower=summary.lower,
            upper=summary.upper,
            ess=summary.ess,
            num_steps=num_steps,
            num_chains=log_weights.shape[-1],
            seconds=time.perf_counter() - start,  # summarize_log_weights has synchronized the device
            final_state=final_state,
        )

    @property
    def estimate(self) -> float:
        """log Z-hat as a float (scalar targets only)."""
        return scalar(self.log_normalizer)

    def to_dict(self) -> dict:
        return {
            "estimate": self.log_normalizer,
            "stderr": self.stderr,
            "interval_3sigma": [self.lower, self.upper],
            "ess": self.ess,
            "num_steps": self.num_steps,
            "num_chains": self.num_chains,
            "seconds": self.seconds,
            "log_weights": self.log_weights,
        }


def ais(
    path,
    betas: Tensor,
    num_chains: int,
    *,
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    progress: bool = False,
    checkpoint: Any = None,
) -> AISResult:
    """Estimate log Z of the path's target (beta = 1) with `num_chains` AIS chains run in one batch.

    Args:
        path: an annealing path with `sample_initial(num_chains, generator)`, `log_partition_initial`,
            `log_density_ratio` and `transition` (e.g. `BoltzmannPath`).
        betas: schedule from 0 to 1, shaped (K + 1,).
        num_chains: independent chains M.
        generator: the only source of randomness (on the model's device).
        kernel: replaces the path's default kernel.
        progress: show a progress bar.
        checkpoint: saves the annealing state as it goes and restores a saved one (`raise_eval.runtime.resume.
            ShardCheckpoint`, phase 'AIS'): a restored run continues from its saved step with the generator's saved
            state, and gives the numbers of an uninterrupted run.
    """
    betas = validate_schedule(betas)
    check_count("num_chains", num_chains)
    start = time.perf_counter()
    saved = None if checkpoint is None else checkpoint.restore("AIS", path)
    state = path.sample_initial(num_chains, generator) if saved is None else saved["state"]
    state, log_w = anneal(
        path,
        state,
        betas,
        generator=generator,
        kernel=kernel,
        progress=progress,
        desc="AIS",
        **continuation(checkpoint, "AIS", saved),
    )
    log_w = log_w + path.log_partition_initial
    check_log_weights(log_w, "AIS", chains_dim=-1)  # log Z_0 too; and an estimate of weights all zero is refused
    return AISResult.from_log_weights(log_w, betas.numel() - 1, start, final_state=state)


@dataclass
class ReverseAISResult:
    """Reverse AIS from exact samples of the target: exp(log_weights) is unbiased for Z_0 / Z_1.

    log_weights: per-chain log w, float64, shaped (*batch, num_chains).
    log_normalizer: log Z_0 - log mean w, shaped (*batch,): a stochastic *upper* bound on log Z_1.
    stderr: delta-method standard error of log mean w, shaped (*batch,), valid when the chains started from
        independent exact samples; NaN when they shared starts (`independent_starts=False`), since the chains are
        then correlated and the delta method would understate the error.
    """

    log_weights: Tensor
    log_normalizer: Tensor
    stderr: Tensor
    num_steps: int
    num_chains: int
    seconds: float
    final_state: Any = None

    def to_dict(self) -> dict:
        return {
            "upper_bound": self.log_normalizer,
            "stderr": self.stderr,
            "num_steps": self.num_steps,
            "num_chains": self.num_chains,
            "seconds": self.seconds,
        }


def reverse_ais(
    path,
    start,
    betas: Tensor,
    *,
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    progress: bool = False,
    independent_starts: bool = True,
) -> ReverseAISResult:
    """Anneal from exact samples of the target (beta = 1) down to the start (beta = 0).

    The same loop as AIS on the reversed schedule: by Neal's argument applied backwards each weight is unbiased
    for Z_0 / Z_1, so log Z_0 - log mean w is a stochastic upper bound on log Z_1 (Grosse et al., 2015, Sec. 4.2.1).

    Args:
        path: an annealing path with `log_partition_initial`.
        start: exact samples of p_1 (e.g. the latents that generated simulated data), batch (*batch, num_chains).
        betas: the forward schedule from 0 to 1 (it is run backwards), shaped (K + 1,).
        independent_starts: whether every chain started from its own independent exact sample; if not (e.g. one
            exact sample repeated over an example's chains), `stderr` is NaN.
    """
    betas = validate_schedule(betas)
    begin = time.perf_counter()
    state, log_w = anneal(
        path, start, betas.flip(0), generator=generator, kernel=kernel, progress=progress, desc="reverse AIS"
    )
    check_log_weights(log_w, "reverse AIS", chains_dim=-1)
    summary = summarize_log_weights(log_w, dim=-1)
    return ReverseAISResult(
        log_weights=log_w,
        log_normalizer=path.log_partition_initial - summary.estimate,
        stderr=summary.stderr if independent_starts else torch.full_like(summary.stderr, float("nan")),
        num_steps=betas.numel() - 1,
        num_chains=log_w.shape[-1],
        seconds=time.perf_counter() - begin,
        final_state=state,
    )
