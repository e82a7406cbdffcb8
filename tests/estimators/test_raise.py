"""RAISE weights are unbiased for the exact annealing-model probability p_ann(v) at K = 1, 2, 3."""

import math

import pytest
import torch

from raise_eval import BoltzmannPath, data_base_rates, exact, linear_schedule, raise_log_likelihood
from tests.statistics import assert_unbiased, unbiasedness_z

CHAINS = 200_000


def _test_vectors():
    # a mode, two ordinary vectors and an unlikely one
    return exact.binary_configurations(8)[[0, 37, 200, 255]]


@pytest.mark.parametrize("start", ["uniform", "base rates"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_raise_weights_are_unbiased_for_p_ann(tiny_rbm, train_vectors, start, k):
    """mean(exp(log w - log p_ann(v))) within 4 standard errors of 1 for each test vector."""
    base = None if start == "uniform" else data_base_rates(tiny_rbm, train_vectors)
    path = BoltzmannPath(tiny_rbm, base)
    betas = linear_schedule(k)
    v = _test_vectors()
    p_ann = exact.annealing_model_marginal(tiny_rbm, path.base_biases, betas)
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(10 + k))
    assert result.log_weights.shape == (4, CHAINS)
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_float32_raise_with_each_product_route_is_unbiased(tiny_rbm, train_vectors, product_route):
    """The float32 path whose products all go through one route (torch.mm, oneDNN, the table route; forced here,
    however small): RAISE weights still unbiased for p_ann(v) of the float32 model."""
    model = tiny_rbm.to(dtype=torch.float32)
    path = BoltzmannPath(model, data_base_rates(model, train_vectors.float()))
    betas = linear_schedule(3)
    v = _test_vectors().float()
    p_ann = exact.annealing_model_marginal(model, path.base_biases, betas)
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(20))
    assert product_route
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_papers_index_slip_is_detected(tiny_rbm, k):
    """Power check: drawing x_k with the operator of p_k and weighting at the new state (Alg. 2 as printed)
    is biased, and the same statistical test rejects it (|z| > 4 for every vector; observed z ~ 80-160)."""
    path = BoltzmannPath(tiny_rbm)
    betas = linear_schedule(k)
    reverse = betas.flip(0).tolist()
    next_beta = dict(zip(reverse[:-1], reverse[1:]))

    def slipped(state, beta, generator):
        return path.transition(state, next_beta[beta], generator)

    v = _test_vectors()
    p_ann = exact.annealing_model_marginal(tiny_rbm, path.base_biases, betas)
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(k), kernel=slipped)
    z, _ = unbiasedness_z(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    assert (z.abs() > 4).all()


def test_per_example_estimates_and_summary(tiny_rbm):
    v = _test_vectors()
    r = raise_log_likelihood(
        BoltzmannPath(tiny_rbm), v, linear_schedule(5), 64, generator=torch.Generator().manual_seed(0)
    )
    torch.testing.assert_close(r.log_likelihood, torch.logsumexp(r.log_weights, 1) - math.log(64))
    torch.testing.assert_close(r.log_unnormalized, tiny_rbm.log_unnormalized_prob(v))
    assert r.mean == pytest.approx(r.log_likelihood.mean().item())
    assert r.stderr == pytest.approx((r.log_likelihood.std() / 2).item())


def test_control_variate_average(tiny_rbm):
    """mean_subset(Y - X) + mean_all(X): exact when Y - X is constant, and equal to mean(Y) on the full set."""
    v = _test_vectors()
    r = raise_log_likelihood(
        BoltzmannPath(tiny_rbm), v, linear_schedule(5), 32, generator=torch.Generator().manual_seed(1)
    )
    all_x = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0], dtype=torch.float64)
    cv = r.control_variate_mean(all_x)
    assert cv.mean == pytest.approx((r.log_likelihood - r.log_unnormalized).mean().item() + 4.0)
    assert cv.alpha == 1.0 and cv.subset_mean == pytest.approx(r.mean) and cv.subset_stderr == pytest.approx(r.stderr)
    assert r.control_variate_mean(r.log_unnormalized).mean == pytest.approx(r.mean)


def test_bad_inputs_are_refused(tiny_rbm):
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="8 visible units but RAISE test data has 7 columns"):
        raise_log_likelihood(BoltzmannPath(tiny_rbm), torch.zeros(3, 7), linear_schedule(2), 4, generator=g)
    with pytest.raises(ValueError, match="must be binary"):
        raise_log_likelihood(BoltzmannPath(tiny_rbm), torch.full((3, 8), 0.5), linear_schedule(2), 4, generator=g)
    with pytest.raises(ValueError, match="monotone"):
        raise_log_likelihood(BoltzmannPath(tiny_rbm), torch.zeros(3, 8), [0.0, 0.7, 0.2, 1.0], 4, generator=g)
