"""AIDE measures how far an approximate posterior is from AIS (the gold standard) on the linear-Gaussian model,
where the true symmetric KL divergence of each candidate is known in closed form."""

import math

import torch
from raise_eval.models import GaussianPosterior, LinearGaussianModel

from raise_eval import AISInference, DirectedPath, EncoderInference, aide, bdmc, make_schedule
from raise_eval.kernels import HMCKernel
from raise_eval.stats import mean_and_stderr


def test_aide_of_the_exact_posterior_equals_the_bdmc_jeffreys_bound():
    """With the exact posterior as target and one gold trace (Mg = 1), AIDE's two terms are log p(x) - log w_fwd
    (AIS's own trace) and -log p(x) - log w_rev (reverse AIS from an exact sample): in expectation exactly BREAD's
    Jeffreys bound E[-log w_rev] - E[log w_fwd] at the same K and kernel. Both run on the same 30 examples at
    K = 300 (sigmoid schedule, HMC), AIDE with Ng = Nt = 20, BDMC with 20 forward and 20 reverse chains each
    started from its own exact sample. The paired per-example difference has mean 0: within 4 of its standard
    errors (false alarm ~6e-5), and the bound itself is far from 0 here, so the test has something to compare."""
    g = torch.Generator().manual_seed(1)
    model = LinearGaussianModel.random(10, 2, noise_std=0.5, generator=g)
    _, x = model.sample_joint(30, g)
    betas = make_schedule("sigmoid", 300)
    gold = AISInference(model, betas, kernel_for=lambda p: HMCKernel(p, 0.05, 10))
    result = aide(
        gold,
        EncoderInference(GaussianPosterior(model)),
        x,
        num_gold=20,
        num_target=20,
        gold_meta=1,
        target_meta=1,
        generator=g,
    )
    path = DirectedPath(model, x)
    start = path.state_from_latents(GaussianPosterior(model).sample(x, 20, g))
    sandwich = bdmc(path, start, betas, 20, generator=g, kernel=HMCKernel(path, 0.05, 10))
    diff = result.per_example - sandwich.jeffreys_bound
    mean, se = mean_and_stderr(diff)
    assert abs(mean) < 4 * se, (result.mean, float(sandwich.jeffreys_bound.mean()), se)
    assert float(sandwich.jeffreys_bound.mean()) > 8 * se


def test_aide_is_near_zero_for_the_exact_posterior_and_large_for_a_poor_encoder():
    """Gold standard: AIS with K = 1000 (sigmoid schedule, HMC); 20 examples, Ng = Nt = 20, Mg = 2, Mt = 1.

    For the exact posterior AIDE's expectation is at most BREAD's Jeffreys bound of the gold standard (equal at
    Mg = 1, see above; more meta traces only lower it) and at least 0. At this seed it gives 0.107 +- 0.031 (J =
    0.094 +- 0.082); the test asserts 0 <= AIDE <= J within 4 standard errors, with J from BDMC at the same K and
    kernel (20 examples, 4 forward and 4 reverse chains each). For an encoder shifted by 0.3 and widened 1.5 times
    the closed-form symmetric KL is 4.56 nats and AIDE gives 4.76 +- 0.25: within 4 standard errors plus 10% (the
    symmetric KL of AIS's output, not of the exact posterior, is what AIDE measures against). (K = 3000 gave 0.039
    +- 0.016 and 4.40 +- 0.17 in 39 s against 16.5 s, one thread: the CI time matters more than that gain.)
    """
    g = torch.Generator().manual_seed(0)
    model = LinearGaussianModel.random(10, 2, noise_std=0.5, generator=g)
    _, x = model.sample_joint(20, g)
    gold = AISInference(model, make_schedule("sigmoid", 1000), kernel_for=lambda p: HMCKernel(p, 0.05, 10))
    kw = dict(num_gold=20, num_target=20, gold_meta=2, target_meta=1, generator=g)
    exact_target = aide(gold, EncoderInference(GaussianPosterior(model)), x, **kw)
    poor = GaussianPosterior(model, shift=0.3, scale=1.5)
    poor_target = aide(gold, EncoderInference(poor), x, **kw)
    truth = poor.symmetric_kl_to_posterior()
    path = DirectedPath(model, x)
    start = path.state_from_latents(GaussianPosterior(model).sample(x, 4, g))
    jeffreys = bdmc(path, start, make_schedule("sigmoid", 1000), 4, generator=g, kernel=HMCKernel(path, 0.05, 10))
    j_mean, j_se = mean_and_stderr(jeffreys.jeffreys_bound)
    assert -4 * exact_target.stderr < exact_target.mean < j_mean + 4 * math.hypot(exact_target.stderr, j_se)
    assert poor_target.mean > 1.0 and poor_target.mean > 20 * abs(exact_target.mean)
    assert abs(poor_target.mean - truth) < 0.1 * truth + 4 * poor_target.stderr
    assert exact_target.per_example.shape == (20,)
