"""Machines of typed layers, every RBM pairing of the four unit types: exact log Z and log f(v) against brute force
(a sum over every joint state, Gaussian units integrated on a grid), the energies of the checkpoint conventions
written out from the issue's formulas, DBMs, and what is refused."""

import itertools
import math

import numpy as np
import pytest
import torch
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine, rbm_arrays, rbm_from_arrays
from raise_eval.models.boltzmann.units import BernoulliLayer, GaussianLayer, SpinLayer

from raise_eval import exact
from raise_eval.paths.mixed import MixedPath, mixed_uniform_base
from tests.mixed_models import (
    PAIRINGS,
    brute_log_f,
    brute_log_partition,
    exact_visible_samples,
    tiny_dbm,
    tiny_pair,
)


@pytest.mark.parametrize("visible,hidden", PAIRINGS)
def test_exact_log_z_and_log_f_match_brute_force(visible, hidden):
    model = tiny_pair(visible, hidden)
    v = exact_visible_samples(model, 5, torch.Generator().manual_seed(1))
    assert exact.log_partition(model) == pytest.approx(brute_log_partition(model), abs=1e-8)
    torch.testing.assert_close(exact.log_unnormalized_visible(model, v), brute_log_f(model, v), rtol=0, atol=1e-8)
    log_p = exact.log_likelihood(model, v)
    torch.testing.assert_close(log_p, brute_log_f(model, v) - brute_log_partition(model), rtol=0, atol=1e-8)


def test_dbm_exact_values_match_the_sum_over_every_joint_state():
    model = tiny_dbm(("spin", "categorical", "bernoulli"))
    states = [layer.configurations(0, layer.num_configurations) for layer in model.layers]
    grid = list(itertools.product(*[range(s.shape[0]) for s in states]))
    layers = [states[l][[g[l] for g in grid]] for l in range(3)]
    table = model.log_unnormalized_joint(layers).reshape(*[s.shape[0] for s in states])
    assert exact.log_partition(model) == pytest.approx(float(torch.logsumexp(table.flatten(), 0)), abs=1e-10)
    log_f = torch.logsumexp(table.flatten(1), 1)
    torch.testing.assert_close(exact.log_unnormalized_visible(model, states[0]), log_f, rtol=0, atol=1e-10)


def _random(*shape, seed):
    return np.random.default_rng(seed).normal(size=shape)


def test_gaussian_bernoulli_energy_is_the_checkpoint_convention():
    """E(v, h) = sum_i (v_i - vbias_i)^2 / (2 sigma_i^2) - hbias . h - sum_ij (v_i / sigma_i) W_ij h_j."""
    W, vbias, hbias = _random(3, 2, seed=0), _random(3, seed=1), _random(2, seed=2)
    sigma = np.array([0.5, 1.0, 2.0])
    model = rbm_from_arrays("gaussian", "bernoulli", W, vbias, hbias, sigma=sigma, dtype=torch.float64)
    v, h = torch.tensor(_random(4, 3, seed=3)), torch.tensor([[0, 1], [1, 1], [0, 0], [1, 0]], dtype=torch.float64)
    energy = ((v - torch.tensor(vbias)) ** 2 / (2 * torch.tensor(sigma) ** 2)).sum(1) - h @ torch.tensor(hbias)
    energy = energy - (((v / torch.tensor(sigma)) @ torch.tensor(W)) * h).sum(1)
    torch.testing.assert_close(model.log_unnormalized_joint([v, h]), -energy)


