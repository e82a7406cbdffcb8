"""Adaptive annealing schedules chosen in a separate pilot run (`--schedule adaptive`).

The pilot is a small sequential Monte Carlo run (AIS with resampling) along a fixed fine grid of inverse
temperatures, with its own chains and its own generator. At each grid cell [g_i, g_{i+1}] it measures the spread of
the incremental log-weight l(x) = log f_{g_{i+1}}(x) - log f_{g_i}(x) under p_{g_i},

    d_i = sd_{p_{g_i}}(l),  about sqrt(I(beta)) (g_{i+1} - g_i),

I(beta) = Var_{p_beta}(d/dbeta log f_beta) the Fisher information of the path (its thermodynamic metric). The
sum of d_i up to beta is the thermodynamic length of the path from 0 to beta. The K betas are then placed at equal
increments of that length, which is what keeps the conditional effective sample size between neighbouring
distributions constant: for a small step, the CESS of the incremental weights is about exp(-Var(l)) =
exp(-I(beta) dbeta^2), so equal sqrt(I) dbeta means equal CESS. It is also the schedule that minimizes the
variance of AIS's log-weights with perfect transitions, sum_k I(beta_k) dbeta_k^2 for K steps (Cauchy-Schwarz;
Gelman & Meng 1998, Crooks 2007). A fixed grid of a few hundred betas gives the schedule for any K at the same
cost (BlackJAX's adaptive tempered SMC instead bisects for the next beta on a CESS target, which fixes the CESS
but not K).

Why a separate pilot: a schedule chosen from the main chains' own weights depends on those weights, and AIS and
RAISE are unbiased only for a schedule fixed before the chains run (cossio/RestrictedBoltzmannMachines.jl
PR #190 makes the same point). Here the pilot has its own generator and its own copy of the path, so the main runs
use a fixed schedule and their random streams are exactly what they would be with that schedule written out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from raise_eval.contracts import GeometricPath
from raise_eval.kernels.block_gibbs import BoltzmannState
from raise_eval.schedules import _check_num_steps, linear_schedule
from raise_eval.settings import check_count

DEFAULT_PILOT_CHAINS = 200
DEFAULT_PILOT_GRID = 200
DEFAULT_UNIFORM_FRACTION = 0.05


@dataclass
class PilotResult:
    """What the pilot measured along its grid.

    grid: the pilot's inverse temperatures 0 = g_0 < ... < g_G = 1, float64, shaped (G + 1,).
    increments: d_i = sd of the incremental log-weight from g_i to g_{i+1} under p_{g_i}, float64, shaped (G,):
        the thermodynamic length of each cell.
    num_chains: pilot chains M.
    resamples: how many times the pilot resampled its chains.
    seconds: wall time of the pilot.
    """

    grid: Tensor
    increments: Tensor
    num_chains: int
    resamples: int
    seconds: float

    @property
    def length(self) -> float:
        """Thermodynamic length of the whole path, the sum of the increments: with K equal steps, each step's
        incremental log-weight has a standard deviation of about length / K."""
        return float(self.increments.sum())


def pilot_run(
    path,
    *,
    num_chains: int = DEFAULT_PILOT_CHAINS,
    grid_size: int = DEFAULT_PILOT_GRID,
    generator: torch.Generator,
    sweeps: int = 1,
    resample_threshold: float = 0.5,
) -> PilotResult:
    """Measure the thermodynamic length of each cell of a linear grid with a small SMC run.

    The chains start from exact samples of p_0; at each cell they are reweighted by the incremental weight,
    resampled (systematic resampling) when the ESS falls below `resample_threshold` x M, and moved by `sweeps`
    transitions of the path's kernel at the new beta. Resampling only serves the pilot's picture of p_beta: the
    pilot's weights are never used as estimates.

    Args:
        path: a Boltzmann-machine path (`BoltzmannPath`); the pilot runs on its own copy, so the path's caches
            are left as they were.
        num_chains: pilot chains M (at least 2).
        grid_size: cells G of the linear pilot grid.
        generator: the pilot's only source of randomness (on the model's device).
        sweeps: kernel transitions per cell.
        resample_threshold: resample when ESS < threshold x M (0 never resamples, 1 always does).
    """
    for name, value, least in (("num_chains", num_chains, 2), ("grid_size", grid_size, 1), ("sweeps", sweeps, 1)):
        check_count(name, value, least)
    if not 0 <= resample_threshold <= 1:
        raise ValueError(f"resample_threshold must be in [0, 1], got {resample_threshold}")
    if not isinstance(path, GeometricPath):
        raise TypeError(f"the adaptive pilot needs a Boltzmann-machine path (BoltzmannPath), got {type(path).__name__}")
    start = time.perf_counter()
    pilot = path.with_clamped(path.clamped)  # a fresh path object: its own caches (its states stay its own)
    grid = linear_schedule(grid_size)
    betas = grid.tolist()
    state = pilot.sample_initial(num_chains, generator)
    log_w = torch.zeros(num_chains, dtype=torch.float64, device=state.layers[0].device)
    increments = torch.empty(grid_size, dtype=torch.float64)
    resamples = 0
    for i in range(grid_size):
        increment = pilot.log_density_ratio(state, betas[i], betas[i + 1]).to(torch.float64)
        weights = torch.softmax(log_w, 0)
        mean = (weights * increment).sum()
        increments[i] = ((weights * (increment - mean) ** 2).sum()).clamp_min(0).sqrt().cpu()
        log_w = log_w + increment
        if i == grid_size - 1:
            break  # the last cell's chains are not needed
        weights = torch.softmax(log_w, 0)
        if float(1.0 / (weights**2).sum()) < resample_threshold * num_chains:
            state = _select_chains(pilot, state, _systematic_resample(weights, generator))
            log_w = torch.zeros_like(log_w)
            resamples += 1
        for _ in range(sweeps):
            state = pilot.transition(state, betas[i + 1], generator)
    if not bool(torch.isfinite(increments).all()):
        raise ValueError("the adaptive pilot met NaN or infinite log-weights; check the model's parameters")
    return PilotResult(grid, increments, num_chains, resamples, time.perf_counter() - start)


def schedule_from_increments(
    grid: Tensor, increments: Tensor, num_steps: int, *, uniform_fraction: float = DEFAULT_UNIFORM_FRACTION
) -> Tensor:
    """Place K betas at equal increments of the cumulative length along `grid` (deterministic).

    The cumulative length is linear within each grid cell. A fraction `uniform_fraction` of the length is spread
    uniformly over [0, 1] (a mixture with the linear schedule), so that every cell keeps steps, however small the
    pilot found its variance: the pilot can miss variance, e.g. a mode its few chains lost, and no region of the
    path may be skipped in one step on its word. It also makes the schedule strictly increasing; every step is at
    most 1 / (uniform_fraction K).

    Args:
        grid: 0 = g_0 < ... < g_G = 1, shaped (G + 1,).
        increments: non-negative length of each cell, shaped (G,).
        num_steps: K.
        uniform_fraction: in (0, 1]; 1 gives the linear schedule.

    Returns:
        betas, float64, shaped (K + 1,): 0 = beta_0 < ... < beta_K = 1.
    """
    _check_num_steps(num_steps)
    if not 0 < uniform_fraction <= 1:
        raise ValueError(f"uniform_fraction must be in (0, 1], got {uniform_fraction}")
    grid = torch.as_tensor(grid, dtype=torch.float64).cpu()
    d = torch.as_tensor(increments, dtype=torch.float64).cpu()
    if grid.dim() != 1 or d.shape != (grid.numel() - 1,) or grid.numel() < 2:
        raise ValueError(
            f"need a grid shaped (G + 1,) and increments shaped (G,), got {tuple(grid.shape)}, {tuple(d.shape)}"
        )
    if grid[0].item() != 0.0 or grid[-1].item() != 1.0 or bool((grid.diff() <= 0).any()):
        raise ValueError("the grid must increase strictly from 0 to 1")
    if not bool(torch.isfinite(d).all()) or bool((d < 0).any()):
        raise ValueError("the increments must be finite and non-negative")
    total = float(d.sum())
    uniform = grid.clone()
    if total > 0:
        cumulative = torch.cat([d.new_zeros(1), d.cumsum(0)]) / total
        cumulative[-1] = 1.0
        position = (1 - uniform_fraction) * cumulative + uniform_fraction * uniform
    else:
        position = uniform  # no variance anywhere: nothing to adapt to
    position[-1] = 1.0
    targets = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
    # The cell of each target: position[i] <= t < position[i + 1] (position is strictly increasing).
    cell = (torch.searchsorted(position, targets, right=True) - 1).clamp(0, grid.numel() - 2)
    lo, hi = position[cell], position[cell + 1]
    betas = grid[cell] + (targets - lo) / (hi - lo) * (grid[cell + 1] - grid[cell])
    betas[0], betas[-1] = 0.0, 1.0
    if bool((betas.diff() <= 0).any()):
        # Unreachable for any practical K (steps are at least about 1 / (K G) / max density); say so if it happens.
        raise ValueError(f"K = {num_steps} steps are too many to place strictly increasing in float64")
    return betas


def adaptive_schedule(
    path,
    num_steps: int,
    *,
    generator: torch.Generator,
    num_chains: int = DEFAULT_PILOT_CHAINS,
    grid_size: int = DEFAULT_PILOT_GRID,
    sweeps: int = 1,
    uniform_fraction: float = DEFAULT_UNIFORM_FRACTION,
) -> Tensor:
    """A K-step schedule with equal thermodynamic length per step, chosen in a pilot run (see the module docstring).

    Deterministic given the pilot's generator; the generator should be the pilot's own (e.g. seeded with
    seed + 4), never one the main runs use, or their random numbers would depend on the pilot.

    Args:
        path: a Boltzmann-machine path (`BoltzmannPath`; for a DBN, its top RBM's path).
        num_steps: K.
        generator: the pilot's only source of randomness.
        num_chains, grid_size, sweeps: the pilot's chains M, grid cells G and transitions per cell; the pilot
            costs M x G x sweeps chain-steps whatever K is.
        uniform_fraction: share of the steps spread linearly (see `schedule_from_increments`).

    Returns:
        betas, float64, shaped (K + 1,): 0 = beta_0 < ... < beta_K = 1.
    """
    return adaptive_pilot(
        path,
        num_steps,
        generator=generator,
        num_chains=num_chains,
        grid_size=grid_size,
        sweeps=sweeps,
        uniform_fraction=uniform_fraction,
    )[0]


def adaptive_pilot(
    path,
    num_steps: int,
    *,
    generator: torch.Generator,
    num_chains: int = DEFAULT_PILOT_CHAINS,
    grid_size: int = DEFAULT_PILOT_GRID,
    sweeps: int = 1,
    uniform_fraction: float = DEFAULT_UNIFORM_FRACTION,
) -> tuple[Tensor, PilotResult]:
    """`adaptive_schedule` that also returns the pilot's measurements: (betas shaped (K + 1,), PilotResult)."""
    _check_num_steps(num_steps)
    pilot = pilot_run(path, num_chains=num_chains, grid_size=grid_size, generator=generator, sweeps=sweeps)
    betas = schedule_from_increments(pilot.grid, pilot.increments, num_steps, uniform_fraction=uniform_fraction)
    return betas, pilot


def _systematic_resample(weights: Tensor, generator: torch.Generator) -> Tensor:
    """Indices of M chains drawn by systematic resampling from normalized `weights` shaped (M,)."""
    m = weights.shape[0]
    u = torch.rand((), generator=generator, device=weights.device, dtype=torch.float64)
    positions = (u + torch.arange(m, device=weights.device, dtype=torch.float64)) / m
    cumulative = weights.cumsum(0)
    return torch.searchsorted(cumulative, positions).clamp_max(m - 1)


def _select_chains(path, state: BoltzmannState, index: Tensor) -> BoltzmannState:
    """The chains `index` (shaped (M,)) of a state with batch shape (M,), odd-layer inputs recomputed."""
    if not isinstance(state, BoltzmannState):
        raise TypeError(f"the adaptive pilot resamples Boltzmann-machine states, got {type(state).__name__}")
    return path.state_from_layers([None if x is None else x.index_select(0, index) for x in state.layers])


__all__ = [
    "DEFAULT_PILOT_CHAINS",
    "DEFAULT_PILOT_GRID",
    "PilotResult",
    "adaptive_pilot",
    "adaptive_schedule",
    "pilot_run",
    "schedule_from_increments",
]
