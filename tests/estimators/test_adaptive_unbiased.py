"""AIS and RAISE stay unbiased on the adaptive schedule: the pilot chose the betas with its own chains and
generator, so the main runs see a fixed schedule.

Checked in probability space (tests/statistics.py): |mean(exp(log w - log truth)) - 1| < 4 SE, a false alarm
with probability about 6e-5 per z-score for a correct estimator, so about 2.5e-4 for an assertion over 4 test
vectors and about 3e-3 for the ~50 z-scores of this file under fresh seeds (the seeds are fixed, so each run is
deterministic). K = 1, 2, 3 expose off-by-one errors in the schedule; K = 20 gives the pilot room to shape it.
(K = 1 is [0, 1] whatever the pilot finds; with the base-rate start it is left to test_ais.py and test_raise.py.)
The truths are exact: log Z by enumeration, p_ann(v) from the transition matrices of the same adaptive betas. The
chains per K keep every standard error near 0.03 or below (the weights' spread shrinks as K grows).
"""

from __future__ import annotations

import pytest
import torch

from raise_eval import BoltzmannPath, ais, data_base_rates, exact, raise_log_likelihood
from raise_eval.adaptive import adaptive_schedule
from tests.statistics import assert_unbiased

KS = [1, 2, 3, 20]
CHAINS = {1: 200_000, 2: 100_000, 3: 50_000, 20: 10_000}
STARTS_AND_KS = [("uniform", k) for k in KS] + [("base rates", k) for k in KS[1:]]


def _adaptive(path, k):
    betas = adaptive_schedule(path, k, generator=torch.Generator().manual_seed(1000 + k))
    assert betas.shape == (k + 1,)
    return betas


def _test_vectors(n_visible):
    v = exact.binary_configurations(n_visible)
    return v[[0, 5, 2**n_visible - 3, 2**n_visible - 1]]


@pytest.mark.parametrize("start, k", STARTS_AND_KS)
def test_ais_on_the_adaptive_schedule_is_unbiased_for_z_rbm(tiny_rbm, train_vectors, start, k):
    base = None if start == "uniform" else data_base_rates(tiny_rbm, train_vectors)
    path = BoltzmannPath(tiny_rbm, base)
    result = ais(path, _adaptive(path, k), CHAINS[k], generator=torch.Generator().manual_seed(k))
    assert_unbiased(result.log_weights, exact.log_partition(tiny_rbm))


@pytest.mark.parametrize("k", KS)
def test_ais_on_the_adaptive_schedule_is_unbiased_for_z_dbm(tiny_chain, k):
    path = BoltzmannPath(tiny_chain)
    result = ais(path, _adaptive(path, k), CHAINS[k], generator=torch.Generator().manual_seed(10 + k))
    assert_unbiased(result.log_weights, exact.log_partition(tiny_chain))


@pytest.mark.parametrize("start, k", STARTS_AND_KS)
def test_raise_on_the_adaptive_schedule_is_unbiased_for_p_ann_rbm(tiny_rbm, train_vectors, start, k):
    """Each test vector's weights have mean p_ann(v) of the annealing model on the same adaptive betas."""
    base = None if start == "uniform" else data_base_rates(tiny_rbm, train_vectors)
    path = BoltzmannPath(tiny_rbm, base)
    betas = _adaptive(path, k)
    v = _test_vectors(tiny_rbm.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_rbm, path.base_biases, betas)
    result = raise_log_likelihood(path, v, betas, CHAINS[k], generator=torch.Generator().manual_seed(20 + k))
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


@pytest.mark.parametrize("k", KS)
def test_heating_raise_on_the_adaptive_schedule_is_unbiased_for_p_ann_dbm(tiny_chain, k):
    """The DBM chain: heating start, then the reverse pass, both on the adaptive betas."""
    path = BoltzmannPath(tiny_chain)
    betas = _adaptive(path, k)
    v = _test_vectors(tiny_chain.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_chain, path.base_biases, betas)
    result = raise_log_likelihood(path, v, betas, CHAINS[k], generator=torch.Generator().manual_seed(30 + k))
    assert result.start == "heating"
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_the_adaptive_schedule_is_not_linear_here(tiny_rbm, tiny_chain):
    """So that the tests above exercise betas the linear schedule would not give."""
    for model in (tiny_rbm, tiny_chain):
        betas = _adaptive(BoltzmannPath(model), 20)
        assert float((betas - torch.linspace(0, 1, 21, dtype=torch.float64)).abs().max()) > 0.02
