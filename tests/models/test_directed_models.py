"""Exact identities of the directed models (linear-Gaussian, sigmoid belief net, VAE)."""

import itertools
import math

import pytest
import torch
from raise_eval.models import VAE, GaussianPosterior, LinearGaussianModel, SigmoidBeliefNet, VAEConfig
from raise_eval.models.directed.base import DirectedLatentModel


@pytest.fixture()
def lg():
    return LinearGaussianModel.random(5, 3, noise_std=0.6, generator=torch.Generator().manual_seed(0))


def test_linear_gaussian_bayes_rule_holds_exactly(lg):
    """log p(z) + log p(x | z) - log p(x) equals the closed-form posterior log density for any z."""
    g = torch.Generator().manual_seed(1)
    z0, x = lg.sample_joint(4, g)
    z = torch.randn(4, 7, 3, generator=g, dtype=torch.float64)
    lhs = lg.log_prior(z) + lg.log_likelihood(x.unsqueeze(1), z) - lg.log_marginal(x).unsqueeze(1)
    rhs = GaussianPosterior(lg).log_prob(x, z)
    torch.testing.assert_close(lhs, rhs, rtol=0, atol=1e-10)


def test_analytic_gradients_match_autograd(lg):
    g = torch.Generator().manual_seed(2)
    z, x = lg.sample_joint(3, g)
    z = z + 0.3
    value, grad = lg.log_likelihood_and_grad(x, z)
    auto_value, auto_grad = DirectedLatentModel.log_likelihood_and_grad(lg, x, z)
    torch.testing.assert_close(value, auto_value)
    torch.testing.assert_close(grad, auto_grad)
    torch.testing.assert_close(lg.log_prior_and_grad(z)[1], DirectedLatentModel.log_prior_and_grad(lg, z)[1])


def test_symmetric_kl_formula(lg):
    q = GaussianPosterior(lg, shift=0.4, scale=1.3)
    _, cov = lg.posterior(torch.zeros(5, dtype=torch.float64))
    x = torch.zeros(1, 5, dtype=torch.float64)
    mean, _ = lg.posterior(x)
    p_dist = torch.distributions.MultivariateNormal(mean[0], covariance_matrix=cov)
    q_dist = torch.distributions.MultivariateNormal(mean[0] + 0.4, covariance_matrix=1.69 * cov)
    expected = torch.distributions.kl_divergence(q_dist, p_dist) + torch.distributions.kl_divergence(p_dist, q_dist)
    assert q.symmetric_kl_to_posterior() == pytest.approx(expected.item(), rel=1e-10)
    assert GaussianPosterior(lg).symmetric_kl_to_posterior() == pytest.approx(0.0, abs=1e-12)


def test_sbn_marginal_matches_brute_force():
    g = torch.Generator().manual_seed(3)
    sbn = SigmoidBeliefNet.random(6, 4, generator=g)
    _, x = sbn.sample_joint(5, g)
    terms = []
    for bits in itertools.product([0.0, 1.0], repeat=4):
        z = torch.tensor(bits, dtype=torch.float64)
        terms.append(sbn.log_prior(z) + sbn.log_likelihood(x, z))
    torch.testing.assert_close(sbn.log_marginal(x), torch.logsumexp(torch.stack(terms), 0), rtol=0, atol=1e-12)
    probs = torch.exp(
        sbn.log_marginal(torch.tensor(list(itertools.product([0.0, 1.0], repeat=6)), dtype=torch.float64))
    )
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_vae_shapes_and_encoder_density():
    torch.manual_seed(0)  # parameter initialization only; sampling below uses explicit generators
    vae = VAE(VAEConfig(data_dim=12, latent_dim=3, hidden=[8])).double()
    g = torch.Generator().manual_seed(4)
    z, x = vae.sample_joint(5, g)
    assert z.shape == (5, 3) and x.shape == (5, 12) and set(x.unique().tolist()) <= {0.0, 1.0}
    zz = torch.randn(5, 2, 3, generator=g, dtype=torch.float64)
    assert vae.log_likelihood(x.unsqueeze(1), zz).shape == (5, 2)
    q = vae.posterior_approximation()
    mean, log_std = vae.encode(x)
    expected = torch.distributions.Normal(mean.unsqueeze(1), log_std.exp().unsqueeze(1)).log_prob(zz).sum(-1)
    torch.testing.assert_close(q.log_prob(x, zz), expected)
    assert q.sample(x, 4, g).shape == (5, 4, 3)
    assert torch.isfinite(vae.elbo(x, g)).all()


def test_bad_directed_parameters_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        SigmoidBeliefNet(torch.full((3, 2), math.nan), torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="noise_std"):
        LinearGaussianModel(torch.zeros(3, 2), torch.zeros(3), 0.0)
