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


def test_sandwich_holds_for_a_linear_gaussian_decoder_wrapped_by_the_adapter():
    """The linear-Gaussian model written as a user would: an nn.Linear decoder and the 'gaussian' likelihood with a
    fixed scale, wrapped by DecoderModel (float64), 100 simulated examples with Gaussian data, 4 chains each,
    pilot-tuned HMC, sigmoid schedule, K = 100 and 1000; exact log p(x_n) from the closed form.

    Per example, E[lower_n] <= log p(x_n) <= E[upper_n] (stochastic bounds). The test is on the paired differences
    d_n = lower_n - log p(x_n) (and upper_n - log p(x_n)): their mean may exceed 0 (fall below 0) by at most 4
    standard errors of that mean (sd(d) / sqrt(100)). For correct bounds each of the four one-sided checks fails
    with probability about 3e-5 (normal tail at 4 sigma; fixed seed, so a run is deterministic). Power: at K = 1000
    both bounds lie within 0.5 nats of the truth on average, while a wrong normalization in the likelihood (e.g. a
    missing log(2 pi) / 2 per dimension, 18 nats here) or a wrong scale would put the truth outside."""
    from torch import nn

    from raise_eval.models import DecoderModel

    g = torch.Generator().manual_seed(11)
    lg = LinearGaussianModel.random(20, 5, noise_std=0.4, generator=g)
    decoder = nn.Linear(5, 20).double()
    with torch.no_grad():
        decoder.weight.copy_(lg.W)
        decoder.bias.copy_(lg.b)
    model = DecoderModel(decoder, latent_dim=5, likelihood="gaussian", scale=0.4).requires_grad_(False)
    z, x = model.sample_joint(100, g)
    exact = lg.log_marginal(x)
    path = DirectedPath(model, x)
    start = path.state_from_latents(z.unsqueeze(1).expand(-1, 4, -1).contiguous())
    for k in (100, 1000):
        betas = make_schedule("sigmoid", k)
        kernel = HMCKernel(path, tune_hmc(path, betas, num_chains=4, num_leapfrog=5, generator=g), num_leapfrog=5)
        result = bdmc(path, start, betas, 4, generator=g, kernel=kernel)
        below, above = result.lower - exact, result.upper - exact
        se_below, se_above = below.std().item() / 10, above.std().item() / 10
        assert below.mean().item() <= 4 * se_below, (k, below.mean().item(), se_below)
        assert above.mean().item() >= -4 * se_above, (k, above.mean().item(), se_above)
    assert -0.5 < below.mean().item() and above.mean().item() < 0.5, (below.mean().item(), above.mean().item())


def test_sandwich_holds_for_a_discretized_logistic_mixture_decoder():
    """8-bit pixels: a 2-latent decoder (nn.Linear) giving a 2-component discretized logistic mixture for 6 pixels,
    wrapped by DecoderModel (float64). The exact log p(x_n) is a 2-D integral, computed by the trapezoid rule on a
    141 x 141 grid over [-7, 7]^2 (posteriors about 0.5 wide in z: the rule agrees with a 561 x 561 grid to 3e-12
    nats). 30 simulated examples, 4 chains, K = 1000: the paired differences lower_n - log p(x_n) and
    upper_n - log p(x_n) have means no further than 4 standard errors on the wrong side of 0 (each one-sided check
    fails with probability about 3e-5 for correct bounds; fixed seed), and both lie within 0.3 nats of the truth."""
    from torch import nn

    from raise_eval.models import DecoderModel

    torch.manual_seed(0)  # the decoder's initialization only
    decoder = nn.Linear(2, 3 * 2 * 6).double()
    with torch.no_grad():
        decoder.weight.mul_(0.5)
        decoder.bias[12:24].mul_(1.6)  # means reaching past +-1: the edge pixels 0 and 255 get mass
        decoder.bias[24:].sub_(1.5)  # log-scales around e^-1.5 on the [-1, 1] scale
    model = DecoderModel(decoder, 2, likelihood="discretized_logistic_mixture", num_components=2)
    model.requires_grad_(False)
    g = torch.Generator().manual_seed(12)
    z, x = model.sample_joint(30, g)
    assert (x == 0).any() and (x == 255).any()  # the edge pixels take part
    grid = torch.linspace(-7, 7, 141, dtype=torch.float64)
    points = torch.cartesian_prod(grid, grid)  # (141^2, 2)
    log_joint = model.log_prior(points) + model.log_likelihood(x.unsqueeze(1), points)  # (30, 141^2)
    weights = torch.full((141,), 1.0, dtype=torch.float64)
    weights[[0, -1]] = 0.5
    log_w = torch.log(torch.outer(weights, weights).flatten() * (grid[1] - grid[0]) ** 2)
    exact = torch.logsumexp(log_joint + log_w, dim=1)
    path = DirectedPath(model, x)
    betas = make_schedule("sigmoid", 1000)
    kernel = HMCKernel(path, tune_hmc(path, betas, num_chains=4, num_leapfrog=5, generator=g), num_leapfrog=5)
    start = path.state_from_latents(z.unsqueeze(1).expand(-1, 4, -1).contiguous())
    result = bdmc(path, start, betas, 4, generator=g, kernel=kernel)
    below, above = result.lower - exact, result.upper - exact
    n = math.sqrt(len(exact))
    assert below.mean().item() <= 4 * below.std().item() / n, (below.mean().item(), below.std().item() / n)
    assert above.mean().item() >= -4 * above.std().item() / n, (above.mean().item(), above.std().item() / n)
    assert -0.3 < below.mean().item() and above.mean().item() < 0.3, (below.mean().item(), above.mean().item())
