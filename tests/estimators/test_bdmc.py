"""BDMC on models with exact marginal likelihoods: unbiased weights in both directions, a sandwich that holds and
closes as K grows."""

import math

import pytest
import torch
from raise_eval.models import GaussianPosterior, LinearGaussianModel, SigmoidBeliefNet

from raise_eval import DirectedPath, ais, bdmc, exact, linear_schedule, make_schedule, reverse_ais
from raise_eval.kernels import HMCKernel, tune_hmc
from tests.statistics import assert_unbiased

CHAINS = 200_000


@pytest.fixture(scope="module")
def weak_lg():
    """Loadings weak against the noise (largest eigenvalue of W'W / sigma^2 about 0.6), so that the reverse
    weights of K = 1..3 have finite fourth moments and the standard-error test means something (for sharp
    likelihoods small-K reverse AIS is the harmonic-mean estimator, whose variance is infinite)."""
    g = torch.Generator().manual_seed(0)
    model = LinearGaussianModel(
        torch.randn(6, 2, generator=g, dtype=torch.float64) * 0.25,
        torch.randn(6, generator=g, dtype=torch.float64),
        1.0,
    )
    _, x = model.sample_joint(3, g)
    return model, x


@pytest.mark.parametrize("k", [1, 2, 3])
def test_linear_gaussian_forward_and_reverse_weights_are_unbiased(weak_lg, k):
    """Forward: E[w] = p(x). Reverse, each chain started from its own exact posterior sample: E[w] = 1/p(x).
    Both within 4 standard errors (false-alarm rate in tests/statistics.py)."""
    model, x = weak_lg
    path = DirectedPath(model, x)
    kernel = HMCKernel(path, 0.5, num_leapfrog=3)
    g = torch.Generator().manual_seed(k)
    log_p = model.log_marginal(x)
    forward = ais(path, linear_schedule(k), CHAINS, generator=g, kernel=kernel)
    assert_unbiased(forward.log_weights, log_p)
    start = path.state_from_latents(GaussianPosterior(model).sample(x, CHAINS, g))
    reverse = reverse_ais(path, start, linear_schedule(k), generator=g, kernel=kernel)
    assert_unbiased(reverse.log_weights, -log_p)


def test_reverse_weights_need_independent_exact_starts(weak_lg):
    """Power check on the test itself: every chain started from the *same* posterior sample is not unbiased for
    1/p(x) conditionally on that sample, and the check rejects it."""
    from tests.statistics import unbiasedness_z

    model, x = weak_lg
    path = DirectedPath(model, x)
    g = torch.Generator().manual_seed(9)
    one = GaussianPosterior(model).sample(x, 1, g).expand(-1, CHAINS, -1).contiguous()
    reverse = reverse_ais(
        path, path.state_from_latents(one), linear_schedule(2), generator=g, kernel=HMCKernel(path, 0.5, 3)
    )
    z, _ = unbiasedness_z(reverse.log_weights, -model.log_marginal(x))
    assert (z.abs() > 4).any()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_sbn_forward_and_reverse_weights_are_unbiased(k):
    g = torch.Generator().manual_seed(20 + k)
    sbn = SigmoidBeliefNet.random(10, 5, generator=g)
    _, x = sbn.sample_joint(3, g)
    path = DirectedPath(sbn, x)
    log_p = sbn.log_marginal(x)
    assert_unbiased(ais(path, linear_schedule(k), CHAINS, generator=g).log_weights, log_p)
    configs = exact.binary_configurations(5)
    posterior = torch.softmax(sbn.log_prior(configs) + sbn.log_likelihood(x.unsqueeze(1), configs), dim=1)
    codes = torch.multinomial(posterior, CHAINS, replacement=True, generator=g)
    start = path.state_from_latents(configs[codes])
    assert_unbiased(reverse_ais(path, start, linear_schedule(k), generator=g).log_weights, -log_p, max_se=0.1)


