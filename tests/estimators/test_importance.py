"""IWAE and the ELBO against exact answers on the linear-Gaussian model."""

import pytest
import torch
from raise_eval.models import GaussianPosterior, LinearGaussianModel

from raise_eval import elbo, iwae


@pytest.fixture()
def setup():
    g = torch.Generator().manual_seed(0)
    model = LinearGaussianModel.random(8, 3, noise_std=0.5, generator=g)
    _, x = model.sample_joint(5, g)
    return model, x, g


def test_exact_posterior_proposal_gives_the_exact_answer(setup):
    """p(x, z) / p(z | x) = p(x) for every z: IWAE and the ELBO are exact, with zero variance."""
    model, x, g = setup
    q = GaussianPosterior(model)
    torch.testing.assert_close(iwae(model, x, q, 7, generator=g), model.log_marginal(x))
    torch.testing.assert_close(elbo(model, x, q, 7, generator=g), model.log_marginal(x))


def test_elbo_gap_is_the_kl_divergence(setup):
    """ELBO = log p(x) - KL(q || p(z | x)); the Monte Carlo estimate is within 4 standard errors."""
    model, x, g = setup
    q = GaussianPosterior(model, shift=0.5, scale=1.2)
    _, cov = model.posterior(x)
    d = model.latent_dim
    maha = 0.25 * float(torch.ones(d, dtype=cov.dtype) @ torch.linalg.inv(cov) @ torch.ones(d, dtype=cov.dtype))
    kl = 0.5 * (d * 1.44 + maha - d - d * torch.log(torch.tensor(1.44)).item())
    n = 20_000
    est = elbo(model, x, q, n, generator=g, chunk=5000)
    log_w = model.log_joint(x.unsqueeze(1), q.sample(x, 2000, g)) - q.log_prob(x, q.sample(x, 2000, g))
    se = log_w.std(1) / n**0.5 * 3  # generous bound on the per-example standard error
    assert ((est - (model.log_marginal(x) - kl)).abs() < 4 * se + 1e-3).all()


def test_iwae_tightens_with_k(setup):
    model, x, g = setup
    q = GaussianPosterior(model, shift=0.8, scale=1.5)
    values = [iwae(model, x, q, k, generator=g).mean().item() for k in (1, 10, 1000)]
    assert values[0] < values[1] < values[2] < model.log_marginal(x).mean().item() + 0.05
