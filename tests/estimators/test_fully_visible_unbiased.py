"""AIS and RAISE are unbiased on fully visible pairwise models (categorical, spin and 0/1 sites), from a base fitted
to training data, checked in probability space (tests/statistics.py) against exact truths: log Z by enumeration and
p_ann(v) from the palindromic scan's transition matrices at the same betas. K = 1, 2, 3 expose off-by-one errors in
the schedule (RAISE's start weight f(v) / Z_0 and the kernel's temperature in particular). A false alarm has
probability about 6e-5 per z-score; the seeds are fixed, so each run is deterministic."""

from __future__ import annotations

import pytest
import torch

from raise_eval import ais, exact, raise_log_likelihood
from raise_eval.exact import fully_visible as exact_fv
from raise_eval.kernels.site_gibbs import SiteGibbsKernel
from raise_eval.paths.boltzmann import make_path
from raise_eval.paths.fully_visible import FullyVisiblePath, data_base_fields
from tests.fully_visible_models import random_model
from tests.statistics import assert_unbiased

KINDS = [("categorical", 3, 3), ("spin", 4, 2), ("bernoulli", 4, 2)]
KS = [1, 2, 3]
CHAINS = 40_000


def _model_and_path(sites, size, q):
    model = random_model(sites, size, q, seed=11, scale=0.8)
    g = torch.Generator().manual_seed(12)
    train = model.sites_from_codes(torch.randint(0, q, (30, size), generator=g))
    path = make_path(model, [data_base_fields(model, train, pseudocount=0.05)])
    assert isinstance(path, FullyVisiblePath)
    return model, path


def _test_vectors(model):
    codes = exact_fv.site_configurations(model.n_visible, model.num_states)
    return model.sites_from_codes(codes[[0, 5, codes.shape[0] - 2]])


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("sites, size, q", KINDS)
def test_ais_is_unbiased_for_z(sites, size, q, k):
    model, path = _model_and_path(sites, size, q)
    betas = torch.linspace(0, 1, k + 1, dtype=torch.float64)
    result = ais(path, betas, CHAINS, generator=torch.Generator().manual_seed(100 + k))
    assert_unbiased(result.log_weights, exact.log_partition(model))


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("sites, size, q", KINDS)
def test_raise_is_unbiased_for_the_annealing_model(sites, size, q, k):
    model, path = _model_and_path(sites, size, q)
    betas = torch.linspace(0, 1, k + 1, dtype=torch.float64)
    v = _test_vectors(model)
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(200 + k))
    truth = exact.log_annealing_model(model, path.base_biases, betas, v)
    assert_unbiased(result.log_weights, truth)
    assert result.start == "test vector"
    torch.testing.assert_close(result.log_unnormalized, model.log_unnormalized(v))
    # p_ann is a distribution over the sites, and it is not the model's: K steps do not reach p
    p_ann = exact.annealing_model_marginal(model, path.base_biases, betas)
    assert float(p_ann.sum()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("k", [1, 3])
def test_ais_and_raise_are_unbiased_with_the_metropolis_scan(k):
    model, path = _model_and_path("categorical", 3, 3)
    betas = torch.linspace(0, 1, k + 1, dtype=torch.float64)
    kernel = SiteGibbsKernel(path, "metropolis")
    result = ais(path, betas, CHAINS, generator=torch.Generator().manual_seed(300 + k), kernel=kernel)
    assert_unbiased(result.log_weights, exact.log_partition(model))
    v = _test_vectors(model)
    reverse = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(400 + k),
                                   kernel=kernel)  # fmt: skip
    truth = exact_fv.log_annealing_model(model, path.base_biases, betas, v, method="metropolis")
    assert_unbiased(reverse.log_weights, truth)


def test_raise_refuses_what_does_not_apply_to_a_fully_visible_model():
    model, path = _model_and_path("spin", 4, 2)
    betas = torch.linspace(0, 1, 3, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="RAISE test data must hold spin states -1/1 only, found 0"):
        raise_log_likelihood(path, torch.zeros(2, 4, dtype=torch.float64), betas, 4, generator=g)
    with pytest.raises(ValueError, match="no hidden units: unroll and heating do not apply"):
        raise_log_likelihood(path, _test_vectors(model), betas, 4, generator=g, heating_kernel=lambda x, b, g: x)
    with pytest.raises(ValueError, match="a fully visible model has no layers to clamp"):
        make_path(model, clamped=(0,))


def test_the_estimates_do_not_depend_on_how_the_base_is_normalized():
    """A data-fitted categorical base has log Z_0 = 0 (its fields are log frequencies), so the unbiasedness tests
    above cannot see log Z_0 dropped from AIS, RAISE or thermodynamic integration on categorical sites. Adding a
    constant to every base field multiplies f_0 by a constant and leaves every p_beta, every draw and every estimate
    as it was: log Z_0 grows by L times the constant, the weights' log f - log f_0 shrink by it."""
    from raise_eval import thermodynamic_integration

    model, path = _model_and_path("categorical", 3, 3)
    shifted = FullyVisiblePath(model, [path.base_biases[0] + 2.0])
    assert path.log_partition_initial == pytest.approx(0.0, abs=1e-12)
    assert shifted.log_partition_initial == pytest.approx(3 * 2.0, abs=1e-12)
    betas = torch.linspace(0, 1, 4, dtype=torch.float64)
    v = _test_vectors(model)
    for estimate in (
        lambda p: ais(p, betas, 200, generator=torch.Generator().manual_seed(1)).log_weights,
        lambda p: raise_log_likelihood(p, v, betas, 50, generator=torch.Generator().manual_seed(2)).log_weights,
        lambda p: thermodynamic_integration(p, betas, 200, generator=torch.Generator().manual_seed(3)).log_normalizer,
    ):
        torch.testing.assert_close(estimate(shifted), estimate(path), rtol=0, atol=1e-9)
