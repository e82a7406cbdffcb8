"""Control variates for a test-set average from a subset (RAISE paper, Sec. 4, eq. 14).

RAISE costs a run per test vector, so it runs on a random subset S of n of the N test vectors. With Y_i the RAISE
estimate and X_i a cheap, correlated quantity known for every test vector (log f(v), exact for RBMs, estimated by
importance sampling for DBMs and DBNs),

    mean_S(Y - alpha X) + alpha mean_all(X)

is unbiased for the test-set average of E[Y] for any fixed alpha, whatever the noise in X, as long as the X of the
subset are the same numbers as in the full average (and independent of Y's randomness). Its standard error is
reported as sd_S(Y - alpha X) / sqrt(n). That counts each Y's Monte Carlo noise and the noise of the subset's X;
it leaves out the finite-population correction sqrt(1 - n/N), so it slightly overstates the error (and much
overstates it when S is the whole set).

(The paper's variance formula for eq. 14 divides the covariance term by n where N is right: with Y independent of
X, unit variances and alpha = 1 the variance is 2/n - 1/N. The standard error here does not use that formula.)

alpha = 1 is the paper's choice (Y and X differ mainly by log Z). The variance-optimal alpha = Cov(Y, X) / Var(X) is
estimated on the subset, which makes the estimate biased by O(1/n); the report says which alpha was used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import torch
from torch import Tensor

from raise_eval.annealing import check_finite
from raise_eval.stats import mean_and_stderr

# Why log f(v) is not finite where the parameters are: what the stops on it say.
OVERFLOW_HINT = (
    "the model's energies overflow its dtype (weights or biases too large?): check the parameters, or evaluate in "
    "float64"
)


@dataclass
class ControlVariateEstimate:
    """A test-set average estimated from a subset, with and without the control variate.

    mean, stderr: the control-variate estimate (eq. 14) and its standard error.
    alpha: the coefficient used; alpha_rule: 'fixed' or 'optimal' (estimated on the subset).
    subset_mean, subset_stderr: the plain average of Y over the subset and its standard error.
    num_subset, num_all: n and N.
    """

    mean: float
    stderr: float
    alpha: float
    alpha_rule: str
    subset_mean: float
    subset_stderr: float
    num_subset: int
    num_all: int

    @property
    def variance_ratio(self) -> float:
        """(plain standard error / control-variate standard error)^2: how many times fewer test vectors the
        control variate needs for the same precision."""
        return (self.subset_stderr / self.stderr) ** 2 if self.stderr > 0 else math.inf

    def to_dict(self) -> dict:
        return {
            "mean": self.mean,
            "stderr": self.stderr,
            "alpha": self.alpha,
            "alpha_rule": self.alpha_rule,
            "subset_mean": self.subset_mean,
            "subset_stderr": self.subset_stderr,
            "num_subset": self.num_subset,
            "num_all": self.num_all,
        }


def control_variate_mean(
    y: Tensor, x_subset: Tensor, x_all: Tensor, alpha: Union[float, str] = 1.0
) -> ControlVariateEstimate:
    """Estimate mean_all(E[Y]) from Y on a subset with the control variate X (see the module docstring).

    Args:
        y: Y_i on the subset, shaped (n,).
        x_subset: X_i on the subset, shaped (n,), the same values as the subset's entries of `x_all`.
        x_all: X_i on every test vector, shaped (N,).
        alpha: a number, or 'optimal' (Cov(Y, X) / Var(X) on the subset; 1 when n < 3 or X is constant).
    """
    y, x_subset, x_all = (t.detach().double().flatten().cpu() for t in (y, x_subset, x_all))
    if y.numel() != x_subset.numel():
        raise ValueError(f"Y has {y.numel()} entries but the subset's X has {x_subset.numel()}")
    if x_all.numel() < y.numel():
        raise ValueError(f"the full set ({x_all.numel()} entries) is smaller than the subset ({y.numel()})")
    # a stop that keeps what finished (evaluate, certify), naming the stage, never a number in a table
    check_finite(torch.cat([x_subset, x_all]), "RAISE's control variate", "log f(v), the control variate X",
                 OVERFLOW_HINT)  # fmt: skip
    if isinstance(alpha, str):
        if alpha != "optimal":
            raise ValueError(f"alpha must be a number or 'optimal', got {alpha!r}")
        rule = "optimal"
        xc = x_subset - x_subset.mean()
        var_x = float((xc * xc).sum())
        alpha = float((xc * (y - y.mean())).sum()) / var_x if y.numel() >= 3 and var_x > 0 else 1.0
    else:
        rule, alpha = "fixed", float(alpha)
    diff_mean, diff_se = mean_and_stderr(y - alpha * x_subset)
    plain_mean, plain_se = mean_and_stderr(y)
    return ControlVariateEstimate(
        mean=diff_mean + alpha * float(x_all.mean()),
        stderr=diff_se,
        alpha=alpha,
        alpha_rule=rule,
        subset_mean=plain_mean,
        subset_stderr=plain_se,
        num_subset=int(y.numel()),
        num_all=int(x_all.numel()),
    )
