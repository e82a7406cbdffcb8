"""`DecoderModel`: a researcher's modules wrapped as a directed model agree exactly with raise-eval's own classes
on the same weights, take one decoder pass per gradient, and refuse what does not fit with a clear error."""

import math

import pytest
import torch
from raise_eval.bidirectional import evaluate_bdmc
from raise_eval.models import VAE, DecoderModel, LinearGaussianModel, VAEConfig
from raise_eval.models.directed.likelihoods import DataSupportError
from torch import nn

from raise_eval import DirectedPath


@pytest.fixture(scope="module")
def vae():
    torch.manual_seed(0)  # parameter initialization only
    return VAE(VAEConfig(data_dim=12, latent_dim=3, hidden=[8])).requires_grad_(False)


def wrap(vae):
    return DecoderModel(vae.decoder, latent_dim=3, likelihood="bernoulli", encoder=vae.encode)


def test_same_log_joint_gradients_and_samples_as_the_vae(vae):
    model = wrap(vae)
    g = torch.Generator().manual_seed(1)
    z_vae, x_vae = vae.sample_joint(6, g)
    g = torch.Generator().manual_seed(1)
    z, x = model.sample_joint(6, g)
    assert torch.equal(z, z_vae) and torch.equal(x, x_vae)
    chains = torch.randn(6, 5, 3, generator=g)
    xb = x.unsqueeze(1)
    assert torch.equal(model.log_joint(xb, chains), vae.log_joint(xb, chains))
    for ours, theirs in zip(model.log_likelihood_and_grad(xb, chains), vae.log_likelihood_and_grad(xb, chains)):
        assert torch.equal(ours, theirs)
    for ours, theirs in zip(model.log_prior_and_grad(chains), vae.log_prior_and_grad(chains)):
        assert torch.equal(ours, theirs)
    q, q_vae = model.posterior_approximation(), vae.posterior_approximation()
    assert torch.equal(q.log_prob(x, chains), q_vae.log_prob(x, chains))


def test_same_bdmc_numbers_as_the_vae_for_the_same_seed(vae):
    """The whole protocol (pilot, forward and reverse AIS at two K, ELBO, IWAE): every per-example number equal."""
    options = dict(num_examples=4, chains=2, steps=(5, 20), num_leapfrog=3, pilot_chains=2, iwae_samples=(1, 10))
    options.update(elbo_samples=5, seed=3)
    ours, theirs = evaluate_bdmc(wrap(vae), **options), evaluate_bdmc(vae, **options)
    for k in (5, 20):
        for field in ("lower", "upper", "jeffreys_bound", "forward_log_weights", "reverse_log_weights"):
            assert torch.equal(getattr(ours.sandwich[k], field), getattr(theirs.sandwich[k], field)), (k, field)
    assert ours.baselines.keys() == theirs.baselines.keys()
    for name in ours.baselines:
        assert torch.equal(ours.baselines[name], theirs.baselines[name]), name
    assert ours.step_sizes == theirs.step_sizes


def test_a_decoder_that_is_a_plain_function_works(vae):
    """Issue 24: the docs allow "an nn.Module (or function)"; a function has no parameters, and BDMC took its device
    and dtype from next(iter(model.parameters())) (StopIteration). Same numbers as the module it calls."""
    function = DecoderModel(lambda z: vae.decoder(z), latent_dim=3, likelihood="bernoulli", encoder=vae.encode)
    assert list(function.parameters()) == []
    options = dict(num_examples=3, chains=2, steps=(5,), num_leapfrog=3, pilot_chains=2, iwae_samples=(1,))
    options.update(elbo_samples=2, seed=4)
    ours, theirs = evaluate_bdmc(function, **options), evaluate_bdmc(wrap(vae), **options)
    assert torch.equal(ours.sandwich[5].lower, theirs.sandwich[5].lower)
    assert torch.equal(ours.sandwich[5].upper, theirs.sandwich[5].upper)
    assert ours.settings["dtype"] == "float32" and ours.settings["device"] == "cpu"
    assert (function.dtype, function.device) == (torch.float32, torch.device("cpu"))
    assert function.to(torch.float64).dtype == torch.float64  # the prior's buffer moves with the model
    assert wrap(vae).dtype == torch.float32