@pytest.fixture(scope="module")
def simulated_lg():
    g = torch.Generator().manual_seed(1)
    model = LinearGaussianModel.random(20, 5, noise_std=0.4, generator=g)
    z, x = model.sample_joint(100, g)
    return model, z, x


def test_sandwich_contains_the_exact_average_and_closes_as_k_grows(simulated_lg):
    """100 simulated examples, 4 chains each, pilot-tuned HMC, sigmoid schedule. The average lower bound stays
    below and the average upper bound above the exact average log p(x) at every K (observed margins are many
    standard errors wide), and the gap and BREAD's Jeffreys bound shrink as K grows."""
    model, z, x = simulated_lg
    exact_mean = model.log_marginal(x).mean().item()
    path = DirectedPath(model, x)
    g = torch.Generator().manual_seed(2)
    gaps, jeffreys = [], []
    for k in (10, 100, 1000):
        betas = make_schedule("sigmoid", k)
        kernel = HMCKernel(path, tune_hmc(path, betas, num_chains=4, num_leapfrog=5, generator=g), num_leapfrog=5)
        start = path.state_from_latents(z.unsqueeze(1).expand(-1, 4, -1).contiguous())
        result = bdmc(path, start, betas, 4, generator=g, kernel=kernel)
        s = result.summary()
        assert s["lower"]["mean"] <= exact_mean <= s["upper"]["mean"], (k, s, exact_mean)
        gaps.append(s["gap"]["mean"])
        jeffreys.append(s["jeffreys_bound"]["mean"])
    assert gaps[0] > gaps[1] > gaps[2] > 0
    assert jeffreys[0] > jeffreys[1] > jeffreys[2]


def test_sbn_sandwich_contains_the_exact_value():
    g = torch.Generator().manual_seed(3)
    sbn = SigmoidBeliefNet.random(20, 8, weight_std=2.0, generator=g)
    z, x = sbn.sample_joint(50, g)
    path = DirectedPath(sbn, x)
    start = path.state_from_latents(z.unsqueeze(1).expand(-1, 8, -1).contiguous())
    s = bdmc(path, start, make_schedule("sigmoid", 200), 8, generator=g).summary()
    exact_mean = sbn.log_marginal(x).mean().item()
    assert s["lower"]["mean"] <= exact_mean <= s["upper"]["mean"]
    assert s["gap"]["mean"] < 1.0


def test_jeffreys_bound_with_an_unnormalized_start(tiny_rbm):
    """A Boltzmann path from the uniform base (Z_0 = 2^14, unnormalized) at K = 1. The forward chain's state is
    an exact sample of p_0 and the reverse chain's of p_1, so the expected BREAD bound is exactly the Jeffreys
    divergence sum_v (p_1(v) - p_0(v)) (log f_1(v) - log f_0(v)) of the two visible marginals. The estimate is
    within 4 standard errors of it (false alarm ~6e-5); before the fix it was shifted by -log Z_0 = -9.70."""
    from raise_eval import BoltzmannPath

    path = BoltzmannPath(tiny_rbm)
    v = exact.binary_configurations(8)
    log_f1 = exact.log_unnormalized_visible(tiny_rbm, v)
    log_f0 = path.log_density(path.state_from_layers([v, None]), 0.0).double()
    p1 = torch.softmax(log_f1, 0)
    p0 = torch.softmax(log_f0, 0)
    truth = float(((p1 - p0) * (log_f1 - log_f0)).sum())
    chains = 200_000
    g = torch.Generator().manual_seed(3)
    start = path.state_from_layers([v[torch.multinomial(p1, chains, replacement=True, generator=g)], None])
    result = bdmc(path, start, linear_schedule(1), chains, generator=g)
    fwd, rev = result.forward_log_weights, path.log_partition_initial - result.reverse_log_weights
    se = math.sqrt(fwd.var().item() / chains + rev.var().item() / chains)
    assert abs(float(result.jeffreys_bound) - truth) < 4 * se, (float(result.jeffreys_bound), truth, se)
    assert se < 0.05 * truth
