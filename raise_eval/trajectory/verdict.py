"""The verdict on one sandwich of log Z along training (the last checkpoint of a saved run, or a tracking monitor's
model), with the conditions of a certified evaluation (`raise_eval.certification.verdict`) and the warnings of
`raise_eval.diagnostics`."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import torch
from torch import Tensor

from raise_eval.certification.verdict import verdict_reasons
from raise_eval.diagnostics import SandwichNumbers, diagnose

MODEL_WORSENED = (
    "an earlier model on the path fit the test data {drop:.2f} nats better than this one (more than the tolerance "
    "{tolerance:g}): the chains lag toward earlier models, so RAISE along this trajectory can sit above this model's "
    "log-likelihood; certify it on its own temperature path (raise-eval evaluate --until-gap)"
)


def sandwich_verdict(
    numbers: SandwichNumbers,
    *,
    log_f: Tensor,
    test: Tensor,
    log_f_method: str,
    init: str,
    tolerance: float,
    earlier_best: Optional[float] = None,
    density: bool = False,
) -> tuple[str, Optional[tuple[float, float]], list[str], list]:
    """(verdict, interval, reasons, warnings) of one sandwich: AIS's and RAISE's average log-likelihoods and AIS's log
    Z-hat in `numbers` (`diagnostics.SandwichNumbers`; its test mass and test count are computed here from log f(v)
    of the `test` vectors), the exact value or None. The interval is [min - 2σ, max + 2σ] with σ the combined
    standard error; the verdict is 'closed' when no condition fails at `tolerance`.

    `earlier_best`: the best average test log-likelihood of an earlier model on the path (exact where known, else
    AIS's). RAISE along a training trajectory bounds the annealing model, whose chains lag toward earlier models; when
    one of those fit the test data better than this model by more than `tolerance`, the annealing model can beat this
    model and RAISE can sit above its truth, so the verdict stays open (compared with this model's exact value where
    known, else AIS's, which errs high: a cautious comparison).

    `density`: the likelihood is a density (a continuous visible layer), whose sum over the test vectors bounds
    nothing: the test-mass check is then left out."""
    if density:
        numbers = replace(numbers, num_test=int(test.shape[0]))
    else:
        numbers = replace(numbers, log_test_mass=_log_test_mass(log_f, test), num_test=int(test.shape[0]))
    warnings = diagnose(
        numbers, init=init, log_f_method=log_f_method, log_f_check=None, log_f_estimated=log_f_method != "exact"
    )
    ais_mean, raise_mean, exact_mean = numbers.ais_mean, numbers.raise_mean, numbers.exact_mean
    raise_se, log_z_stderr = numbers.raise_stderr, numbers.ais_stderr
    se = raise_se if raise_se is not None and math.isfinite(raise_se) else math.inf
    noise = math.hypot(log_z_stderr, se)
    low = min(ais_mean, raise_mean) - 2 * noise
    high = max(ais_mean, raise_mean) + 2 * noise
    reasons = verdict_reasons(
        gap=ais_mean - raise_mean, noise=noise, codes={w.code for w in warnings}, exact=exact_mean,
        interval=(low, high) if math.isfinite(noise) else None, allowance=0.0, method=log_f_method,
        tolerance=tolerance,
    )  # fmt: skip
    reference = exact_mean if exact_mean is not None else ais_mean
    if earlier_best is not None and earlier_best - reference > tolerance:
        reasons = [*reasons, MODEL_WORSENED.format(drop=earlier_best - reference, tolerance=tolerance)]
    if reasons:
        return "open", None, reasons, warnings
    return "closed", (low, high), [], warnings


def _log_test_mass(log_f: Tensor, test: Tensor) -> float:
    """log sum_v f(v) over the distinct test vectors (a lower bound on log Z)."""
    rows, inverse = torch.unique(test, dim=0, return_inverse=True)
    one_each = torch.zeros(rows.shape[0], dtype=torch.long, device=inverse.device)
    one_each.scatter_(0, inverse, torch.arange(inverse.numel(), device=inverse.device))
    return float(torch.logsumexp(log_f[one_each.to(log_f.device)], 0))
