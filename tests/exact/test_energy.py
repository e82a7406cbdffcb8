"""Exact answers for energy models on discrete support (`raise_eval.exact.energy`): log Z by chunked enumeration
against a brute-force sum over itertools' configurations (the energy called one configuration at a time), the
configurations' numbering, the annealing model a distribution, and real support refused by name."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from raise_eval import exact
from raise_eval.exact import energy as exact_energy
from raise_eval.paths.energy import EnergyPath
from tests.energy_models import gaussian_energy, neural_energy

KINDS = [("binary", 5, 2), ("spin", 5, 2), ("categorical", 3, 4)]


def _brute_log_z(model) -> float:
    """log sum_x exp(-E(x)), each x built from its values and passed to the energy alone."""
    kind, q = model.support.kind, model.num_states
    values = {"binary": [0.0, 1.0], "spin": [-1.0, 1.0]}.get(kind, list(range(q)))
    terms = []
    for row in itertools.product(values, repeat=model.n_visible):
        x = torch.tensor([row], dtype=torch.float64)
        inputs = torch.nn.functional.one_hot(x.long(), q).double() if kind == "categorical" else x
        with torch.no_grad():
            terms.append(-float(model.energy(inputs)))
    return float(torch.logsumexp(torch.tensor(terms, dtype=torch.float64), 0))


@pytest.mark.parametrize("kind, size, q", KINDS)
def test_log_z_by_chunked_enumeration_is_the_brute_force_sum(kind, size, q):
    model = neural_energy(kind, size, q, seed=4)
    truth = _brute_log_z(model)
    assert exact.log_partition(model) == pytest.approx(truth, abs=1e-10)
    assert exact_energy.log_partition(model, chunk_size=7) == pytest.approx(truth, abs=1e-10)  # several chunks
    codes = exact_energy.configurations(model)
    assert codes.shape == (q**size, size)
    assert torch.equal(exact_energy.configuration_index(model, codes), torch.arange(q**size))
    v = model.data_from_state(codes[:4])
    torch.testing.assert_close(exact.log_unnormalized_visible(model, v), model.log_unnormalized(v))
    cost = exact.exact_cost(model, 3)
    assert cost.enumerable and cost.log_z_units == math.ceil(size * math.log2(q))


def test_the_annealing_model_is_a_distribution_that_approaches_p_as_k_grows():
    model = neural_energy("binary", 3, seed=2)
    path = EnergyPath(model)
    p = torch.softmax(model.log_unnormalized_state(exact_energy.configurations(model)), 0)
    for method in exact_energy.METHODS:
        near = exact.annealing_model_marginal(model, path.base_biases, torch.linspace(0, 1, 3, dtype=torch.float64))
        far = exact_energy.annealing_model_marginal(model, path.base_biases, torch.linspace(0, 1, 201),
                                                    method=method)  # fmt: skip
        assert float(near.sum()) == pytest.approx(1.0, abs=1e-12) and float(far.sum()) == pytest.approx(1, abs=1e-12)
        assert float((far - p).abs().sum()) < 0.2 * float((near - p).abs().sum())


def test_real_support_and_too_many_configurations_are_refused():
    model, _ = gaussian_energy(2)
    with pytest.raises(ValueError, match=r"exact log Z of an energy on real support has no enumeration: use AIS"):
        exact.log_partition(model)
    assert not exact.exact_cost(model, 1).enumerable
    with pytest.raises(ValueError, match=r"would enumerate 2\^10 configurations \(limit 2\^8\)"):
        exact.log_partition(neural_energy("binary", 10), max_units=8)
    with pytest.raises(ValueError, match="method must be one of metropolis, gibbs-with-gradients"):
        exact_energy.annealing_model_marginal(neural_energy("binary", 2), [EnergyPath(neural_energy("binary", 2)).base],
                                              torch.linspace(0, 1, 2), method="gibbs")  # fmt: skip
