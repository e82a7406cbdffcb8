"""Statistics of importance weights, computed in float64 and in log space."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


def log_mean_exp(log_w: Tensor, dim: int = -1) -> Tensor:
    """log(mean(exp(log_w))) along `dim`, without overflow."""
    return torch.logsumexp(log_w, dim=dim) - math.log(log_w.shape[dim])


@dataclass
class WeightSummary:
    """Summary of M importance weights w_i = exp(log_w_i) estimating Z = E[w].

    All fields have the shape of `log_w` without the summarized dimension.

    estimate: log Z-hat = log mean w.
    stderr: standard error of log Z-hat by the delta method, sd(w) / (sqrt(M) mean(w)).
    lower, upper: log(Z-hat -+ num_sigmas * SE(Z-hat)), the +-3 sigma interval of Salakhutdinov & Murray
        (2008) in log space; lower is -inf when Z-hat - 3 SE <= 0.
    ess: effective sample size (sum w)^2 / sum w^2, between 1 and M.
    """

    estimate: Tensor
    stderr: Tensor
    lower: Tensor
    upper: Tensor
    ess: Tensor
    num_samples: int


def summarize_log_weights(log_w: Tensor, dim: int = -1, num_sigmas: float = 3.0) -> WeightSummary:
    """Summarize log importance weights along `dim` (see `WeightSummary`)."""
    log_w = log_w.double()
    m = log_w.shape[dim]
    shift = log_w.amax(dim=dim, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    w = torch.exp(log_w - shift)  # max weight 1
    mean = w.mean(dim=dim)
    sd = w.std(dim=dim) if m > 1 else torch.full_like(mean, float("nan"))
    rel_se = sd / (math.sqrt(m) * mean)
    shift = shift.squeeze(dim)
    estimate = torch.log(mean) + shift
    upper = torch.log(mean + num_sigmas * sd / math.sqrt(m)) + shift
    lower_arg = mean - num_sigmas * sd / math.sqrt(m)
    lower = torch.where(lower_arg > 0, torch.log(lower_arg.clamp_min(1e-300)) + shift, torch.full_like(mean, -math.inf))
    ess = w.sum(dim=dim) ** 2 / (w**2).sum(dim=dim)
    return WeightSummary(estimate=estimate, stderr=rel_se, lower=lower, upper=upper, ess=ess, num_samples=m)


def mean_and_stderr(x: Tensor) -> tuple[float, float]:
    """Sample mean and its standard error sd / sqrt(n) of a 1-D tensor (stderr is nan for n = 1)."""
    x = x.double().flatten()
    n = x.numel()
    if n == 0:
        raise ValueError("cannot average an empty set")
    mean = x.mean().item()
    se = (x.std().item() / math.sqrt(n)) if n > 1 else float("nan")
    return mean, se


def scalar(t: torch.Tensor) -> float:
    """A 0-d tensor as a Python float."""
    return float(t.detach().cpu().double())
