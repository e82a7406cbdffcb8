"""HMC leaves a known Gaussian invariant; step-size schedules and the pilot tuner behave as documented."""

import math

import pytest
import torch
from raise_eval.models import LinearGaussianModel

from raise_eval import DirectedPath, linear_schedule
from raise_eval.kernels import HMCKernel, StepSizeSchedule, tune_hmc
from raise_eval.kernels.hmc import hmc_step

CHAINS = 100_000


def _tempered_posterior(model, x, beta):
    """Exact p_beta(z | x) ∝ N(z; 0, I) N(x; W z + b, sigma^2 I)^beta: mean (N, d), covariance (d, d)."""
    eye = torch.eye(model.latent_dim, dtype=torch.float64)
    cov = torch.linalg.inv(eye + beta * model.W.t() @ model.W / model.noise_std**2)
    mean = (beta * (x - model.b) @ model.W / model.noise_std**2) @ cov
    return mean, cov


def _run_from_exact(kernel_fn, beta, steps=3):
    g = torch.Generator().manual_seed(0)
    model = LinearGaussianModel.random(6, 3, noise_std=0.5, generator=g)
    _, x = model.sample_joint(2, g)
    mean, cov = _tempered_posterior(model, x, beta)
    z = mean.unsqueeze(1) + torch.randn(2, CHAINS, 3, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).t()
    path = DirectedPath(model, x)
    state = path.state_from_latents(z)
    for _ in range(steps):
        state = kernel_fn(path, state, beta, g)
    return state.z, mean, cov


def _moment_z_scores(z, mean, cov):
    """z-scores of the sample means and of the sample second moments of each coordinate (exact standard errors
    for Gaussian data: Var(z_i) = C_ii, Var(z_i z_j) = C_ii C_jj + C_ij^2 for centred coordinates)."""
    n = z.shape[1]
    centred = z - mean.unsqueeze(1)
    z_mean = centred.mean(1) / (torch.diagonal(cov).sqrt() / math.sqrt(n))
    second = torch.einsum("nci,ncj->nij", centred, centred) / n
    var = (torch.diagonal(cov).unsqueeze(1) * torch.diagonal(cov).unsqueeze(0) + cov**2) / n
    z_cov = (second - cov) / var.sqrt()
    return torch.cat([z_mean.flatten(), z_cov.flatten()])


def test_hmc_leaves_the_tempered_posterior_invariant():
    """Statistical: from exact samples of a correlated 3-D Gaussian, three HMC transitions with per-chain random
    step sizes (0.05 to 0.8) keep every first and second moment within 4.5 standard errors (24 z-scores: family
    false-alarm rate about 2e-4 for a correct kernel; fixed seed)."""
    eps = torch.rand(2, CHAINS, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 0.75 + 0.05

    def kernel(path, state, beta, g):
        return hmc_step(path, state, beta, eps, 5, g)

    z, mean, cov = _run_from_exact(kernel, beta=0.7)
    assert _moment_z_scores(z, mean, cov).abs().max() < 4.5


def test_hmc_without_metropolis_correction_is_detected():
    """Power check: the same leapfrog moves always accepted (no correction) distort the Gaussian visibly."""

    def uncorrected(path, state, beta, g):
        p = torch.randn(state.z.shape, generator=g, dtype=state.z.dtype)
        z = state.z + 0.8 * (p + 0.4 * path.grad_log_density(state, beta))  # one leapfrog step, accepted
        return path.state_from_latents(z)

    z, mean, cov = _run_from_exact(uncorrected, beta=0.7)
    assert _moment_z_scores(z, mean, cov).abs().max() > 10


def test_step_size_schedule_interpolates_in_log_space():
    s = StepSizeSchedule(
        torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64),
        torch.log(torch.tensor([0.1, 0.4, 0.2], dtype=torch.float64)),
    )
    assert s(0.0).item() == pytest.approx(0.1)
    assert s(0.25).item() == pytest.approx(0.2)  # geometric mean of 0.1 and 0.4
    assert s(1.0).item() == pytest.approx(0.2)
    assert StepSizeSchedule.constant(0.3)(0.7).item() == pytest.approx(0.3)


def test_pilot_tuning_reaches_the_target_acceptance():
    g = torch.Generator().manual_seed(2)
    model = LinearGaussianModel.random(10, 4, noise_std=0.3, generator=g)
    _, x = model.sample_joint(3, g)
    path = DirectedPath(model, x)
    betas = linear_schedule(200)
    schedule = tune_hmc(path, betas, num_chains=8, num_leapfrog=5, target_accept=0.65, generator=g)
    assert schedule.log_step_sizes.shape == (201, 3, 1, 1)
    assert schedule(1.0).squeeze().lt(schedule(0.0).squeeze()).all()  # the posterior is narrower than the prior
    kernel = HMCKernel(path, schedule, num_leapfrog=5)
    state = path.sample_initial(200, g)
    rates = []
    for beta in betas.tolist():
        state = kernel(state, beta, g)
        rates.append(kernel.last_accept_prob.mean().item())
    assert 0.45 < sum(rates[-50:]) / 50 < 0.9
