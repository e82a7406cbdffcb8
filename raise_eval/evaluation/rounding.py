"""What a rounded path (`--gpu-products half-path` or `tf32-path`) changes in an evaluation, measured.

The chains of a rounded path anneal the model with its weights rounded, W~ (`kernels.split_products.path_weights`),
and the path's ends at beta = 1 are the model's own (`kernels.binary_program`). So AIS's log Z is the model's, without
bias. RAISE, from the model's own states, is unbiased for the annealing model of the rounded path, whose limit (many
steps) is the rounded model's likelihood p~(v) = f~(v) / Z~; the model's is p(v) = f(v) / Z. They differ by

    log p(v) - log p~(v) = [log f(v) - log f~(v)] - [log Z - log Z~],

which this module measures: the first term exactly for each test vector where log f(v) has a closed form (an RBM),
the second from AIS's own chains (their log-weights w hold the model's log Z; w - gap, with gap = log f - log f~ at
each chain's last state, the rounded model's: log Z - log Z~ = logsumexp(w) - logsumexp(w - gap), with the
delta method's standard error over the chains, sd(a - b) / sqrt(n) for the normalised weights a = w / mean(w) and
b = w~ / mean(w~)).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from raise_eval.kernels.binary_program import log_f_gap
from raise_eval.kernels.split_products import path_weights
from raise_eval.step_programs import ROUNDED_PATHS

# Test vectors per float64 product (rows x the widest layer's units, 8 bytes each: 4,096 x 784 = 26 MB)
_ROWS = 4096


def rounding_report(plan, ais_result) -> Optional[dict[str, Any]]:
    """The JSON's settings.gpu_rounding for a rounded path (None for other products): the weights' rounding,
    log_z_shift (log Z - log Z~, from AIS's chains; None where AIS kept no final state: several shards or a resumed
    run) and its standard error shift_stderr, gap_sd (the spread of log f - log f~ over AIS's last states, which the
    rounding adds to the log-weights), test_log_f_shift (the mean of log f(v) - log f~(v) over the test vectors,
    exact; RBMs only) and raise_shift (their difference, with the same standard error: the model's average test
    log-likelihood minus the rounded model's, how far RAISE's limit lies from the model's; None where either part
    is)."""
    products = plan.settings.gpu_products
    if products not in ROUNDED_PATHS:  # (the plan refused them for any model but a binary Boltzmann machine)
        return None
    model = plan.path.model
    exact = [w.double() for w in model.weights]
    rounded = [path_weights(products, w).double() for w in model.weights]
    biases = [None if l % 2 == 0 else b for l, b in enumerate(model.biases)]
    scale = float(model.weight_scale)
    out: dict[str, Any] = {"weights": ROUNDED_PATHS[products], "log_z_shift": None, "shift_stderr": None,
                           "gap_sd": None, "test_log_f_shift": None}  # fmt: skip
    state = None if ais_result is None else ais_result.final_state
    if state is not None:
        layers = [None if x is None else x.reshape(-1, x.shape[-1]) for x in state.layers]
        log_w = ais_result.log_weights.reshape(-1).to(torch.float64)
        gap = log_f_gap(layers, exact, rounded, biases, scale).to(log_w.device)
        n = log_w.numel()
        log_mean, log_mean_rounded = (torch.logsumexp(w, 0) - math.log(n) for w in (log_w, log_w - gap))
        out["log_z_shift"] = float(log_mean - log_mean_rounded)
        if n > 1:  # the delta method for log(mean a / mean b) of paired weights
            paired = torch.exp(log_w - log_mean) - torch.exp(log_w - gap - log_mean_rounded)
            out["shift_stderr"] = float(paired.std() / math.sqrt(n))
        out["gap_sd"] = float(gap.std()) if n > 1 else 0.0
    if plan.family == "RBM":
        test = plan.test
        gaps = [
            log_f_gap([test[i : i + _ROWS], None], exact, rounded, biases, scale) for i in range(0, len(test), _ROWS)
        ]
        out["test_log_f_shift"] = float(torch.cat(gaps).mean())
    shifts = (out["test_log_f_shift"], out["log_z_shift"])
    out["raise_shift"] = None if None in shifts else shifts[0] - shifts[1]
    return out


def rounding_note(products: str, report: dict[str, Any]) -> str:
    """The report's note on a rounded path: what AIS and RAISE estimate, and the measured shift."""
    text = (
        f"the chains annealed the model with its weights rounded to {report['weights']} ({products}): AIS's log Z is "
        "the model's own; RAISE estimates the rounded model"
    )
    if report["raise_shift"] is not None:
        error = "" if report["shift_stderr"] is None else f" ± {report['shift_stderr']:.2g}"
        return text + (
            f"; the model's average test log-likelihood is the rounded model's {report['raise_shift']:+.2g}{error} "
            "nats (measured: settings.gpu_rounding)"
        )
    why = (
        "AIS kept no final state to measure log Z - log Z~ from"
        if report["log_z_shift"] is None
        else ("log f(v) of this model has no closed form")
    )
    return text + f" (how far its log-likelihood lies from the model's is not measured: {why})"
