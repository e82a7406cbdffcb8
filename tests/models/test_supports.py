"""Layers declare their support; exact answers and normalizability dispatch on it and refuse layers they do not know.

A rectified (nonnegative) layer stands for the next continuous layer type someone adds: the exact code must refuse
it by name, never integrate it as if it were Gaussian, and the cost model must say why instead of pricing a
sentinel number of states."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from raise_eval.models import MixedBoltzmannMachine
from raise_eval.models.boltzmann import supports
from raise_eval.models.boltzmann.layer import Layer
from raise_eval.models.boltzmann.units import BernoulliLayer, CategoricalLayer, GaussianLayer, SpinLayer

from raise_eval import exact


@dataclass(frozen=True)
class ExponentialLayer(Layer):
    """Nonnegative units with p(x | u) = rate exp(-rate x), rate = softplus(-(b + u)) > 0: a continuous layer that is
    not normal, the kind of layer a user might add (it samples and normalizes exactly, so the model itself works)."""

    kind = "exponential"
    support = supports.NONNEGATIVE

    def log_normalizer(self, params, u=None):
        rate = F.softplus(-self._add(params, u)) + 1e-3
        return (-torch.log(rate)).sum(-1)


class Undeclared(Layer):
    kind = "undeclared"


def test_each_unit_type_declares_its_support():
    assert BernoulliLayer(3).support == supports.BINARY
    assert SpinLayer(3).support == supports.SPIN
    assert CategoricalLayer(2, 5).support == supports.one_hot(5)
    assert GaussianLayer(2).support == supports.REAL
    assert [
        layer.discrete for layer in (BernoulliLayer(1), SpinLayer(1), CategoricalLayer(1, 3), GaussianLayer(1))
    ] == [
        True,
        True,
        True,
        False,
    ]
    assert supports.one_hot(21).describe() == "one-hot(21)" and supports.SPIN.describe() == "{-1, 1}"
    assert supports.BINARY.measure == "probability" and supports.REAL.measure == "density"
    assert supports.one_hot(4).states_per_unit == 4 and supports.BINARY.states_per_unit == 2
    with pytest.raises(ValueError, match="continuum"):
        supports.NONNEGATIVE.states_per_unit  # noqa: B018
    with pytest.raises(ValueError, match="q >= 2"):
        supports.one_hot(1)


def test_a_layer_without_a_declared_support_says_so():
    with pytest.raises(NotImplementedError, match="must declare its support"):
        Undeclared(2).support  # noqa: B018


def _bernoulli_exponential(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    layers = [BernoulliLayer(3), ExponentialLayer(2)]
    weights = [0.1 * torch.randn(3, 2, generator=g, dtype=dtype)]
    biases = [torch.zeros(3, dtype=dtype), -torch.ones(2, dtype=dtype)]
    return MixedBoltzmannMachine(layers, weights, biases)


def test_exact_answers_refuse_a_continuous_layer_they_do_not_know():
    model = _bernoulli_exponential()
    # Before supports were declared, "not discrete" was read as "Gaussian": log Z came out of the Gaussian formulas.
    for compute in (
        lambda: exact.log_partition(model),
        lambda: exact.log_unnormalized_visible(model, torch.zeros(1, 3, dtype=torch.float64)),
        lambda: exact.annealing_model_marginal(model, [torch.zeros(3), -torch.ones(2)], torch.tensor([0.0, 1.0])),
    ):
        with pytest.raises(ValueError, match=r"layer 1, exponential\(2\) \(support nonnegative\)"):
            compute()


def test_the_cost_of_an_impossible_enumeration_is_a_refusal_not_a_sentinel():
    cost = exact.exact_cost(_bernoulli_exponential(), 5)
    assert not cost.enumerable
    assert "exponential(2)" in cost.refusal and "neither enumerated nor integrated" in cost.refusal
    assert cost.log_z_units == cost.log_f_units == 0  # no 2^62 "states" reach a message
    with pytest.raises(ValueError, match="exponential"):
        exact.log_f_units(_bernoulli_exponential())
    # a machine with a route keeps 0.3's keys in its JSON
    gaussian = MixedBoltzmannMachine(
        [BernoulliLayer(3), GaussianLayer(2)],
        [torch.zeros(3, 2, dtype=torch.float64)],
        [torch.zeros(3, dtype=torch.float64), torch.stack([torch.zeros(2), torch.ones(2)]).double()],
    )
    assert exact.exact_cost(gaussian, 1).enumerable and "refusal" not in exact.exact_cost(gaussian, 1).to_dict()


def test_the_planner_says_why_exact_values_are_skipped():
    from raise_eval.evaluation.plan import _exact_decision
    from raise_eval.evaluation.settings import evaluate_settings

    use, note = _exact_decision(_bernoulli_exponential(), evaluate_settings(None, {}), 5)
    assert not use and "exponential(2)" in note and "2^" not in note


def test_adjacent_continuous_layers_are_checked_only_where_the_conditionals_are_normal():
    dtype = torch.float64
    gaussian = torch.stack([torch.zeros(2), torch.ones(2)]).to(dtype)
    # two Gaussian layers: the joint precision decides (weak weights: normalizable)
    MixedBoltzmannMachine([GaussianLayer(2), GaussianLayer(2)], [0.1 * torch.eye(2, dtype=dtype)], [gaussian, gaussian])
    with pytest.raises(ValueError, match="not positive definite"):
        MixedBoltzmannMachine(
            [GaussianLayer(2), GaussianLayer(2)], [3 * torch.eye(2, dtype=dtype)], [gaussian, gaussian]
        )
    # a Gaussian next to a continuous layer nothing here can vouch for: refused, naming it
    with pytest.raises(ValueError, match=r"layer 1 \(exponential\(2\)\) is not one"):
        MixedBoltzmannMachine(
            [GaussianLayer(2), ExponentialLayer(2)],
            [0.1 * torch.eye(2, dtype=dtype)],
            [gaussian, -torch.ones(2, dtype=dtype)],
        )


def test_probability_or_density_follows_the_visible_support():
    model = _bernoulli_exponential()
    assert model.continuous is False
    g = torch.stack([torch.zeros(2), torch.ones(2)]).double()
    m = MixedBoltzmannMachine([GaussianLayer(2), BernoulliLayer(3)], [torch.zeros(2, 3, dtype=torch.float64)],
                              [g, torch.zeros(3, dtype=torch.float64)])  # fmt: skip
    assert m.continuous is True
    assert math.isfinite(exact.log_partition(m))


def test_the_memory_model_prices_a_typed_enumeration_with_its_own_chunks(monkeypatch):
    """One memory formula per stage, from the module that enumerates: a typed machine's exact-stage term covers the
    largest chunk its own enumeration takes (0.3 priced it with the binary machines' bytes per configuration, which
    fell short of it)."""
    from raise_eval.exact import typed
    from tests.mixed_models import tiny_dbm

    model = tiny_dbm()  # spin(3) - categorical(2x3) - bernoulli(3): log Z enumerates the 9 states of the middle layer
    sizes = []
    original = typed.group_configurations

    def recording(m, group, start, stop):
        sizes.append(stop - start)
        return original(m, group, start, stop)

    monkeypatch.setattr(typed, "group_configurations", recording)
    for budget in (1 << 20, 2048):  # one chunk; several
        sizes.clear()
        exact.log_partition(model, max_bytes=budget)
        taken = max(sizes) * 8 * (4 * sum(model.layer_sizes) + 8)  # typed.log_partition's bytes per configuration
        assert taken <= exact.chunk_bytes(model, 1, False, budget) <= budget
    units = exact.exact_cost(model, 1).log_z_units
    binary_formula = 2**units * 8 * (2 * units + 2 * max(model.layer_sizes) + 4)  # 0.3's price of the same chunk
    assert binary_formula < 9 * 8 * (4 * sum(model.layer_sizes) + 8) == exact.chunk_bytes(model, 1, False, 1 << 20)


def test_a_layer_whose_support_is_not_a_support_is_refused_naming_it():
    @dataclass(frozen=True)
    class Worded(ExponentialLayer):
        support = "nonnegative"

    with pytest.raises(TypeError, match=r"layers\[1\] \(Worded\) declares support 'nonnegative'"):
        MixedBoltzmannMachine(
            [BernoulliLayer(3), Worded(2)], [torch.zeros(3, 2, dtype=torch.float64)],
            [torch.zeros(3, dtype=torch.float64), -torch.ones(2, dtype=torch.float64)],
        )  # fmt: skip


def test_a_machine_with_a_layer_checkpoints_cannot_hold_is_refused_when_saving(tmp_path):
    """save_checkpoint wrote it, then load_checkpoint could not read it ('unknown unit type')."""
    from raise_eval import save_checkpoint

    with pytest.raises(ValueError, match=r"layer 1 \(exponential\(2\), a ExponentialLayer\) cannot be saved"):
        save_checkpoint(tmp_path / "m.pt", _bernoulli_exponential())
    assert not (tmp_path / "m.pt").exists()
    with pytest.raises(ValueError, match="train_pixel_means must be numbers"):
        save_checkpoint(tmp_path / "r.pt", _small_rbm(), train_pixel_means="abc")


def _small_rbm():
    from raise_eval.models import RBM

    return RBM.random(4, 3, generator=torch.Generator().manual_seed(0))