class _NaNAwayFromZero(nn.Module):
    """Finite on the zeros of the first probe, NaN for any other z (a 0/0 hidden by the origin)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 12)

    def forward(self, z):
        norm = z.abs().sum(-1, keepdim=True)
        return self.linear(z) + torch.where(norm > 0, norm * float("nan"), torch.zeros_like(norm))


@pytest.mark.parametrize(
    "decoder, message",
    [
        (
            lambda z: torch.full((z.shape[0], 12), float("nan")),
            "the model produced NaN values: the decoder's output for z = zeros",
        ),
        (_NaNAwayFromZero(), "the model produced NaN values: the decoder's output for z = two draws from N(0, I)"),
        (lambda z: torch.full((z.shape[0], 12), float("inf")), "the model produced infinite values"),
    ],
)
def test_a_decoder_that_produces_nan_is_refused_when_the_model_is_built(decoder, message):
    """Issue 24: a NaN decoder gave exit 0 with every number nan and a sandwich 'nan nats wide'."""
    with pytest.raises(ValueError) as e:
        DecoderModel(decoder, latent_dim=3, likelihood="bernoulli")
    assert message in str(e.value) and "check the decoder's weights and its forward pass" in str(e.value)
    linear = nn.Linear(3, 12)
    state = torch.random.get_rng_state()
    DecoderModel(linear, latent_dim=3)  # the probe's draws leave the global random state alone
    assert torch.equal(torch.random.get_rng_state(), state)


def test_an_encoder_that_produces_nan_is_refused_when_the_model_is_built():
    def encoder(x):
        return torch.full((x.shape[0], 3), float("nan")), torch.zeros(x.shape[0], 3)

    with pytest.raises(ValueError, match="the encoder produced NaN values in its mean"):
        DecoderModel(nn.Linear(3, 12), latent_dim=3, encoder=encoder)


def linear_gaussian_adapter(lg: LinearGaussianModel) -> DecoderModel:
    decoder = nn.Linear(lg.latent_dim, lg.data_dim).double()
    with torch.no_grad():
        decoder.weight.copy_(lg.W)
        decoder.bias.copy_(lg.b)
    return DecoderModel(decoder, latent_dim=lg.latent_dim, likelihood="gaussian", scale=lg.noise_std)


def test_linear_gaussian_through_the_adapter_matches_the_exact_model():
    lg = LinearGaussianModel.random(7, 3, noise_std=0.4, generator=torch.Generator().manual_seed(2))
    model = linear_gaussian_adapter(lg)
    g = torch.Generator().manual_seed(3)
    _, x = lg.sample_joint(4, g)
    z = torch.randn(4, 6, 3, generator=g, dtype=torch.float64)
    xb = x.unsqueeze(1)
    for ours, exact in zip(model.log_likelihood_and_grad(xb, z), lg.log_likelihood_and_grad(xb, z)):
        torch.testing.assert_close(ours, exact, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model.log_joint(xb, z), lg.log_joint(xb, z), rtol=1e-12, atol=1e-12)


def test_one_decoder_pass_per_gradient_and_none_for_the_cached_values():
    decoder = nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Linear(5, 10))
    model = DecoderModel(decoder, latent_dim=2, likelihood="gaussian")  # decoder outputs means and log-scales
    calls = []
    decoder.register_forward_hook(lambda *_: calls.append(1))
    x = torch.randn(3, 5)
    path = DirectedPath(model, x)
    state = path.sample_initial(4, torch.Generator().manual_seed(0))
    assert len(calls) == 1  # one forward (and its backward) for the value and gradient of the whole batch
    path.log_density(state, 0.3), path.grad_log_density(state, 0.3), path.log_density_ratio(state, 0.3, 0.4)
    assert len(calls) == 1


def test_batch_shapes_follow_the_directed_model_conventions():
    decoder = nn.Linear(2, 8)  # (M, 2) -> (M, 2 * 4): means and log-scales of 4 pixels
    model = DecoderModel(decoder, latent_dim=2, likelihood="discretized_logistic")
    assert model.data_dim == 4
    g = torch.Generator().manual_seed(1)
    z = torch.randn(3, 5, 2, generator=g)
    x = model.sample_data(z[:, :1], g)  # (3, 1, 4): one example per row, broadcast over 5 chains
    assert x.shape == (3, 1, 4)
    assert model.log_likelihood(x, z).shape == (3, 5)
    assert model.log_likelihood(x[0, 0], z[0, 0]).shape == ()  # unbatched
    value, grad = model.log_likelihood_and_grad(x, z)
    assert value.shape == (3, 5) and grad.shape == z.shape and not value.requires_grad


def test_encoder_conventions():
    torch.manual_seed(0)
    decoder = nn.Linear(2, 6)
    encoder = nn.Linear(6, 4)
    x = torch.rand(5, 6).round()
    log_std_model = DecoderModel(decoder, 2, encoder=encoder)
    log_var_model = DecoderModel(decoder, 2, encoder=encoder, encoder_scale="log_var")
    mean, log_std = log_std_model.encode(x)
    mean2, half_log_var = log_var_model.encode(x)
    assert torch.equal(mean, mean2) and torch.equal(half_log_var, 0.5 * log_std)
    tuple_model = DecoderModel(decoder, 2, encoder=lambda x: encoder(x).chunk(2, -1))
    assert all(torch.equal(a, b) for a, b in zip(tuple_model.encode(x), (mean, log_std)))
    assert DecoderModel(decoder, 2).posterior_approximation() is None
    with pytest.raises(ValueError, match=r"both must be \(2, latent_dim=2\)"):
        DecoderModel(decoder, 2, encoder=lambda x: (x[:, :2], x[:, :3]))
    with pytest.raises(ValueError, match="or one tensor"):
        DecoderModel(decoder, 2, encoder=nn.Linear(6, 5))


class ShiftedNormalPrior:
    """A user's prior: N(mu, I), with the `Prior` protocol's log_prob and sample(shape, generator)."""

    def __init__(self, mu):
        self.mu = mu

    def log_prob(self, z):
        return -0.5 * ((z - self.mu) ** 2).sum(-1) - 0.5 * z.shape[-1] * math.log(2 * math.pi)

    def sample(self, shape, generator):
        return self.mu + torch.randn((*shape, self.mu.shape[0]), generator=generator)


def test_a_user_prior_gets_autograd_gradients():
    mu = torch.tensor([0.5, -1.0])
    model = DecoderModel(nn.Linear(2, 3), 2, prior=ShiftedNormalPrior(mu))
    z = model.sample_prior((4, 2), torch.Generator().manual_seed(0))
    value, grad = model.log_prior_and_grad(z)
    torch.testing.assert_close(grad, mu - z)
    torch.testing.assert_close(value, ShiftedNormalPrior(mu).log_prob(z))
    with pytest.raises(ValueError, match="explicit torch.Generator"):
        DecoderModel(nn.Linear(2, 3), 2, prior=torch.distributions.Normal(torch.zeros(2), torch.ones(2)))
    with pytest.raises(ValueError, match="log_prob"):
        DecoderModel(nn.Linear(2, 3), 2, prior=object())


def test_decoder_outputs_that_do_not_fit_the_likelihood_are_refused():
    with pytest.raises(ValueError, match="multiple of 2"):
        DecoderModel(nn.Linear(2, 7), 2, likelihood="gaussian")
    with pytest.raises(ValueError, match="multiple of 9"):
        DecoderModel(nn.Linear(2, 20), 2, likelihood="discretized_logistic_mixture", num_components=3)
    with pytest.raises(ValueError, match="one row of likelihood parameters per latent vector"):
        DecoderModel(lambda z: z.sum(0, keepdim=True), 2)
    with pytest.raises(ValueError, match="data_dim=5"):
        DecoderModel(nn.Linear(2, 6), 2, data_dim=5)
    with pytest.raises(ValueError, match="log_scale has 3 entries"):
        DecoderModel(nn.Linear(2, 6), 2, likelihood="gaussian", log_scale=torch.zeros(3))


def test_a_single_output_cut_into_blocks_says_how_it_was_read():
    """A decoder giving 8 means to likelihood='gaussian' without a scale is read as 4 means | 4 log-scales: data_dim=
    catches it when the model is built; without it, describe() and the data-shape error say how it was read."""
    means_only = nn.Linear(2, 8)
    model = DecoderModel(means_only, 2, likelihood="gaussian")
    assert model.data_dim == 4
    assert model.describe().endswith("; decoder output of 2 x 4 values read as means | log_scales)")
    with pytest.raises(ValueError) as info:
        model.check_data(torch.zeros(3, 8))
    message = str(info.value)
    assert r"shaped (N, 4) for this decoder, got (3, 8)" in message
    assert "read as 2 blocks of 4 (means | log_scales); if your decoder outputs means only, pass scale= or " in message
    assert "log_scale=, or data_dim=" in message
    with pytest.raises(ValueError, match=r"data_dim=8, but .* read as 2 blocks of 4 \(means \| log_scales\); if your"):
        DecoderModel(means_only, 2, likelihood="gaussian", data_dim=8)
    assert DecoderModel(means_only, 2, likelihood="gaussian", scale=0.5, data_dim=8).data_dim == 8
    confirmed = DecoderModel(means_only, 2, likelihood="gaussian", data_dim=4)  # the reading confirmed by the user
    assert confirmed.output_reading is None and "read as" not in confirmed.describe()
    with pytest.raises(ValueError) as info:
        confirmed.check_data(torch.zeros(3, 8))
    assert "read as" not in str(info.value)
    two_tensors = DecoderModel(lambda z: (z @ torch.ones(2, 4), z @ torch.ones(2, 4)), 2, likelihood="gaussian")
    assert two_tensors.output_reading is None  # a tuple says itself which tensor is which
    assert DecoderModel(means_only, 2).output_reading is None  # one block: nothing to misread
    mixture = DecoderModel(nn.Linear(2, 12), 2, likelihood="discretized_logistic_mixture", num_components=2)
    assert mixture.describe().endswith("decoder output of 6 x 2 values read as 2 logits | 2 means | 2 log-scales)")
    with pytest.raises(ValueError, match=r"data_dim=6, .*; the decoder must output 6 blocks of D values"):
        DecoderModel(nn.Linear(2, 12), 2, likelihood="discretized_logistic_mixture", num_components=2, data_dim=6)


def test_the_factory_examples_give_data_dim():
    """The examples users copy confirm how their decoder's output is read (docs/bdmc.md shows them whole)."""
    from tests.conftest import PROJECT_ROOT

    for name in ("plain_vae_factory.py", "gaussian_vae_factory.py"):
        source = (PROJECT_ROOT / "examples" / name).read_text()
        call = source[source.index("return DecoderModel(") :]
        assert "data_dim=784" in call, name
        assert source[source.index("def make_model") :] in (PROJECT_ROOT / "docs" / "bdmc.md").read_text(), name


