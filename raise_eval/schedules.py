"""Annealing schedules: inverse temperatures 0 = beta_0 <= beta_1 <= ... <= beta_K = 1, as float64 tensors.

- linear: beta_k = k / K.
- sigmoid: the BDMC paper's Sec. 6.2 schedule, beta~_k = sigmoid(delta (2k/K - 1)) rescaled to [0, 1]
  (delta = 4); it spends more steps near both ends, where a linear path is least stable.
- salakhutdinov: the piecewise-linear schedule of Salakhutdinov & Murray (2008): 500 steps of 1e-3 on [0, 0.5],
  4,000 of 1e-4 on [0.5, 0.9] and 10,000 of 1e-5 on [0.9, 1]. For other K the same proportions of the steps go
  to each piece (K = 14,500 gives exactly that grid).

The adaptive schedule of `raise-eval evaluate --schedule adaptive` depends on the model: it is chosen in a pilot
run by `raise_eval.adaptive.adaptive_schedule(path, K, generator=...)`, not by `make_schedule`.
"""

from __future__ import annotations

from typing import Union

import torch
from torch import Tensor

from raise_eval.settings import check_count

SCHEDULES = ("linear", "sigmoid", "salakhutdinov")


def linear_schedule(num_steps: int) -> Tensor:
    """beta_k = k / K for k = 0..K, shaped (K + 1,)."""
    _check_num_steps(num_steps)
    return torch.arange(num_steps + 1, dtype=torch.float64) / num_steps


def sigmoid_schedule(num_steps: int, delta: float = 4.0) -> Tensor:
    """Sigmoidal schedule of the BDMC paper (Sec. 6.2), shaped (K + 1,)."""
    _check_num_steps(num_steps)
    if not delta > 0:
        raise ValueError(f"delta must be positive, got {delta}")
    t = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
    raw = torch.sigmoid(delta * (2.0 * t - 1.0))
    betas = (raw - raw[0]) / (raw[-1] - raw[0])
    betas[0], betas[-1] = 0.0, 1.0  # exact end points despite rounding
    return betas


# Knots of Salakhutdinov & Murray's grid: (fraction of the steps, beta reached).
_SALAKHUTDINOV_KNOTS = ((0.0, 0.0), (500 / 14500, 0.5), (4500 / 14500, 0.9), (1.0, 1.0))


def salakhutdinov_schedule(num_steps: int) -> Tensor:
    """Salakhutdinov & Murray's piecewise-linear schedule with K steps, shaped (K + 1,)."""
    _check_num_steps(num_steps)
    t = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
    betas = torch.empty_like(t)
    for (t0, b0), (t1, b1) in zip(_SALAKHUTDINOV_KNOTS[:-1], _SALAKHUTDINOV_KNOTS[1:]):
        piece = (t >= t0) & (t <= t1)
        betas[piece] = b0 + (t[piece] - t0) * (b1 - b0) / (t1 - t0)
    betas[0], betas[-1] = 0.0, 1.0
    return betas


def make_schedule(name: str, num_steps: int) -> Tensor:
    """The named schedule ('linear', 'sigmoid' or 'salakhutdinov') with `num_steps` steps."""
    if name == "linear":
        return linear_schedule(num_steps)
    if name == "sigmoid":
        return sigmoid_schedule(num_steps)
    if name == "salakhutdinov":
        return salakhutdinov_schedule(num_steps)
    if name == "adaptive":
        raise ValueError(
            "the adaptive schedule needs a pilot run on the model: use "
            "raise_eval.adaptive.adaptive_schedule(path, K, generator=...) or evaluate(..., schedule='adaptive')"
        )
    raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}")


def validate_schedule(betas: Union[Tensor, list, tuple]) -> Tensor:
    """Check a schedule and return it as a float64 CPU tensor shaped (K + 1,).

    A schedule must be one-dimensional, finite, start at exactly 0, end at exactly 1 and never decrease
    (a repeated beta only adds a transition that changes no weight).
    """
    b = torch.as_tensor(betas, dtype=torch.float64).detach().cpu().flatten()
    if b.numel() < 2:
        raise ValueError(f"a schedule needs at least two inverse temperatures (0 and 1), got {b.numel()}")
    if not bool(torch.isfinite(b).all()):
        raise ValueError("the schedule contains NaN or infinite inverse temperatures")
    if b[0].item() != 0.0 or b[-1].item() != 1.0:
        raise ValueError(
            f"the schedule must run from beta = 0 to beta = 1, got {b[0].item():g} to {b[-1].item():g}; "
            "reverse annealing reverses a 0-to-1 schedule itself"
        )
    steps = b[1:] - b[:-1]
    if bool((steps < 0).any()):
        k = int(torch.nonzero(steps < 0)[0])
        raise ValueError(
            f"the schedule must be monotone (non-decreasing); it decreases at step {k + 1}: "
            f"beta_{k} = {b[k].item():g} > beta_{k + 1} = {b[k + 1].item():g}"
        )
    return b


def _check_num_steps(num_steps: int) -> None:
    check_count("num_steps", num_steps)  # K, the number of annealing steps