def test_potts_energy_is_the_checkpoint_convention():
    """E = -sum_i vbias[i, v_i] - hbias . h - sum_ij W[i, v_i, j] h_j, W shaped (n_v, q, n_h)."""
    W, vbias, hbias = _random(4, 5, 3, seed=0), _random(4, 5, seed=1), _random(3, seed=2)
    model = rbm_from_arrays("categorical", "bernoulli", W, vbias, hbias, alphabet="ACGT-", dtype=torch.float64)
    codes = torch.tensor([[0, 4, 2, 1], [3, 3, 0, 2]])
    h = torch.tensor([[1, 0, 1], [0, 1, 1]], dtype=torch.float64)
    minus_energy = torch.zeros(2, dtype=torch.float64)
    for n in range(2):
        for i in range(4):
            a = int(codes[n, i])
            minus_energy[n] += vbias[i, a] + float(torch.tensor(W[i, a]) @ h[n])
        minus_energy[n] += float(torch.tensor(hbias) @ h[n])
    v = model.prepare_visible(codes)
    torch.testing.assert_close(model.log_unnormalized_joint([v, h]), minus_energy)
    assert model.layers[0].alphabet == "ACGT-"


def test_spin_energy_is_the_checkpoint_convention():
    W, vbias, hbias = _random(3, 2, seed=0), _random(3, seed=1), _random(2, seed=2)
    model = rbm_from_arrays("spin", "spin", W, vbias, hbias, dtype=torch.float64)
    v = torch.tensor([[1, -1, 1], [-1, -1, 1]], dtype=torch.float64)
    h = torch.tensor([[1, -1], [-1, 1]], dtype=torch.float64)
    minus_energy = v @ torch.tensor(vbias) + h @ torch.tensor(hbias) + ((v @ torch.tensor(W)) * h).sum(1)
    torch.testing.assert_close(model.log_unnormalized_joint([v, h]), minus_energy)


@pytest.mark.parametrize("visible,hidden", PAIRINGS)
def test_the_arrays_of_every_pairing_round_trip(visible, hidden):
    model = tiny_pair(visible, hidden)
    arrays = rbm_arrays(model)
    assert str(arrays["visible"]) == visible and str(arrays["hidden"]) == hidden
    kwargs = {k: arrays[k] for k in ("sigma", "hsigma", "alphabet") if k in arrays}
    again = rbm_from_arrays(visible, hidden, arrays["W"], arrays["vbias"], arrays["hbias"], **kwargs)
    assert again.layers == model.layers
    for a, b in zip(again.weights + again.biases, model.weights + model.biases):
        torch.testing.assert_close(a, b)


def test_gaussian_layers_must_make_a_density():
    with pytest.raises(ValueError, match="not positive definite.*lower the weights"):
        rbm_from_arrays(
            "gaussian", "gaussian", np.eye(2) * 1.5, np.zeros(2), np.zeros(2), sigma=np.ones(2), hsigma=np.ones(2)
        )
    model = rbm_from_arrays(
        "gaussian", "gaussian", np.eye(2) * 0.9, np.zeros(2), np.zeros(2), sigma=np.ones(2), hsigma=np.ones(2)
    )
    # eigenvalues of the precision: 1 +- 0.9, so log Z = 4 log(2 pi) / 2 - log(0.19 ^ 2) / 2
    assert exact.log_partition(model) == pytest.approx(2 * math.log(2 * math.pi) - math.log(0.19), abs=1e-12)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(sigma=np.array([1.0, 0.0, 1.0])), "sigma must be positive"),
        (dict(), "needs sigma"),
        (dict(hsigma=np.ones(2)), "hsigma belongs to a Gaussian hidden layer"),
        (dict(alphabet="AB"), "alphabet belongs to a categorical visible layer"),
    ],
)
def test_bad_parameters_are_refused_naming_the_key(kwargs, match):
    kwargs = {"sigma": np.ones(3), **kwargs} if "sigma" not in kwargs and match != "needs sigma" else kwargs
    with pytest.raises(ValueError, match=match):
        rbm_from_arrays("gaussian", "bernoulli", np.zeros((3, 2)), np.zeros(3), np.zeros(2), **kwargs)


def test_a_categorical_w_must_fit_q():
    with pytest.raises(ValueError, match=r"W has shape \(3, 5, 2\).*\(n_v, q, n_h\)"):
        rbm_from_arrays("categorical", "bernoulli", np.zeros((3, 5, 2)), np.zeros((3, 4)), np.zeros(2))


