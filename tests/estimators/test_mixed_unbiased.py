"""AIS and RAISE on machines of typed layers are unbiased in probability space, for every RBM pairing of the four
unit types at K = 1, 2, 3 (where off-by-one errors show) and at a small-step K = 40 (the accurate small-step form
of the layers' increments), and for DBMs (RAISE by heating) at K = 1, 2, 3.

mean(exp(log w - log truth)) within 4 standard errors of 1 (tests.statistics.assert_unbiased): truth = exact log Z
for AIS, exact log p_ann(v) for RAISE (a log-density for a Gaussian visible layer: quadrature through the discrete
hidden layer, or the closed-form linear-Gaussian chain). A correct estimator fails each z-check with probability
about 6e-5 (more in the heavy right tails of the weights); each test makes 1 (AIS) or 3 (RAISE) of them, so this file
(about 300 checks) has a false-alarm rate of about 2e-2 per change of seeds; with the seeds fixed it is
deterministic."""

import pytest
import torch

from raise_eval import ais, exact, linear_schedule, raise_log_likelihood
from raise_eval.paths.mixed import MixedPath, mixed_data_base, visible_statistics
from tests.mixed_models import PAIRINGS, exact_visible_samples, tiny_dbm, tiny_pair
from tests.statistics import assert_unbiased

KS = [1, 2, 3, 40]


def ais_chains(k: int) -> int:
    return 10_000 if k > 3 else 40_000  # many small steps: light-tailed weights


def raise_chains(k: int) -> int:
    """Chains per test vector: K = 1 has the widest, heavy-tailed weights (one step from the target to the base:
    rare draws of low density carry weights up to e^8 here), which a standard error only describes from many
    chains; many small steps have light-tailed ones."""
    return 600_000 if k == 1 else 10_000 if k > 3 else 40_000


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("visible,hidden", PAIRINGS)
def test_ais_is_unbiased_for_z(visible, hidden, k):
    model = tiny_pair(visible, hidden)
    path = MixedPath(model)
    result = ais(path, linear_schedule(k), ais_chains(k), generator=torch.Generator().manual_seed(100 + k))
    assert_unbiased(result.log_weights, exact.log_partition(model))


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("visible,hidden", PAIRINGS)
def test_raise_is_unbiased_for_p_ann(visible, hidden, k):
    model = tiny_pair(visible, hidden)
    path = MixedPath(model)
    betas = linear_schedule(k)
    v = exact_visible_samples(model, 3, torch.Generator().manual_seed(3))
    truth = exact.log_annealing_model(model, path.base_biases, betas, v)
    result = raise_log_likelihood(path, v, betas, raise_chains(k), generator=torch.Generator().manual_seed(200 + k))
    assert result.start == "exact posterior"
    assert_unbiased(result.log_weights, truth)


@pytest.mark.parametrize("visible,hidden", [("gaussian", "bernoulli"), ("categorical", "bernoulli"), ("spin", "spin")])
@pytest.mark.parametrize("k", [1, 3])
def test_a_data_fitted_base_keeps_them_unbiased(visible, hidden, k):
    model = tiny_pair(visible, hidden)
    train = exact_visible_samples(model, 500, torch.Generator().manual_seed(4))
    path = MixedPath(model, mixed_data_base(model, visible_statistics(model, train)))
    g = torch.Generator().manual_seed(300 + k)
    assert_unbiased(ais(path, linear_schedule(k), ais_chains(k), generator=g).log_weights, exact.log_partition(model))
    betas = linear_schedule(k)
    v = train[:3]
    truth = exact.log_annealing_model(model, path.base_biases, betas, v)
    assert_unbiased(raise_log_likelihood(path, v, betas, raise_chains(k), generator=g).log_weights, truth)


@pytest.mark.parametrize("kinds", [("spin", "categorical", "bernoulli"), ("categorical", "spin", "spin")])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_dbm_ais_and_raise_by_heating_are_unbiased(kinds, k):
    model = tiny_dbm(kinds)
    path = MixedPath(model)
    betas = linear_schedule(k)
    g = torch.Generator().manual_seed(400 + k)
    assert_unbiased(ais(path, betas, ais_chains(k), generator=g).log_weights, exact.log_partition(model))
    lv = model.layers[0]
    p_ann = exact.annealing_model_marginal(model, path.base_biases, betas)
    v = lv.configurations(0, lv.num_configurations)[[0, 5, lv.num_configurations - 1]]
    result = raise_log_likelihood(path, v, betas, raise_chains(k), generator=g)
    assert result.start == "heating"
    assert_unbiased(result.log_weights, p_ann[lv.configuration_index(v)].log())


def test_the_papers_index_slip_is_detected_here_too():
    """Power check: RAISE drawing x_k with the operator of p_k (Alg. 2 as printed) is rejected by the same test."""
    model = tiny_pair("gaussian", "bernoulli")
    path = MixedPath(model)
    betas = linear_schedule(2)
    reverse = betas.flip(0).tolist()
    following = dict(zip(reverse[:-1], reverse[1:]))

    def slipped(state, beta, generator):
        return path.transition(state, following[beta], generator)

    v = exact_visible_samples(model, 3, torch.Generator().manual_seed(3))
    truth = exact.log_annealing_model(model, path.base_biases, betas, v)
    result = raise_log_likelihood(path, v, betas, 40_000, generator=torch.Generator().manual_seed(9), kernel=slipped)
    with pytest.raises(AssertionError, match="off by"):
        assert_unbiased(result.log_weights, truth)
