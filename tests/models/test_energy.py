"""A user's energy as a model (`EnergyModel`): log f = -E on every support, the energy refused once, by name, for
what would make any estimate wrong (with the user's file and line for an exception), and the bases normalized
exactly (the truncated Gaussian's log-density integrates to one; sites' probabilities sum to one)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from raise_eval.models import EnergyModel, GaussianBase, SiteBase, categorical, fit_base
from raise_eval.models.contracts import FAMILIES
from raise_eval.models.energy import as_support, default_base

import raise_eval
from tests.energy_models import MLPEnergy, neural_energy


def test_the_family_is_declared_and_exported():
    assert raise_eval.EnergyModel is EnergyModel and "energy" in FAMILIES
    model = neural_energy("binary", 4)
    assert vars(EnergyModel)["family"] == "energy" and model.family == "energy"
    assert model.describe() == "energy binary(4) MLPEnergy"
    tensors, scale = model.digest_parts()
    assert len(tensors) == 4 and scale == 1.0
    assert model.to(dtype=torch.float32).dtype == torch.float32 and model.dtype == torch.float64


@pytest.mark.parametrize("kind", ["binary", "spin", "categorical"])
def test_log_f_is_minus_the_energy_of_what_the_energy_receives(kind):
    model = neural_energy(kind, 3, q=3)
    if kind == "categorical":
        x = torch.tensor([[0, 2, 1], [1, 1, 0]])
        received = torch.nn.functional.one_hot(x, 3).double()
    else:
        low = 0.0 if kind == "binary" else -1.0
        x = torch.tensor([[low, 1.0, 1.0], [1.0, low, low]], dtype=torch.float64)
        received = x
    expected = -model.energy(received)
    torch.testing.assert_close(model.log_unnormalized(x), expected)
    # any leading batch shape
    assert model.log_unnormalized(x.unsqueeze(0).expand(2, 2, 3)).shape == (2, 2)
    state = model.state_from_data(x)
    assert state.dtype == torch.int64 and torch.equal(model.data_from_state(state).to(x.dtype), x)


def test_real_support_and_its_box():
    model = EnergyModel(lambda x: (x**2).sum((1, 2, 3)), support=("real", 0.0, 1.0), event_shape=(1, 2, 2),
                        dtype=torch.float64)  # fmt: skip
    assert model.support.bounded and model.describe().startswith("energy real[0, 1](1x2x2)")
    x = torch.full((3, 1, 2, 2), 0.5, dtype=torch.float64)
    torch.testing.assert_close(model.log_unnormalized(x), torch.full((3,), -1.0, dtype=torch.float64))
    log_f, grad = model.log_f_and_grad(x)
    torch.testing.assert_close(grad, -2 * x)
    with pytest.raises(ValueError, match=r"x must lie in the support's box real\[0, 1\], found 0.5..1.5"):
        model.log_unnormalized(x + torch.tensor([0.0, 1.0]).repeat(2).reshape(1, 1, 2, 2))
    shaped = r"x must be shaped \(\.\.\., 1, 2, 2\) \(the model's event_shape\), got \(3, 4\)"
    with pytest.raises(ValueError, match=shaped):
        model.log_unnormalized(torch.zeros(3, 4))


def _bad_energy(x):
    return x.sum(-1) + torch.zeros(2)  # a shape error, raised on this line


@pytest.mark.parametrize(
    "energy, support, message",
    [
        (MLPEnergy, "binary", r"energy is the class MLPEnergy, not a module: pass an instance, MLPEnergy\(\.\.\.\)"),
        (torch.nn.Sequential(torch.nn.Linear(4, 1)).double(), "binary",
         r"one energy per example, shaped \(3,\), got \(3, 1\) \(a batch shaped \(3, 4\); squeeze a trailing"),
        (lambda x: x.sum(), "spin", r"one energy per example, shaped \(3,\), got \(\)"),
        (lambda x: x.sum(-1) * float("nan"), ("real", 0.0, 1.0), "the energy is NaN or -inf .* at 3 of the 3 probe"),
        (lambda x: -x.sum(-1) / x.sum(-1).clamp(max=0), ("real", 0.0, 1.0), "NaN or -inf"),
        (lambda x: x.sum(-1).long(), "binary", "must return floating point energies, got torch.int64"),
        (lambda x: x.detach().sum(-1), "real", "the energy is not differentiable in its input"),
        (torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(4, 1), torch.nn.Flatten(0)).double(), "real",
         r"different values for the same input \(dropout in training mode\? call energy.eval\(\)\)"),
        (torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1),
                             torch.nn.Flatten(0)).double(), "real", r"on a batch of one example \(batch norm"),
    ],
    ids=["a class", "shape (N, 1)", "a scalar", "NaN", "-inf", "integers", "no gradient", "dropout", "batch norm"],
)
def test_a_broken_energy_is_refused_with_one_line_saying_what_is_wrong(energy, support, message):
    if isinstance(energy, torch.nn.Module):
        energy.train()
    with pytest.raises(ValueError, match=message) as caught:
        EnergyModel(energy, support=support, event_shape=(4,), dtype=torch.float64)
    assert "\n" not in str(caught.value)


def test_an_energy_that_assumes_a_batch_size_is_refused():
    with pytest.raises(ValueError, match=r"shaped \(1,\), got \(3,\) on a batch of one example \(an energy must not"):
        EnergyModel(lambda x: x.sum(-1) + torch.zeros(3), "binary", (4,), dtype=torch.float64)


def test_an_exception_in_the_energy_names_the_user_s_file_and_line():
    with pytest.raises(ValueError) as caught:
        EnergyModel(_bad_energy, support="binary", event_shape=(4,), dtype=torch.float64)
    text = str(caught.value)
    assert text.startswith("the energy raised RuntimeError: The size of tensor a (3) must match")
    assert f"at {__file__}, line " in text and text.endswith("(tried on a probe batch; fix it there)")
    assert "return x.sum(-1) + torch.zeros(2)" in text


@pytest.mark.parametrize(
    "support, message",
    [
        ("categorical", r"needs its number of states: support=categorical\(q\)"),
        (("real", 1.0, 0.0), r"finite numbers low < high"),
        ("reals", "support must be 'real', \\('real', low, high\\), 'binary', 'spin' or categorical\\(q\\)"),
    ],
)
def test_supports_are_checked(support, message):
    with pytest.raises(ValueError, match=message):
        as_support(support)
    with pytest.raises(ValueError, match="integer q of at least 2"):
        categorical(1)
    with pytest.raises(ValueError, match=r"dtype is torch.float64 but the energy's parameters are torch.float32"):
        EnergyModel(torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.Flatten(0)), "binary", (4,),
                    dtype=torch.float64)  # fmt: skip
    with pytest.raises(ValueError, match="event_shape must be positive integers"):
        EnergyModel(lambda x: x.sum(-1), "binary", event_shape=(0,))


# the last three: boxes 10, 15 and 40 standard deviations from the mean, where the normal CDF underflows or
# loses its digits (draws must then come from the logarithm of the CDF)
@pytest.mark.parametrize(
    "mean, std", [(0.5, 0.2), (0.9, 0.05), (3.0, 0.5), (-2.0, 0.3), (0.2, 50.0), (-0.5, 0.05), (1.3, 0.02), (-2.0, 0.05)]
)
def test_the_truncated_gaussian_base_is_normalized_and_sampled_exactly(mean, std):
    base = GaussianBase(torch.tensor([mean]), torch.tensor([std]), 0.0, 1.0)
    grid = torch.linspace(0, 1, 400_001, dtype=torch.float64).unsqueeze(1)
    density = base.log_prob(grid).exp()
    assert float(torch.trapezoid(density, grid[:, 0])) == pytest.approx(1.0, abs=1e-6)
    draws = base.sample((40_000,), torch.Generator().manual_seed(0), torch.float64)
    assert bool(((draws >= 0) & (draws <= 1)).all())
    exact_mean = float(torch.trapezoid(density * grid[:, 0], grid[:, 0]))
    exact_sd = math.sqrt(float(torch.trapezoid(density * (grid[:, 0] - exact_mean) ** 2, grid[:, 0])))
    # 5 standard errors: a false alarm about once in 1.7 million runs
    assert abs(float(draws.mean()) - exact_mean) < 5 * exact_sd / math.sqrt(40_000)
    assert float(base.log_prob(torch.tensor([[1.5]], dtype=torch.float64))) == -math.inf


def test_bases_fitted_to_data_and_the_defaults():
    model = neural_energy("categorical", 3, q=3)
    data = torch.tensor([[0, 1, 2], [0, 2, 2], [0, 1, 1]])
    base = fit_base(model, data, pseudocount=0.3)
    assert isinstance(base, SiteBase) and base.shape == (3,)
    torch.testing.assert_close(base.log_probs[0].exp(), torch.tensor([0.8, 0.1, 0.1], dtype=torch.float64))
    codes = torch.cartesian_prod(*[torch.arange(3)] * 3)
    assert float(base.log_prob(codes).exp().sum()) == pytest.approx(1.0, abs=1e-12)
    real = EnergyModel(lambda x: (x**2).sum(-1), ("real", 0.0, 1.0), (2,), dtype=torch.float64)
    fitted = fit_base(real, torch.tensor([[0.2, 0.0], [0.4, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(fitted.mean, torch.tensor([0.3, 0.0], dtype=torch.float64))
    torch.testing.assert_close(fitted.std, torch.tensor([0.1, 0.01], dtype=torch.float64))  # the floor: 1e-2 x width
    assert (fitted.low, fitted.high) == (0.0, 1.0) and default_base(real).std.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="base of a categorical\\(3\\) energy must be a SiteBase, got a GaussianBase"):
        EnergyModel(model.energy, categorical(3), (3,), base=fitted)
    with pytest.raises(ValueError, match="training data must hold integer codes 0..2"):
        fit_base(model, data + 1)


def test_a_base_is_not_fitted_to_training_data_where_the_energy_is_nan():
    """A new user's finding (issue 43): an energy NaN at some inputs only (here x_0 > 2) passes the probe batch, and
    `fit_base` fitted the base to training data the model gives no density, the run failing later inside AIS."""
    model = EnergyModel(lambda x: (x**2).sum(-1) + torch.log(2.0 - x[:, 0]) * 0, "real", (2,), dtype=torch.float64)
    train = torch.tensor([[0.0, 0.0], [1.0, 0.5], [3.0, 0.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"the energy is NaN at example 2 of training data \(NaN at 1 of its 3 "):
        fit_base(model, train)


def _raises_beyond_two(x):
    if bool((x.abs() > 2).any()):
        raise RuntimeError("outside the range I was trained on")
    return (x**2).sum(-1)


def test_an_energy_that_raises_at_a_training_example_is_not_said_to_have_failed_on_the_probe_batch():
    """A new user's finding (issue 43): an energy that raises only at some training examples was refused with '...
    on training data at FILE, line N (tried on a probe batch; fix it there)': it was not the probe batch."""
    model = EnergyModel(_raises_beyond_two, "real", (2,), dtype=torch.float64)
    train = torch.tensor([[0.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="outside the range I was trained on on training data at ") as error:
        fit_base(model, train)
    assert "probe batch" not in str(error.value) and str(error.value).endswith("(fix it there)"), str(error.value)


@pytest.mark.parametrize("low, high", [(1.0, 0.0), (0.0, None), (None, 1.0), (0.0, math.inf), (0.5, 0.5)])
def test_a_gaussian_base_with_a_box_that_is_not_one_is_refused(low, high):
    mean, std = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"a GaussianBase's box needs finite low < high \(or neither\), got"):
        GaussianBase(mean, std, low, high)


def test_real_data_of_an_integer_dtype_or_in_numpy_are_told_to_convert():
    """A new user's findings (issue 43): a uint8 tensor of images given to a real support was refused as 'must hold
    finite real numbers', which its finite values are; a NumPy array, with no word of how to convert it."""
    model = EnergyModel(lambda x: (x**2).sum(-1), ("real", 0.0, 1.0), (2,), dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^x must hold real numbers of a floating point dtype, got torch.uint8: "
                                         r"convert them \(x.to\(torch.float64\)\)$"):  # fmt: skip
        model.state_from_data(torch.ones(3, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"^x must be a tensor shaped \(..., 2\), got a ndarray \(convert it: "
                                         r"torch.from_numpy\(x\)\)$"):  # fmt: skip
        model.state_from_data(np.ones((3, 2)))


def test_a_model_shows_what_it_is():
    """A new user's finding (issue 43): in a notebook an EnergyModel showed as '<...EnergyModel object at 0x...>'."""
    model = neural_energy("binary", 4)
    assert repr(model) == ("EnergyModel(MLPEnergy, support='binary', event_shape=(4,), dtype=torch.float64, "
                           "device=cpu)")  # fmt: skip


def test_energies_too_large_for_their_dtype_at_the_data_are_refused():
    """A new user's finding (issue 43): E = -1e8 + |x|^2 / 2 in float32 resolves energies only to about 8 nats, and
    `raise-eval evaluate --model` closed its sandwich at [-5.84, -5.66], excluding the truth -5.567."""
    train = torch.tensor([[0.0, 0.5], [1.0, -1.0], [0.2, 0.3]])
    single = EnergyModel(lambda x: -1e8 + 0.5 * (x**2).sum(-1), "real", (2,))
    with pytest.raises(ValueError, match=r"^the energy is 1e\+08 in magnitude at example \d of training data, where "
                                         r"torch.float32 resolves energies only to about 12 nats, .* subtract a "
                                         r"constant from the energy"):  # fmt: skip
        fit_base(single, train)
    double = EnergyModel(lambda x: -1e8 + 0.5 * (x**2).sum(-1), "real", (2,), dtype=torch.float64)
    assert isinstance(fit_base(double, train.double()), GaussianBase)  # float64 resolves 1.5e-8 nats there
    shifted = EnergyModel(lambda x: 1e3 + 0.5 * (x**2).sum(-1), "real", (2,))  # 1.2e-4 nats: accepted
    assert isinstance(fit_base(shifted, train), GaussianBase)
