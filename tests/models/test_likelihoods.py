"""The likelihoods of `DecoderModel` against direct float64 computations, at the pixel values 0 and 255 and at
extreme parameters; their samplers against their probabilities; their data checks."""

import math

import pytest
import torch
import torch.nn.functional as F
from raise_eval.models.directed.likelihoods import (
    BernoulliLikelihood,
    DataSupportError,
    DiscretizedLogisticLikelihood,
    DiscretizedLogisticMixtureLikelihood,
    GaussianLikelihood,
    make_likelihood,
)

from tests.statistics import assert_counts_match

PIXELS = torch.arange(256, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------- float64 references
def bernoulli_reference(x, logits):
    """log p(x) = -log(1 + exp(-l)) for x = 1 and -log(1 + exp(l)) for x = 0, directly in float64 (inf for l
    beyond float64's exp range)."""
    sign = torch.where(x.double() == 1, -1.0, 1.0)
    return -torch.log1p(torch.exp(sign * logits.double()))


def logistic_cdf(t):
    return 1.0 / (1.0 + torch.exp(-t))


def discretized_logistic_reference(x, mean, log_scale):
    """Direct float64 probabilities: CDF differences over each pixel's bin on the [-1, 1] scale, the tails to the
    edge pixels. Above the mean the difference is taken between upper-tail probabilities (1 - CDF, by symmetry
    CDF(-t)), so that it never subtracts two numbers near 1; accurate wherever the probability is not tiny (callers
    keep those entries)."""
    x, mean, s = x.double(), mean.double(), log_scale.double().exp()
    centre = x / 127.5 - 1
    a, b = (centre + 1 / 255 - mean) / s, (centre - 1 / 255 - mean) / s
    one, zero = torch.ones_like(a), torch.zeros_like(a)
    below = torch.where(x == 255, one, logistic_cdf(a)) - torch.where(x == 0, zero, logistic_cdf(b))
    above = torch.where(x == 0, one, logistic_cdf(-b)) - torch.where(x == 255, zero, logistic_cdf(-a))
    return torch.where(b > 0, above, below)


# ---------------------------------------------------------------------------------------------- Bernoulli
def test_bernoulli_matches_float64_including_extreme_logits():
    logits = torch.tensor([-1e4, -100.0, -30.0, -1.0, 0.0, 1e-3, 2.5, 30.0, 100.0, 1e4])
    for value in (0.0, 1.0):
        x = torch.full_like(logits, value)
        got = BernoulliLikelihood().log_prob_params(x, logits)
        want = bernoulli_reference(x, logits)
        finite = torch.isfinite(want)  # exp(1e4) overflows float64; those entries are checked below
        torch.testing.assert_close(got.double()[finite], want[finite], rtol=1e-6, atol=1e-6)
        exact_tail = -logits.double().abs()  # log sigmoid(-|l|) = -|l| - log1p(exp(-|l|)) ~ -|l| for |l| >= 100
        wrong_side = (logits.abs() >= 100) & ((x == 1) == (logits < 0))
        torch.testing.assert_close(got.double()[wrong_side], exact_tail[wrong_side], rtol=1e-7, atol=0.0)
    assert torch.isfinite(got).all()


# ---------------------------------------------------------------------------------------------- Gaussian
@pytest.mark.parametrize("log_scale", [-20.0, -3.0, 0.0, 2.0, 20.0])
def test_gaussian_matches_float64_for_every_way_to_give_the_scale(log_scale):
    g = torch.Generator().manual_seed(0)
    means = torch.randn(3, 5, generator=g)
    x = means + torch.randn(3, 5, generator=g) * math.exp(log_scale)  # typical deviations at this scale
    want = torch.distributions.Normal(means.double(), math.exp(log_scale)).log_prob(x.double())
    fixed = GaussianLikelihood(scale=math.exp(log_scale)).log_prob_params(x, means)
    vector = GaussianLikelihood(log_scale=torch.full((5,), log_scale)).log_prob_params(x, means)
    decoder = GaussianLikelihood().log_prob_params(x, means, torch.full((3, 5), log_scale))
    for got in (fixed, vector, decoder):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_gaussian_learned_log_scale_is_the_users_parameter():
    log_scale = torch.nn.Parameter(torch.zeros(4))
    lik = GaussianLikelihood(log_scale=log_scale)
    assert lik.log_scale is log_scale and list(lik.parameters()) == [log_scale]
    lik.double()
    assert log_scale.dtype == torch.float64  # moved with the likelihood, still the user's object


def test_gaussian_log_variances_give_the_density_of_half_as_many_log_std():
    """scale_kind='log_var' (log s^2, as many VAEs store or predict it) against log_std = log_var / 2: the same
    log-likelihoods and samples, for a decoder-predicted block and for a given vector, and through the layouts."""
    g = torch.Generator().manual_seed(5)
    means, x = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    log_var = torch.randn(3, 5, generator=g) * 2
    as_var = GaussianLikelihood(scale_kind="log_var")
    as_std = GaussianLikelihood()
    assert as_var.param_names == ("means", "log_variances")
    torch.testing.assert_close(
        as_var.log_prob(x, (means, log_var)), as_std.log_prob(x, (means, log_var / 2)), rtol=0, atol=0
    )
    out = torch.cat([means, log_var], dim=1)  # a decoder's single tensor [means | log-variances]
    torch.testing.assert_close(as_var.log_prob(x, as_var.split(out)), as_std.log_prob(x, (means, log_var / 2)))
    vector_var = make_likelihood("gaussian", log_scale=log_var[0], scale_kind="log_var")
    vector_std = make_likelihood("gaussian", log_scale=log_var[0] / 2)
    torch.testing.assert_close(vector_var.log_prob(x, (means,)), vector_std.log_prob(x, (means,)), rtol=0, atol=0)
    want = torch.distributions.Normal(means.double(), (log_var[0].double() / 2).exp()).log_prob(x.double()).sum(-1)
    torch.testing.assert_close(vector_var.log_prob(x, (means,)).double(), want, rtol=1e-5, atol=1e-5)
    draws = [lik.sample((means,), torch.Generator().manual_seed(6)) for lik in (vector_var, vector_std)]
    torch.testing.assert_close(draws[0], draws[1], rtol=0, atol=0)
    assert "log-variances" in vector_var.describe() and "log-variances" in as_var.describe()
    with pytest.raises(ValueError, match="scale_kind must be one of"):
        GaussianLikelihood(scale_kind="variance")
    with pytest.raises(ValueError, match=r"is a standard deviation.*scale=v \*\* 0.5"):
        GaussianLikelihood(scale=0.5, scale_kind="log_var")


# ---------------------------------------------------------------------------------------------- discretized logistic
MEANS = torch.tensor([-1.5, -1.0, -0.3, 0.0, 0.5, 1.0, 1.5])
LOG_SCALES = torch.tensor([-7.0, -4.0, -2.0, 0.0, 1.0, 3.0])


def _grid(dtype):
    x = PIXELS.to(dtype).reshape(-1, 1, 1)
    return x, MEANS.to(dtype).reshape(1, -1, 1), LOG_SCALES.to(dtype).reshape(1, 1, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_discretized_logistic_matches_float64_cdf_differences(dtype):
    """Every pixel value 0..255 (the edges included) x 7 means x 6 log-scales: the stable formula against direct
    CDF differences in float64, wherever those are reliable (probability above 1e-9)."""
    x, mean, log_scale = _grid(dtype)
    got = DiscretizedLogisticLikelihood().log_prob_params(x, mean.expand(256, -1, 6), log_scale.expand(256, 7, -1))
    p = discretized_logistic_reference(x, mean, log_scale)
    keep = p > 1e-9
    assert keep[0].any() and keep[255].any()
    tolerance = {torch.float32: 2e-5, torch.float64: 1e-9}[dtype]
    torch.testing.assert_close(got.double()[keep], torch.log(p)[keep], rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_discretized_logistic_sums_to_one_at_extreme_parameters(dtype):
    """sum over the 256 pixel values of P = 1 for scales from e^-30 to e^30 and means far outside [-1, 1]."""
    means = torch.tensor([-5.0, -1.0, -0.2, 0.0, 1 / 127.5, 1.0, 5.0], dtype=dtype)
    log_scales = torch.tensor([-30.0, -12.0, -5.0, 0.0, 5.0, 12.0, 30.0], dtype=dtype)
    x = PIXELS.to(dtype).reshape(-1, 1, 1)
    log_p = DiscretizedLogisticLikelihood().log_prob_params(
        x, means.reshape(1, -1, 1).expand(256, -1, 7), log_scales.reshape(1, 1, -1).expand(256, 7, -1)
    )
    assert torch.isfinite(log_p).all()
    total = torch.logsumexp(log_p.double(), dim=0)
    tolerance = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(total, torch.zeros_like(total), atol=tolerance, rtol=0)


def test_discretized_logistic_closed_forms_at_the_extremes_in_float32():
    """Tiny scale: all mass on the pixel whose bin holds the mean; huge scale: P(k) -> (2/255) / (4 s) for inner
    pixels and 1/2 at each edge; far outside the bins: the edge pixel gets everything."""
    lik = DiscretizedLogisticLikelihood()
    x = torch.tensor([0.0, 1.0, 128.0, 254.0, 255.0])
    centre = x / 127.5 - 1
    tiny = lik.log_prob_params(x, centre, torch.full_like(x, -30.0))
    torch.testing.assert_close(tiny, torch.zeros_like(x), atol=1e-6, rtol=0)
    off = lik.log_prob_params(x, centre + 2 / 255, torch.full_like(x, -30.0))  # the next bin's centre (255: its tail)
    # log sigmoid(-t), t = (1/255) e^30; rtol: the float32 mean sits 1/255 from the edge only to about 6e-8 absolute
    torch.testing.assert_close(off[:4], torch.full((4,), -math.exp(30) / 255), rtol=1e-4, atol=0)
    assert off[4] == 0
    big = lik.log_prob_params(x, torch.zeros_like(x), torch.full_like(x, 30.0))
    inner = math.log(2 / 255) - 30.0 - math.log(4.0)
    want = torch.tensor([-math.log(2), inner, inner, inner, -math.log(2)])
    torch.testing.assert_close(big, want, rtol=1e-6, atol=1e-5)
    far = lik.log_prob_params(torch.tensor([0.0, 255.0]), torch.tensor([-50.0, 50.0]), torch.zeros(2))
    torch.testing.assert_close(far, torch.zeros(2), atol=1e-6, rtol=0)


def test_discretized_logistic_gradients_are_finite_and_match_float64():
    """Gradients in the mean and log-scale: float32 against float64 autograd of the direct CDF differences (moderate
    parameters), and finite, never NaN, at the extremes (a NaN would poison HMC)."""
    lik = DiscretizedLogisticLikelihood()
    x = torch.tensor([0.0, 3.0, 127.0, 200.0, 255.0]).repeat(3)
    mean = torch.tensor([-0.9, -0.95, 0.01, 0.5, 0.97] * 3, dtype=torch.float64, requires_grad=True)
    log_scale = torch.tensor([-4.0] * 5 + [-2.0] * 5 + [0.5] * 5, dtype=torch.float64, requires_grad=True)
    ref = torch.log(discretized_logistic_reference(x, mean, log_scale)).sum()
    ref_grads = torch.autograd.grad(ref, (mean, log_scale))
    m32 = mean.detach().float().requires_grad_(True)
    s32 = log_scale.detach().float().requires_grad_(True)
    grads = torch.autograd.grad(lik.log_prob_params(x, m32, s32).sum(), (m32, s32))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-3)
    xe, me, se = _grid(torch.float32)
    me = torch.cat([me, torch.tensor([-20.0, 20.0]).reshape(1, -1, 1)], 1).expand(256, -1, 8)
    se = torch.cat([se, torch.tensor([-30.0, 30.0]).reshape(1, 1, -1)], 2).expand(256, 9, -1)
    me, se = me.clone().requires_grad_(True), se.clone().requires_grad_(True)
    for g in torch.autograd.grad(lik.log_prob_params(xe, me, se).sum(), (me, se)):
        assert torch.isfinite(g).all()


def test_discretized_logistic_samples_follow_its_probabilities():
    """Chi-square goodness of fit of 200,000 samples per parameter set, the edges included (false alarm ~1e-4 each,
    fixed seed)."""
    lik = DiscretizedLogisticLikelihood()
    g = torch.Generator().manual_seed(0)
    for mean, log_scale in ((-0.9, -2.5), (0.3, -4.0), (0.95, -1.0)):
        n = 200_000
        samples = lik.sample_params(g, torch.full((n,), mean), torch.full((n,), log_scale))
        assert samples.eq(samples.round()).all() and samples.min() >= 0 and samples.max() <= 255
        like = torch.ones(256, dtype=torch.float64)
        probs = lik.log_prob_params(PIXELS, mean * like, log_scale * like).exp()
        assert_counts_match(torch.bincount(samples.long(), minlength=256), probs)


def test_discretized_logistic_log_scales_below_the_float32_range_are_floored():
    """log_scale = -100: 1/s overflows float32, and a mean exactly on a bin edge gave 0 * inf = NaN. Floored at -80
    the scale is still far below a bin, so the mean on the edge between pixels k and k + 1 gives each of them
    probability 1/2 (the logistic is symmetric) and every other pixel none; gradients stay finite."""
    from raise_eval.models.directed.likelihoods import LOG_SCALE_FLOOR

    assert LOG_SCALE_FLOOR == -80.0
    x = PIXELS.float().reshape(-1, 1)
    for k in (127, 200, 0):  # the edge at 0 (127 | 128), an edge inside, and pixel 0's upper edge
        edge = (torch.tensor(float(k)) - 127.0) / 127.5  # the same float the formula forms for the edge
        mean = edge.reshape(1, 1).requires_grad_(True)
        log_scale = torch.full((1, 1), -100.0, requires_grad=True)
        log_p = DiscretizedLogisticLikelihood().log_prob_params(x, mean, log_scale).squeeze(-1)
        assert not torch.isnan(log_p).any(), f"edge of pixel {k}: NaN log-probabilities"
        probs = log_p.double().exp()
        torch.testing.assert_close(probs[k : k + 2], torch.full((2,), 0.5, dtype=torch.float64), rtol=0, atol=1e-7)
        assert probs.sum().item() == pytest.approx(1.0, abs=1e-6)
        mean_grad, scale_grad = torch.autograd.grad(log_p[k], (mean, log_scale))
        assert torch.isfinite(mean_grad).all() and torch.isfinite(scale_grad).all()
        mixture = DiscretizedLogisticMixtureLikelihood(2).log_prob(
            x, (torch.zeros(1, 2, 1), mean.detach().expand(1, 2, 1), torch.full((1, 2, 1), -100.0))
        )
        torch.testing.assert_close(mixture, log_p.detach())
    samples = DiscretizedLogisticLikelihood().sample_params(
        torch.Generator().manual_seed(7), torch.full((1000,), 0.2), torch.full((1000,), -100.0)
    )
    assert torch.equal(samples, torch.full((1000,), torch.round(torch.tensor(1.2) * 127.5).item()))


# ---------------------------------------------------------------------------------------------- mixture
def test_mixture_matches_float64_and_sums_to_one():
    g = torch.Generator().manual_seed(1)
    k = 3
    logits = torch.randn(1, k, 1, generator=g) * 2
    means = torch.tensor([-0.98, 0.1, 0.99]).reshape(1, k, 1)
    log_scales = torch.tensor([-4.0, -2.0, -5.0]).reshape(1, k, 1)
    x = PIXELS.float().reshape(-1, 1)  # 256 "examples" of one pixel
    lik = DiscretizedLogisticMixtureLikelihood(k)
    got = lik.log_prob(x, (logits, means, log_scales))
    weights = torch.softmax(logits.double(), dim=1)
    p = (weights * discretized_logistic_reference(x.unsqueeze(1), means, log_scales)).sum(1).squeeze(-1)
    keep = p > 1e-9
    torch.testing.assert_close(got.double()[keep], torch.log(p)[keep], rtol=2e-5, atol=2e-5)
    total = torch.logsumexp(got.double(), 0)
    torch.testing.assert_close(total, torch.zeros_like(total), atol=1e-5, rtol=0)
    one = DiscretizedLogisticMixtureLikelihood(1).log_prob(x, (logits[:, :1], means[:, :1], log_scales[:, :1]))
    torch.testing.assert_close(one, DiscretizedLogisticLikelihood().log_prob(x, (means[:, 0], log_scales[:, 0])))


def test_mixture_samples_follow_its_probabilities():
    g = torch.Generator().manual_seed(2)
    lik = DiscretizedLogisticMixtureLikelihood(2)
    n = 200_000
    params = (
        torch.tensor([0.5, -0.5]).reshape(1, 2, 1).expand(n, 2, 1),
        torch.tensor([-0.9, 0.6]).reshape(1, 2, 1).expand(n, 2, 1),
        torch.tensor([-2.0, -3.0]).reshape(1, 2, 1).expand(n, 2, 1),
    )
    samples = lik.sample(params, g).squeeze(-1)
    probs = lik.log_prob(PIXELS.reshape(-1, 1), tuple(p[:1].double() for p in params)).exp()
    assert_counts_match(torch.bincount(samples.long(), minlength=256), probs)


# ---------------------------------------------------------------------------------------------- layouts and errors
def test_single_tensor_and_tuple_layouts_agree():
    g = torch.Generator().manual_seed(3)
    k, d = 2, 6
    out = torch.randn(4, 3 * k * d, generator=g)
    lik = DiscretizedLogisticMixtureLikelihood(k)
    from_tensor = lik.split(out)
    from_images = lik.split(out.reshape(4, 3 * k, 2, 3))  # a conv decoder's (M, 3K, H, W)
    from_tuple = lik.split(tuple(out.reshape(4, 3, k, d).unbind(1)))
    for a, b, c in zip(from_tensor, from_images, from_tuple):
        assert a.shape == (4, k, d) and torch.equal(a, b) and torch.equal(a, c)
    means, log_scales = GaussianLikelihood().split(out[:, : 2 * d])
    assert torch.equal(means, out[:, :d]) and torch.equal(log_scales, out[:, d : 2 * d])
    with pytest.raises(ValueError, match="multiple of 2"):
        GaussianLikelihood().split(torch.zeros(4, 7))
    with pytest.raises(ValueError, match="takes 3"):
        lik.split((out, out))


def test_data_outside_the_support_is_refused_with_the_fix():
    with pytest.raises(DataSupportError, match="binarize it"):
        BernoulliLikelihood().check_data(torch.tensor([[0.0, 0.5, 1.0]]))
    with pytest.raises(DataSupportError, match="likelihood='gaussian'"):
        BernoulliLikelihood().check_data(torch.tensor([[0.0, 3.0]]))
    with pytest.raises(DataSupportError, match=r"round\(x \* 255\)"):
        DiscretizedLogisticLikelihood().check_data(torch.tensor([[0.0, 0.25, 1.0]]))
    with pytest.raises(DataSupportError, match="integer pixel values 0..255"):
        DiscretizedLogisticLikelihood().check_data(torch.tensor([[0.0, 256.0]]))
    with pytest.raises(DataSupportError, match="integer pixel values"):
        DiscretizedLogisticMixtureLikelihood(2).check_data(torch.tensor([[3.5, 4.0]]))
    with pytest.raises(DataSupportError, match="NaN"):
        GaussianLikelihood(scale=1.0).check_data(torch.tensor([[0.0, float("nan")]]))
    DiscretizedLogisticLikelihood().check_data(PIXELS.reshape(1, -1))
    BernoulliLikelihood().check_data(torch.tensor([[0.0, 1.0]]))


def test_likelihood_names_and_options():
    assert isinstance(make_likelihood("gaussian", scale=0.5), GaussianLikelihood)
    assert make_likelihood("discretized_logistic_mixture", num_components=5).num_components == 5
    with pytest.raises(ValueError, match="choose one of"):
        make_likelihood("poisson")
    with pytest.raises(ValueError, match="takes scale, log_scale, scale_kind; got num_components"):
        make_likelihood("gaussian", num_components=2)
    with pytest.raises(ValueError, match="needs num_components"):
        make_likelihood("discretized_logistic_mixture")
    with pytest.raises(ValueError, match="not both"):
        GaussianLikelihood(scale=1.0, log_scale=torch.zeros(3))
    with pytest.raises(ValueError, match="positive"):
        GaussianLikelihood(scale=0.0)


def test_bernoulli_log_prob_is_the_vae_formula():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(5, 7, generator=g) * 3
    x = (torch.rand(5, 7, generator=g) < 0.5).float()
    assert torch.equal(BernoulliLikelihood().log_prob(x, (logits,)), (x * logits - F.softplus(logits)).sum(-1))
