"""Layer types one by one: each log-normalizer against a sum over every state (or a numerical integral for Gaussian
units), each sampler against its exact conditional (chi-square: false-alarm rate about 1e-4 per test, fixed seeds),
the accurate increments against plain differences, the data-fitted bases, and the forms of data each layer reads."""

import math

import pytest
import torch
from raise_eval.models.boltzmann.units import (
    PROTEIN_ALPHABET,
    BernoulliLayer,
    CategoricalLayer,
    GaussianLayer,
    SpinLayer,
    UnitDataError,
    layer_from_config,
    make_layer,
    unit_type,
)

from tests.mixed_models import normal_cdf
from tests.statistics import assert_counts_match

DISCRETE = [BernoulliLayer(3), SpinLayer(3), CategoricalLayer(2, 3)]


def _params(layer, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    if layer.kind == "gaussian":
        lam = torch.rand(layer.size, generator=g, dtype=dtype) + 0.5
        return torch.stack([torch.randn(layer.size, generator=g, dtype=dtype) * lam, lam])
    return torch.randn(layer.width, generator=g, dtype=dtype)


def _inputs(layer, rows=4, seed=1, scale=1.5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, layer.width, generator=g, dtype=torch.float64) * scale


@pytest.mark.parametrize("layer", DISCRETE, ids=lambda layer: layer.kind)
def test_log_normalizer_is_the_sum_over_every_state(layer):
    params, u = _params(layer), _inputs(layer)
    states = layer.configurations(0, layer.num_configurations)
    assert states.shape == (layer.num_configurations, layer.width)
    table = layer.log_potential(params, states).unsqueeze(0) + u @ states.t()
    torch.testing.assert_close(layer.log_normalizer(params, u), torch.logsumexp(table, 1), rtol=0, atol=1e-12)
    torch.testing.assert_close(layer.log_normalizer(params), torch.logsumexp(layer.log_potential(params, states), 0))


@pytest.mark.parametrize("units", [1, 2])
def test_gaussian_log_normalizer_is_the_integral(units):
    """Trapezoid rule over [-12, 12]^units (spectrally accurate for these smooth, fast-decaying integrands)."""
    layer = GaussianLayer(units)
    params, u = _params(layer), _inputs(layer, scale=1.0)
    x = torch.linspace(-12, 12, 1201, dtype=torch.float64)
    h = float(x[1] - x[0])
    grid = torch.cartesian_prod(*[x] * units).reshape(-1, units)
    table = layer.log_potential(params, grid).unsqueeze(0) + u @ grid.t()
    integral = torch.logsumexp(table, 1) + units * math.log(h)
    torch.testing.assert_close(layer.log_normalizer(params, u), integral, rtol=0, atol=1e-9)


@pytest.mark.parametrize("layer", DISCRETE, ids=lambda layer: layer.kind)
def test_conditional_samples_are_exact(layer):
    params, u = _params(layer), _inputs(layer, rows=1)[0]
    n = 200_000
    x = layer.sample(params, u.expand(n, -1).contiguous(), torch.Generator().manual_seed(3))
    states = layer.configurations(0, layer.num_configurations)
    probs = torch.softmax(layer.log_potential(params, states) + states @ u, 0)
    counts = torch.bincount(layer.configuration_index(x), minlength=layer.num_configurations)
    assert_counts_match(counts, probs)
    torch.testing.assert_close(layer.mean(params, u), probs @ states)


def test_gaussian_samples_are_exact():
    """Chi-square over 8 equiprobable bins of each unit's exact conditional normal."""
    layer = GaussianLayer(2)
    params, u = _params(layer), _inputs(layer, rows=1)[0]
    n = 100_000
    x = layer.sample(params, u.expand(n, -1).contiguous(), torch.Generator().manual_seed(4))
    mean, sd = (params[0] + u) / params[1], params[1].rsqrt()
    torch.testing.assert_close(layer.mean(params, u), mean)
    for i in range(2):
        cell = (normal_cdf((x[:, i] - mean[i]) / sd[i]) * 8).long().clamp(0, 7)
        assert_counts_match(torch.bincount(cell, minlength=8), torch.full((8,), 1 / 8, dtype=torch.float64))


@pytest.mark.parametrize("layer", [*DISCRETE, GaussianLayer(2)], ids=lambda layer: layer.kind)
@pytest.mark.parametrize("step", [1e-4, 0.3, 5.0])
def test_increments_are_the_differences(layer, step):
    """The float64 difference of two float64 log-normalizers; in float32 (the annealing loop's precision) the
    increment of a small step is accurate relative to the increment itself."""
    params, u = _params(layer), _inputs(layer)
    g = torch.Generator().manual_seed(7)
    direction = torch.randn(layer.param_shape, generator=g, dtype=torch.float64)
    if layer.kind == "gaussian":
        direction[1] = direction[1].abs() * 0.1  # precisions stay positive
    du = u * step
    expected = layer.log_normalizer(params + step * direction, u + du) - layer.log_normalizer(params, u)
    got = layer.log_normalizer_increment(params, u, step * direction, du)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    if layer.discrete and step <= 0.3:
        f32 = layer.log_normalizer_increment(params.float(), u.float(), (step * direction).float(), du.float())
        torch.testing.assert_close(f32, expected, rtol=1e-5, atol=1e-6 * step)


@pytest.mark.parametrize("layer", [*DISCRETE, GaussianLayer(2)], ids=lambda layer: layer.kind)
def test_the_fitted_base_reproduces_the_data(layer):
    """The base fitted to data has the data's means of the sufficient statistics (frequencies, spin means, a
    Gaussian's mean and variance), up to the clipping at 1e-3."""
    g = torch.Generator().manual_seed(9)
    params = _params(layer)
    data = layer.sample(params, None, g, batch_shape=(5000,))
    stats = layer.statistics(data)
    base = layer.base_params(stats, params)
    if layer.kind == "gaussian":
        mean, lam = GaussianLayer.mean_and_precision(base)
        torch.testing.assert_close(mean, stats[0])
        torch.testing.assert_close(1 / lam, stats[1])
    else:
        torch.testing.assert_close(layer.mean(base), stats, rtol=0, atol=2e-3)


def test_a_gaussian_base_keeps_a_spread_where_the_data_have_none():
    layer = GaussianLayer(2)
    params = torch.tensor([[0.0, 0.0], [4.0, 4.0]], dtype=torch.float64)  # sigma 0.5
    data = torch.tensor([[1.0, 0.0], [1.0, 2.0]], dtype=torch.float64)  # the first unit constant
    base = layer.base_params(layer.statistics(data), params)
    assert float(1 / base[1, 0]) == pytest.approx(0.01 * 0.25)
    assert float(1 / base[1, 1]) == pytest.approx(1.0)


def test_the_forms_of_data_each_layer_reads():
    spin = SpinLayer(3)
    pm = torch.tensor([[1.0, -1.0, 1.0]])
    zero_one = torch.tensor([[1, 0, 1]])
    torch.testing.assert_close(spin.prepare(zero_one).float(), pm)
    torch.testing.assert_close(spin.prepare(pm), pm)
    with pytest.raises(UnitDataError, match="both 0 and -1"):
        spin.prepare(torch.tensor([[1.0, 0.0, -1.0]]))
    with pytest.raises(UnitDataError, match="spins"):
        spin.prepare(torch.tensor([[1.0, 2.0, -1.0]]))
    cat = CategoricalLayer(2, 3)
    codes = torch.tensor([[0, 2], [1, 1]])
    one_hot = cat.prepare(codes)
    torch.testing.assert_close(one_hot, torch.tensor([[1, 0, 0, 0, 0, 1], [0, 1, 0, 0, 1, 0]], dtype=torch.float64))
    torch.testing.assert_close(cat.prepare(one_hot), one_hot)
    torch.testing.assert_close(cat.configuration_index(one_hot), torch.tensor([0 + 3 * 2, 1 + 3 * 1]))
    with pytest.raises(UnitDataError, match="codes 0 .. 2"):
        cat.prepare(torch.tensor([[0, 3]]))
    with pytest.raises(UnitDataError, match="one-hot"):
        cat.prepare(torch.ones(1, 6))
    with pytest.raises(UnitDataError, match="codes shaped"):
        cat.prepare(torch.zeros(1, 5))
    with pytest.raises(UnitDataError, match="NaN or infinite"):
        GaussianLayer(2).prepare(torch.tensor([[0.5, float("nan")]]))
    with pytest.raises(UnitDataError, match="binary"):
        BernoulliLayer(2).prepare(torch.tensor([[0.5, 1.0]]))


@pytest.mark.parametrize("layer", DISCRETE, ids=lambda layer: layer.kind)
def test_configurations_and_their_index(layer):
    states = layer.configurations(0, layer.num_configurations)
    torch.testing.assert_close(layer.configuration_index(states), torch.arange(layer.num_configurations))
    torch.testing.assert_close(layer.configurations(3, 5), states[3:5])
    assert len({tuple(row.tolist()) for row in states}) == layer.num_configurations


def test_layer_types_by_name():
    assert unit_type("Potts") == "categorical" and unit_type("binary") == "bernoulli"
    with pytest.raises(ValueError, match="unknown unit type 'spinn'"):
        unit_type("spinn")
    layer = make_layer("categorical", 53, alphabet=PROTEIN_ALPHABET)
    assert layer.q == 21 and layer.width == 53 * 21
    assert layer_from_config(layer.to_config()) == layer
    with pytest.raises(ValueError, match="q = 3 symbols"):
        CategoricalLayer(2, 3, alphabet="AB")
    with pytest.raises(ValueError, match="categorical layers"):
        make_layer("spin", 3, q=2)
