"""RAISE on a real support, against an annealing model computed without the code under test.

In one dimension MALA's transition density has a closed form: from x the half-kicked momentum is
N(m g(x) / 2, 1) (m the move per unit momentum, g the gradient of log f_beta), the proposal is x + m p folded into the
box, and each image z of a point y in R (y + 2k w and 2k w - y on a box of width w, the second reflected an odd number
of times, so its momentum flips) contributes phi((z - x) / m - m g(x) / 2) / m times its acceptance probability. On
a fine grid of the box (midpoint rule) the annealing model p_ann = p_0 T_1 ... T_K (RAISE's transitions at betas[1..K],
as `exact.energy.annealing_model_marginal` orders them for discrete sites) is then a few matrix products, the
rejection mass kept on the diagonal. Its quadrature error (checked by its total mass) is far below the statistical
tolerance (tests/statistics.py: 4 standard errors, a false alarm about 6e-5 per test point; seeds fixed).

These check the reflection at the walls, the momentum flip, the acceptance at each beta and RAISE's start weight
f(v) / Z_0 with the box-truncated base's normalization, none of which the discrete tests reach.
"""

from __future__ import annotations

import math

import pytest
import torch
from raise_eval.models import EnergyModel, GaussianBase

from raise_eval import raise_log_likelihood
from raise_eval.kernels.energy_hmc import MALAKernel
from raise_eval.paths.energy import EnergyPath
from tests.statistics import assert_unbiased

LOW, HIGH = 0.0, 1.0
CENTRE, WIDTH = 0.85, 0.25  # the energy's well, near the upper wall
BASE_MEAN, BASE_STD = 0.4, 0.3
CELLS = 1000
CHAINS = 20_000


def _log_f(x: torch.Tensor) -> torch.Tensor:
    """log f = -E: a quadratic well plus a ripple (not a Gaussian, so nothing cancels in closed form)."""
    return -((x - CENTRE) ** 2) / (2 * WIDTH**2) + 0.3 * torch.sin(7 * x)


def _grad_log_f(x: torch.Tensor) -> torch.Tensor:
    return -(x - CENTRE) / WIDTH**2 + 2.1 * torch.cos(7 * x)


def _log_base(x: torch.Tensor) -> torch.Tensor:
    """The base N(BASE_MEAN, BASE_STD^2) truncated to the box, normalized here from the error function."""
    mass = 0.5 * (
        math.erf((HIGH - BASE_MEAN) / (BASE_STD * math.sqrt(2)))
        - math.erf((LOW - BASE_MEAN) / (BASE_STD * math.sqrt(2)))
    )
    z = (x - BASE_MEAN) / BASE_STD
    return -0.5 * z**2 - math.log(BASE_STD * math.sqrt(2 * math.pi) * mass)


def _grad_log_base(x: torch.Tensor) -> torch.Tensor:
    return -(x - BASE_MEAN) / BASE_STD**2


def _mala_matrix(y: torch.Tensor, beta: float, move: float, cell: float) -> torch.Tensor:
    """T[i, j]: MALA's transition at beta from y[i] to y[j] times the cell width, the rejection mass on the
    diagonal; y: the grid's midpoints."""
    log_fb = (1 - beta) * _log_base(y) + beta * _log_f(y)
    grad = (1 - beta) * _grad_log_base(y) + beta * _grad_log_f(y)
    x, target = y.unsqueeze(1), y.unsqueeze(0)
    half_kick = 0.5 * move * grad.unsqueeze(1)  # the mean of the half-kicked momentum
    width = HIGH - LOW
    total = torch.zeros(y.numel(), y.numel(), dtype=torch.float64)
    for k in range(-3, 4):
        for image, sign in ((LOW + (target - LOW) + 2 * k * width, 1.0), (LOW - (target - LOW) + 2 * k * width, -1.0)):
            p_half = (image - x) / move
            density = torch.exp(-0.5 * (p_half - half_kick) ** 2) / math.sqrt(2 * math.pi) / move
            p_start = p_half - half_kick
            p_end = sign * p_half + 0.5 * move * grad.unsqueeze(0)
            log_accept = (log_fb.unsqueeze(0) - 0.5 * p_end**2) - (log_fb.unsqueeze(1) - 0.5 * p_start**2)
            total += density * log_accept.clamp(max=0.0).exp() * cell
    total += torch.diag(1 - total.sum(1))
    return total


def _log_annealing_model(betas: torch.Tensor, move: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(grid midpoints, log p_ann on them, p_ann's total mass by the midpoint rule)."""
    cell = (HIGH - LOW) / CELLS
    y = LOW + cell * (torch.arange(CELLS, dtype=torch.float64) + 0.5)
    p = _log_base(y).exp() * cell  # probabilities of the cells
    for beta in betas.tolist()[1:]:
        p = p @ _mala_matrix(y, beta, move, cell)
    return y, (p / cell).log(), float(p.sum())


class _Energy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return -_log_f(x[:, 0])


@pytest.mark.parametrize("k", [1, 2])
def test_raise_with_mala_reflected_at_a_box_s_walls_is_unbiased_for_the_annealing_model(k):
    model = EnergyModel(_Energy(), support=("real", LOW, HIGH), event_shape=(1,), dtype=torch.float64)
    base = GaussianBase(torch.tensor([BASE_MEAN], dtype=torch.float64), torch.tensor([BASE_STD], dtype=torch.float64),
                        LOW, HIGH)  # fmt: skip
    path = EnergyPath(model, base)
    step_size = 1.5  # moves of 0.45: a third of the proposals from near the upper wall are reflected
    betas = torch.linspace(0, 1, k + 1, dtype=torch.float64)
    y, log_p_ann, mass = _log_annealing_model(betas, step_size * BASE_STD)
    assert abs(mass - 1) < 1e-6  # the quadrature keeps p_ann a distribution
    picks = [50, 500, 850, 995]  # grid midpoints: near the lower wall, inside, in the well, at the upper wall
    v = y[picks].unsqueeze(1)
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(40 + k),
                                  kernel=MALAKernel(path, step_size))  # fmt: skip
    assert_unbiased(result.log_weights, log_p_ann[picks])