class GlobalRNGPrior(ShiftedNormalPrior):
    def sample(self, shape, generator):
        return self.mu + torch.randn((*shape, self.mu.shape[0]))  # ignores the generator


class WrongSizeSamplePrior(ShiftedNormalPrior):
    def sample(self, shape, generator):
        return torch.randn((*shape, 3), generator=generator)


class UnsummedPrior(ShiftedNormalPrior):
    def log_prob(self, z):
        return -0.5 * (z - self.mu) ** 2  # per dimension: (*batch, latent_dim)


class ModulePrior(nn.Module):
    """N(mu, I) as an nn.Module: mu is a buffer, so .to() moves it with the decoder."""

    def __init__(self, mu):
        super().__init__()
        self.register_buffer("mu", mu)

    def log_prob(self, z):
        return -0.5 * ((z - self.mu) ** 2).sum(-1)

    def sample(self, shape, generator):
        noise = torch.randn((*shape, self.mu.shape[0]), generator=generator, dtype=self.mu.dtype, device=self.mu.device)
        return self.mu + noise


def test_a_user_prior_is_checked_when_the_model_is_built():
    mu = torch.tensor([0.5, -1.0])
    with pytest.raises(ValueError, match=r"to \(2, 2\); it must return one value per latent vector.*sum the log"):
        DecoderModel(nn.Linear(2, 3), 2, prior=UnsummedPrior(mu))
    with pytest.raises(ValueError, match=r"returned \(2, 3\); it must return \(\*shape, latent_dim\) = \(2, 2\)"):
        DecoderModel(nn.Linear(2, 3), 2, prior=WrongSizeSamplePrior(mu))
    with pytest.raises(ValueError, match=r"\(ShiftedNormalPrior\) failed on latents z of shape \(2, latent_dim=2\)"):
        DecoderModel(nn.Linear(2, 3), 2, prior=ShiftedNormalPrior(torch.zeros(3)))
    with pytest.raises(ValueError, match=r"samples are torch.float64 .* make ShiftedNormalPrior an nn.Module"):
        DecoderModel(nn.Linear(2, 3), 2, prior=ShiftedNormalPrior(mu.double()))
    with pytest.raises(ValueError, match="must draw only from the torch.Generator it is given"):
        DecoderModel(nn.Linear(2, 3), 2, prior=GlobalRNGPrior(mu))
    model = DecoderModel(nn.Linear(2, 3), 2, prior=ModulePrior(mu)).double()
    assert model.sample_prior((4,), torch.Generator().manual_seed(0)).dtype == torch.float64  # moved with the model
    DecoderModel(nn.Linear(2, 3).double(), 2, prior=ModulePrior(mu.double()))


def test_data_outside_the_support_is_refused_before_any_chain_runs():
    model = DecoderModel(nn.Linear(2, 4), 2)
    with pytest.raises(DataSupportError, match="binarize it"):
        DirectedPath(model, torch.full((3, 4), 0.5))
    with pytest.raises(ValueError, match=r"shaped \(N, 4\)"):
        model.check_data(torch.zeros(3, 5))


def test_moves_with_to_and_evaluates_in_eval_mode():
    decoder = nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.5), nn.Linear(8, 4))
    log_scale = nn.Parameter(torch.zeros(4))
    model = DecoderModel(decoder, 2, likelihood="gaussian", log_scale=log_scale).double()
    assert not decoder.training  # dropout off: the density is a function of z
    z = model.sample_prior((3,), torch.Generator().manual_seed(0))
    assert z.dtype == torch.float64 and log_scale.dtype == torch.float64
    x = model.sample_data(z, torch.Generator().manual_seed(1))
    assert torch.equal(model.log_likelihood(x, z), model.log_likelihood(x, z))
