"""BDMC's HMC transitions as a step program (`kernels.hmc.HMCProgram`), run eagerly on the CPU (programs='always'):
the same numbers as the eager loop, and forward and reverse weights unbiased at K = 1, 2, 3 on a linear-Gaussian model
with an exact p(x) (4-sigma checks, tests/statistics.py: about 6e-5 false alarms per z-score, 18 z-scores here)."""

from __future__ import annotations

import pytest
import torch
from raise_eval.models import GaussianPosterior, LinearGaussianModel

from raise_eval import DirectedPath, ais, linear_schedule, reverse_ais
from raise_eval.kernels import HMCKernel, tune_hmc
from raise_eval.step_programs import loop_options
from tests.statistics import assert_unbiased

CHAINS = 200_000


@pytest.fixture(scope="module")
def weak_lg():
    """As tests/estimators/test_bdmc.py's: loadings weak against the noise (finite fourth moments of the reverse
    weights at small K)."""
    g = torch.Generator().manual_seed(0)
    model = LinearGaussianModel(
        torch.randn(6, 2, generator=g, dtype=torch.float64) * 0.25,
        torch.randn(6, generator=g, dtype=torch.float64),
        1.0,
    )
    _, x = model.sample_joint(3, g)
    return model, x


@pytest.mark.parametrize("k", [1, 2, 3])
def test_forward_and_reverse_weights_are_unbiased(weak_lg, k):
    model, x = weak_lg
    path = DirectedPath(model, x)
    kernel = HMCKernel(path, 0.5, num_leapfrog=3)
    g = torch.Generator().manual_seed(k)
    log_p = model.log_marginal(x)
    with loop_options(programs="always"):
        forward = ais(path, linear_schedule(k), CHAINS, generator=g, kernel=kernel)
        start = path.state_from_latents(GaussianPosterior(model).sample(x, CHAINS, g))
        reverse = reverse_ais(path, start, linear_schedule(k), generator=g, kernel=kernel)
    assert_unbiased(forward.log_weights, log_p)
    assert_unbiased(reverse.log_weights, -log_p)


def test_the_program_computes_what_the_eager_loop_computes(weak_lg):
    """A fixed step size: the same draws in the same order, so the same bits; a tuned schedule: its table of step
    sizes (`StepSizeSchedule.at`) is the schedule's own lookup to rounding."""
    model, x = weak_lg
    path = DirectedPath(model, x)
    betas = linear_schedule(7)
    runs = []
    for programs in ("never", "always"):
        with loop_options(programs=programs):
            kernel = HMCKernel(path, 0.4, 3)
            runs.append(ais(path, betas, 50, generator=torch.Generator().manual_seed(4), kernel=kernel))
    assert torch.equal(runs[0].log_weights, runs[1].log_weights)
    schedule = tune_hmc(path, betas, num_chains=4, num_leapfrog=3, generator=torch.Generator().manual_seed(5))
    grid = torch.linspace(-0.1, 1.1, 29, dtype=torch.float64)
    table = schedule.at(grid)
    for row, beta in zip(table, grid.tolist()):
        assert torch.allclose(row, schedule(beta), rtol=1e-12, atol=0)
    kernel = HMCKernel(path, schedule, 3)
    assert kernel.step_sizes_at(betas, x).shape == (8, 3, 1, 1)


def test_bdmc_settings_say_how_hmc_ran():
    """The JSON's settings.loop: the eager loop on the CPU by default; the step program where programs are asked
    for everywhere (on CUDA: in CUDA graphs, the default there)."""
    from raise_eval import VAE, VAEConfig
    from raise_eval.bidirectional import evaluate_bdmc

    torch.manual_seed(0)  # parameter initialization only
    vae = VAE(VAEConfig(data_dim=6, latent_dim=2, hidden=[4]))
    small = {"num_examples": 2, "chains": 2, "steps": (3,), "iwae_samples": (1,), "elbo_samples": 2}
    assert evaluate_bdmc(vae, **small).settings["loop"] == "eager loop"
    with loop_options(programs="always"):
        assert evaluate_bdmc(vae, **small).settings["loop"] == "step program, eager"
