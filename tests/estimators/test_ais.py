"""AIS weights are unbiased for Z in probability space at small K, and the result is summarized correctly."""

import math

import pytest
import torch
from raise_eval.models import RBM

from raise_eval import BoltzmannPath, ais, data_base_rates, exact, linear_schedule, make_schedule
from tests.statistics import assert_unbiased

CHAINS = 200_000


@pytest.mark.parametrize("start", ["uniform", "base rates"])
@pytest.mark.parametrize("k", [1, 2, 3, 50])
def test_ais_weights_are_unbiased_for_z(tiny_rbm, train_vectors, start, k):
    """mean(exp(log w - log Z)) within 4 standard errors of 1 (see tests/statistics.py for the failure rate)."""
    base = None if start == "uniform" else data_base_rates(tiny_rbm, train_vectors)
    path = BoltzmannPath(tiny_rbm, base)
    result = ais(path, linear_schedule(k), CHAINS, generator=torch.Generator().manual_seed(k))
    assert_unbiased(result.log_weights, exact.log_partition(tiny_rbm))


@pytest.mark.parametrize("schedule", ["sigmoid", "salakhutdinov"])
def test_ais_is_unbiased_for_a_three_layer_chain(tiny_chain, schedule):
    path = BoltzmannPath(tiny_chain)
    result = ais(path, make_schedule(schedule, 3), CHAINS, generator=torch.Generator().manual_seed(0))
    assert_unbiased(result.log_weights, exact.log_partition(tiny_chain))


@pytest.mark.parametrize("k", [2, 50])
def test_float32_ais_with_each_product_route_is_unbiased(tiny_rbm, tiny_chain, k, product_route):
    """The float32 path whose products all go through one route (torch.mm, oneDNN, the table route; large models
    take the one timed fastest; forced here, however small): AIS weights still unbiased for Z of the float32
    models (an RBM and a three-layer chain)."""
    for model in (tiny_rbm.to(dtype=torch.float32), tiny_chain.to(dtype=torch.float32)):
        product_route.clear()
        result = ais(BoltzmannPath(model), linear_schedule(k), CHAINS, generator=torch.Generator().manual_seed(k))
        assert product_route
        assert_unbiased(result.log_weights, exact.log_partition(model))


def test_result_summarizes_its_weights(tiny_rbm):
    r = ais(BoltzmannPath(tiny_rbm), linear_schedule(20), 500, generator=torch.Generator().manual_seed(1))
    assert r.log_weights.shape == (500,) and r.log_weights.dtype == torch.float64
    assert r.estimate == pytest.approx((torch.logsumexp(r.log_weights, 0) - math.log(500)).item())
    assert r.ess.item() >= 1.0 and r.ess.item() <= 500.0  # ESS lies between 1 and the number of chains
    assert r.lower.item() <= r.estimate <= r.upper.item()
    assert r.num_steps == 20 and r.num_chains == 500 and r.seconds > 0
    d = r.to_dict()
    assert set(d) >= {"estimate", "stderr", "interval_3sigma", "ess", "log_weights"}


def test_same_seed_same_result(tiny_rbm):
    def run(seed):
        return ais(BoltzmannPath(tiny_rbm), linear_schedule(10), 100, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(3).log_weights, run(3).log_weights)
    assert not torch.equal(run(3).log_weights, run(4).log_weights)


def test_float32_and_float64_agree():
    """A 30-12 RBM: float32 and float64 runs (different random streams) agree within 4 combined standard
    errors, and both within 4 standard errors of the exact log Z."""
    g = torch.Generator().manual_seed(0)
    model64 = RBM.random(30, 12, weight_std=0.5, generator=g, dtype=torch.float64)
    log_z = exact.log_partition(model64)
    results = {}
    for dtype in (torch.float32, torch.float64):
        path = BoltzmannPath(model64.to(dtype=dtype))
        results[dtype] = ais(path, linear_schedule(300), 2000, generator=torch.Generator().manual_seed(5))
        assert results[dtype].log_weights.dtype == torch.float64
    a, b = results[torch.float32], results[torch.float64]
    assert abs(a.estimate - b.estimate) < 4 * math.hypot(a.stderr.item(), b.stderr.item())
    for r in (a, b):
        assert abs(r.estimate - log_z) < 4 * r.stderr.item() + 1e-3


def test_bad_arguments_are_refused(tiny_rbm):
    path = BoltzmannPath(tiny_rbm)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="monotone"):
        ais(path, torch.tensor([0.0, 0.6, 0.3, 1.0]), 10, generator=g)
    with pytest.raises(ValueError, match="num_chains"):
        ais(path, linear_schedule(3), 0, generator=g)
