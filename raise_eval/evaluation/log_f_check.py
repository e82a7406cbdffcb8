"""Does an estimate of log f(v) still rise with a longer estimate? A check for confidently wrong log f-hat.

Both of raise-eval's estimators of f(v) (importance sampling, per-vector AIS) are unbiased for f(v), so log f-hat
errs low in expectation, by an amount that shrinks with the estimator's budget. An estimate whose proposal misses
a mode of the posterior is low by far more than its own standard error says, and its standard error cannot show
it. What does show it is a longer estimate: on a fixed random subset of the test vectors, the same estimator with
`factor` times the budget (samples for importance sampling, steps for AIS), from an independent random stream. If
the longer estimate is higher, beyond noise, on average or by more than `WORST_RISE_NATS` on some vector, the
shorter one was biased low there and the AIS log-likelihood built on it is off by about that much.

A check that passes is evidence, not proof: a mode that neither budget finds stays hidden. Where the exact value is
tractable, raise-eval uses it instead (`raise_eval.exact`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

MEAN_RISE_NATS = 0.05  # a mean rise below this is negligible next to the usual comparisons of models
WORST_RISE_NATS = 1.0  # one vector whose estimate rose by a nat: the estimator misses modes there
SIGMAS = 3.0
LOG_F_CHECK_FACTOR = 4  # evaluate's check: the same estimator with 4 times the samples or steps


@dataclass
class LogFCheck:
    """The rise of log f-hat(v) when the estimate is made `factor` times longer, on `num_vectors` test vectors.

    rise: per checked vector, longer minus main estimate (nats), shaped (m,).
    indices: the checked test vectors' indices, shaped (m,).
    """

    rise: Tensor
    indices: Tensor
    factor: int
    method: str
    budget: int  # the longer estimate's samples (importance) or steps (AIS)
    seconds: float

    @property
    def num_vectors(self) -> int:
        return int(self.rise.shape[0])

    @property
    def mean_rise(self) -> float:
        return float(self.rise.mean())

    @property
    def mean_rise_stderr(self) -> float:
        m = self.num_vectors
        return float(self.rise.std() / math.sqrt(m)) if m > 1 else math.nan

    @property
    def worst_rise(self) -> float:
        return float(self.rise.max())

    @property
    def quantile_95(self) -> float:
        return float(torch.quantile(self.rise, 0.95))

    @property
    def biased(self) -> bool:
        """The longer estimate rose beyond noise on average, or by more than WORST_RISE_NATS on some vector."""
        se = self.mean_rise_stderr if math.isfinite(self.mean_rise_stderr) else 0.0
        on_average = self.mean_rise > max(MEAN_RISE_NATS, SIGMAS * se)
        return on_average or self.worst_rise > WORST_RISE_NATS

    def describe(self) -> str:
        what = "samples" if self.method == "importance" else "steps"
        how = (
            f"importance sampling ({self.budget} samples) against the mean-field bound"
            if self.factor == 1
            else f"a {self.factor}x longer estimate ({self.budget} {what})"
        )
        return (
            f"{how} on {self.num_vectors} test vectors rose by "
            f"{self.mean_rise:.3f} ± {self.mean_rise_stderr:.3f} nats on average, {self.quantile_95:.3f} at the 95th "
            f"percentile, {self.worst_rise:.3f} at worst"
        )

    def to_dict(self) -> dict:
        return {
            "num_vectors": self.num_vectors,
            "factor": self.factor,
            "method": self.method,
            "budget": self.budget,
            "mean_rise": self.mean_rise,
            "mean_rise_stderr": self.mean_rise_stderr,
            "quantile_95_rise": self.quantile_95,
            "worst_rise": self.worst_rise,
            "worst_index": int(self.indices[int(self.rise.argmax())]),
            "biased": self.biased,
            "seconds": self.seconds,
        }


def check_subset(num_test: int, num_vectors: int, seed: int) -> Tensor:
    """The checked test vectors: a fixed random subset (its own stream), sorted, shaped (min(num_vectors, N),)."""
    if num_vectors >= num_test:
        return torch.arange(num_test)
    return torch.randperm(num_test, generator=torch.Generator().manual_seed(seed))[:num_vectors].sort().values


def check_log_f(
    estimate_fn,
    test: Tensor,
    main: Tensor,
    *,
    indices: Tensor,
    method: str,
    budget: int,
    factor: int,
    seconds: Optional[float] = None,
) -> LogFCheck:
    """Compare the main estimates `main` (N,) with `estimate_fn(test[indices])` (the longer estimator, run by the
    caller with its own generator), shaped (m,)."""
    import time

    start = time.perf_counter()
    longer = estimate_fn(test[indices.to(test.device)]).to(main.device)
    rise = (longer.double() - main[indices.to(main.device)].double()).cpu()
    return LogFCheck(
        rise=rise,
        indices=indices.cpu(),
        factor=factor,
        method=method,
        budget=budget,
        seconds=time.perf_counter() - start if seconds is None else seconds,
    )