def test_the_path_ends_are_the_base_and_the_model():
    model = tiny_pair("gaussian", "categorical")
    path = MixedPath(model)
    v = exact_visible_samples(model, 3, torch.Generator().manual_seed(0))
    state = path.state_from_layers([v, None])
    torch.testing.assert_close(path.log_density(state, 1.0), exact.log_unnormalized_visible(model, v))
    base = MixedBoltzmannMachine(model.layers, [torch.zeros_like(model.weights[0])], mixed_uniform_base(model))
    torch.testing.assert_close(path.log_density(state, 0.0), base.log_unnormalized_marginal([v, None]))
    assert path.log_partition_initial == pytest.approx(exact.log_partition(base), abs=1e-12)
    ratio = path.log_density_ratio(state, 0.3, 0.7)
    torch.testing.assert_close(ratio, path.log_density(state, 0.7) - path.log_density(state, 0.3))


def test_mismatched_shapes_and_parameters_are_refused():
    with pytest.raises(ValueError, match=r"weights\[0\] has shape \(3, 2\)"):
        MixedBoltzmannMachine([SpinLayer(2), BernoulliLayer(2)], [torch.zeros(3, 2)], [torch.zeros(2), torch.zeros(2)])
    with pytest.raises(ValueError, match="precisions 1 / sigma"):
        MixedBoltzmannMachine(
            [GaussianLayer(2), BernoulliLayer(2)],
            [torch.zeros(2, 2)],
            [torch.tensor([[0.0, 0.0], [1.0, -1.0]]), torch.zeros(2)],
        )
    with pytest.raises(ValueError, match="NaN or infinite"):
        MixedBoltzmannMachine(
            [SpinLayer(2), BernoulliLayer(2)], [torch.full((2, 2), float("nan"))], [torch.zeros(2), torch.zeros(2)]
        )


@pytest.mark.parametrize("visible", ["gaussian", "categorical", "bernoulli"])
def test_sampled_bernoulli_neighbours_take_the_binary_routes_and_probabilities_never_do(visible):
    """The Gibbs step's products from Bernoulli samples go the binary machine's way (torch.mm, oneDNN or the table of
    subset sums, here forced to the table): equal to torch.mm's up to rounding; without `sampled` (neighbours that
    may hold probabilities, e.g. a mean-field pass) the table route is never taken, whatever is forced."""
    from raise_eval.models.boltzmann.mixed import random_mixed_machine
    from raise_eval.models.boltzmann.units import BernoulliLayer, CategoricalLayer, GaussianLayer

    from raise_eval.runtime.product_routes import forced_route, route_choices

    g = torch.Generator().manual_seed(3)
    first = {"gaussian": GaussianLayer(12), "categorical": CategoricalLayer(4, 3), "bernoulli": BernoulliLayer(12)}
    model = random_mixed_machine([first[visible], BernoulliLayer(10)], weight_std=0.3, generator=g)
    h = (torch.rand(64, 10, generator=g) < 0.5).to(model.dtype)
    probs = torch.rand(64, 10, generator=g, dtype=model.dtype)
    layers = [None, h]
    with forced_route("mm"):
        reference = model.natural_input(layers, 0, sampled=True)
        mean_field = model.unscaled_input([None, probs], 0)
    with forced_route("table"):
        table = model.natural_input(layers, 0, sampled=True)
        assert torch.equal(model.unscaled_input([None, probs], 0), mean_field)  # not sampled: torch.mm's bits
    torch.testing.assert_close(table, reference, rtol=1e-5, atol=1e-5)
    width = model.layer_sizes[0]
    chosen = [c for c in route_choices() if c.cols == width and c.inner == (10,) and c.binary and c.route == "table"]
    assert chosen, route_choices()  # the sampled product did take the forced table route
