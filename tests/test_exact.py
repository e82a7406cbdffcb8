"""Exact enumeration: partition functions, marginals and the annealing model p_ann, checked by brute force."""

import itertools

import pytest
import torch
from raise_eval.models import RBM

from raise_eval import exact, linear_schedule, uniform_base


def _brute_log_z(model):
    configs = [exact.binary_configurations(n) for n in model.layer_sizes]
    values = [model.log_unnormalized_joint(list(c)) for c in itertools.product(*[list(x) for x in configs])]
    return torch.logsumexp(torch.stack(values), 0).item()


@pytest.mark.parametrize("sizes", [(6, 3), (3, 6)])  # enumerates the hidden, then the visible layer
def test_log_partition_rbm_matches_brute_force(sizes):
    model = RBM.random(*sizes, weight_std=1.5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert exact.log_partition(model) == pytest.approx(_brute_log_z(model), abs=1e-10)
    assert exact.log_partition(model, chunk_size=4) == pytest.approx(_brute_log_z(model), abs=1e-10)


def test_log_partition_three_layers_matches_brute_force(tiny_chain):
    assert exact.log_partition(tiny_chain) == pytest.approx(_brute_log_z(tiny_chain), abs=1e-10)


def test_log_likelihood_normalizes(tiny_chain, tiny_rbm):
    for model in (tiny_chain, tiny_rbm):
        v = exact.binary_configurations(model.n_visible)
        total = torch.logsumexp(exact.log_likelihood(model, v), 0).item()
        assert total == pytest.approx(0.0, abs=1e-10)


def test_too_many_units_is_refused():
    model = RBM(torch.zeros(30, 30), torch.zeros(30), torch.zeros(30))
    with pytest.raises(ValueError, match="2\\^30"):
        exact.log_partition(model)


def test_configuration_codes_roundtrip():
    x = exact.binary_configurations(5)
    assert torch.equal(exact.configuration_index(x), torch.arange(32))


def test_block_gibbs_transition_matrix_is_reversible(tiny_chain):
    T = exact.block_gibbs_transition_matrix(tiny_chain)
    torch.testing.assert_close(T.sum(1), torch.ones(T.shape[0], dtype=torch.float64))
    # stationary distribution over the even layers (v, h2): marginal of the joint over h1
    even = exact.binary_configurations(5 + 3)
    log_f = tiny_chain.log_unnormalized_marginal([even[:, :5], None, even[:, 5:]])
    p = torch.softmax(log_f, 0)
    flow = p.unsqueeze(1) * T
    torch.testing.assert_close(flow, flow.t(), rtol=0, atol=1e-14)  # detailed balance


def test_annealing_model_is_a_distribution_that_approaches_the_model(tiny_rbm):
    base = uniform_base(tiny_rbm)
    p = torch.exp(exact.log_likelihood(tiny_rbm, exact.binary_configurations(8)))
    tv = []
    for k in (1, 10, 200):
        p_ann = exact.annealing_model_marginal(tiny_rbm, base, linear_schedule(k))
        assert p_ann.sum().item() == pytest.approx(1.0, abs=1e-12)
        tv.append(0.5 * (p_ann - p).abs().sum().item())
    assert tv[0] > tv[1] > tv[2] and tv[2] < 0.05


def test_annealing_model_of_an_independent_model_is_exact():
    """With no weights every block-Gibbs step samples exactly from p_beta, so p_ann = p for any K."""
    g = torch.Generator().manual_seed(1)
    model = RBM(torch.zeros(4, 3, dtype=torch.float64), torch.randn(4, generator=g).double(), torch.randn(3).double())
    p = torch.exp(exact.log_likelihood(model, exact.binary_configurations(4)))
    p_ann = exact.annealing_model_marginal(model, uniform_base(model), linear_schedule(2))
    torch.testing.assert_close(p_ann, p, rtol=0, atol=1e-14)


@pytest.mark.data
def test_small_mnist_checkpoint_log_partition_matches_the_stored_value(shared_data):
    import numpy as np

    z = np.load(shared_data / "checkpoints" / "rbm_mnist_small_grosse_salakhutdinov_2015.npz")
    model = RBM(*(torch.from_numpy(z[k]).double() for k in ("W", "vbias", "hbias")))
    assert exact.log_partition(model) == pytest.approx(float(z["logZ_exact"]), abs=1e-8)


def test_dbn_log_f_of_wide_visible_layers_stays_small():
    """log f(v) of a 784-visible DBN sums its 2^16 layer-1 configurations with a product, not a (batch, 2^16, 784)
    broadcast (which needed terabytes); the product agrees with the broadcast formula on a small DBN."""
    from raise_eval.models import DBN

    g = torch.Generator().manual_seed(0)
    small = DBN.random([9, 5, 3], weight_std=1.0, generator=g, dtype=torch.float64)
    v = exact.binary_configurations(9)[::7]
    logits = small.generative_logits(exact.binary_configurations(5), 0)  # (2^5, 9)
    log_p = (v.unsqueeze(-2) * logits - torch.nn.functional.softplus(logits)).sum(-1)  # the broadcast form
    log_top = small.top.log_unnormalized_prob(exact.binary_configurations(5))
    expected = torch.logsumexp(log_p + log_top, dim=-1)
    assert torch.allclose(exact.log_unnormalized_visible(small, v), expected, atol=1e-10)
    wide = DBN.random([784, 16, 8], weight_std=0.05, generator=g)
    out = exact.log_unnormalized_visible(wide, (torch.rand(4, 784, generator=g) < 0.2).float())
    assert out.shape == (4,) and torch.isfinite(out).all()


# ------------------------------------------------------------------------------------- log f(v) routes, chunks, cost
def _random_dbm(sizes, seed, weight_std=1.0, bias_std=1.0):
    from raise_eval.models import DBM

    g = torch.Generator().manual_seed(seed)
    return DBM.random(sizes, weight_std=weight_std, bias_std=bias_std, generator=g, dtype=torch.float64)


def _tiny_dbms():
    """5-3-4 and 4-3-2-3 DBMs with unit-scale weights, and each at weight scale 0.7 on a path to random biases."""
    out = []
    for i, sizes in enumerate([(5, 3, 4), (4, 3, 2, 3)]):
        model = _random_dbm(sizes, seed=40 + i)
        base = [torch.randn(n, generator=torch.Generator().manual_seed(50 + i), dtype=torch.float64) for n in sizes]
        out += [model, model.annealed(0.7, base)]
    return out


def _brute_log_f(model, v):
    """log sum over every hidden configuration of f(v, h), from the full joint."""
    hidden = [list(exact.binary_configurations(n)) for n in model.layer_sizes[1:]]
    values = [
        model.log_unnormalized_joint([v] + [h.expand(v.shape[0], -1) for h in combo])
        for combo in itertools.product(*hidden)
    ]
    return torch.logsumexp(torch.stack(values, 1), 1)


def _binary(n_vectors, n, seed, p=0.3):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n_vectors, n, generator=g, dtype=torch.float64) < p).double()


@pytest.mark.parametrize("index", range(4), ids=["5-3-4", "5-3-4-scaled", "4-3-2-3", "4-3-2-3-scaled"])
def test_dbm_log_f_routes_match_brute_force(index):
    model = _tiny_dbms()[index]
    v = exact.binary_configurations(model.n_visible)
    truth = _brute_log_f(model, v)
    for route in ("odd", "even", None):
        out = exact.log_unnormalized_visible(model, v, route=route)
        torch.testing.assert_close(out, truth, rtol=0, atol=1e-12)
        chunked = exact.log_unnormalized_visible(model, v, route=route, chunk_size=2, max_bytes=512)
        torch.testing.assert_close(chunked, truth, rtol=0, atol=1e-12)


@pytest.mark.parametrize("index", range(4), ids=["5-3-4", "5-3-4-scaled", "4-3-2-3", "4-3-2-3-scaled"])
def test_dbm_log_partition_matches_brute_force(index):
    model = _tiny_dbms()[index]
    assert exact.log_partition(model) == pytest.approx(_brute_log_z(model), abs=1e-10)
    assert exact.log_partition(model, max_bytes=256) == pytest.approx(_brute_log_z(model), abs=1e-10)


@pytest.mark.parametrize("sizes", [(5, 4, 3), (4, 3, 3, 2), (4, 2, 3, 2, 3)], ids=["2-hidden", "3-hidden", "4-hidden"])
def test_dbn_log_f_matches_brute_force(sizes):
    from raise_eval.models import DBN

    model = DBN.random(sizes, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    v = exact.binary_configurations(sizes[0])
    hidden = [list(exact.binary_configurations(n)) for n in sizes[1:-1]]
    values = [
        model.log_unnormalized_joint_visible([v] + [h.expand(v.shape[0], -1) for h in combo])
        for combo in itertools.product(*hidden)
    ]
    truth = torch.logsumexp(torch.stack(values, 1), 1)
    torch.testing.assert_close(exact.log_unnormalized_visible(model, v), truth, rtol=0, atol=1e-12)
    tiny = exact.log_unnormalized_visible(model, v, max_bytes=1024, chunk_size=2)
    torch.testing.assert_close(tiny, truth, rtol=0, atol=1e-12)


def test_mnist_size_dbm_odd_and_even_routes_agree():
    """784-10-12: the odd route enumerates x_1 (2^10), the even route x_2 (2^12): two independent computations."""
    model = _random_dbm((784, 10, 12), seed=3, weight_std=0.1, bias_std=0.1)
    v = _binary(50, 784, seed=4)
    odd = exact.log_unnormalized_visible(model, v, route="odd")
    even = exact.log_unnormalized_visible(model, v, route="even")
    torch.testing.assert_close(odd, even, rtol=0, atol=1e-8)
    torch.testing.assert_close(exact.log_unnormalized_visible(model, v), odd, rtol=0, atol=0)  # odd is chosen


def _dbn_direct_log_f(model, v, chunk=256):
    """sum over x_1 of p(v | x_1) f_top(x_1) by the broadcast formula, a few x_1 configurations at a time."""
    partial = []
    for start in range(0, 2 ** model.layer_sizes[1], chunk):
        x1 = exact.binary_configurations(model.layer_sizes[1], start, min(start + chunk, 2 ** model.layer_sizes[1]))
        logits = model.generative_logits(x1, 0)  # (chunk, 784)
        log_p = (v.unsqueeze(1) * logits - torch.nn.functional.softplus(logits)).sum(-1)  # (N, chunk)
        partial.append(torch.logsumexp(log_p + model.top.log_unnormalized_prob(x1), dim=1))
    return torch.logsumexp(torch.stack(partial, 1), 1)


def test_mnist_size_dbn_log_f_matches_the_direct_formula():
    from raise_eval.models import DBN

    g = torch.Generator().manual_seed(8)
    model = DBN.random([784, 12, 40], weight_std=0.1, bias_std=0.1, generator=g, dtype=torch.float64)
    v = _binary(4, 784, seed=9)
    torch.testing.assert_close(exact.log_unnormalized_visible(model, v), _dbn_direct_log_f(model, v), rtol=0, atol=1e-8)


def test_a_tiny_memory_budget_gives_the_same_answers():
    from raise_eval.models import DBN

    dbm = _random_dbm((784, 10, 12), seed=3, weight_std=0.1, bias_std=0.1)
    dbn = DBN.random([784, 12, 40], weight_std=0.1, bias_std=0.1, generator=torch.Generator().manual_seed(8))
    deep_dbn = DBN.random([30, 6, 5, 4], weight_std=0.5, generator=torch.Generator().manual_seed(2))
    v = _binary(50, 784, seed=4)
    small = 64 * 1024
    for route in ("odd", "even"):
        default = exact.log_unnormalized_visible(dbm, v, route=route)
        tight = exact.log_unnormalized_visible(dbm, v, route=route, max_bytes=small)
        torch.testing.assert_close(tight, default, rtol=0, atol=1e-10)
    assert exact.log_partition(dbm, max_bytes=small) == pytest.approx(exact.log_partition(dbm), abs=1e-10)
    for model, x in ((dbn, v[:20]), (deep_dbn, v[:20, :30])):
        default = exact.log_unnormalized_visible(model, x)
        torch.testing.assert_close(
            exact.log_unnormalized_visible(model, x, max_bytes=small), default, rtol=0, atol=1e-10
        )
    torch.testing.assert_close(
        exact.log_likelihood(dbm, v, max_bytes=small), exact.log_likelihood(dbm, v), rtol=0, atol=1e-10
    )


def test_chunks_respect_max_bytes(monkeypatch):
    """Every chunk of enumerated configurations, times a lower bound on its float64 temporaries per configuration
    (the configuration itself, the widest summed-out layer's logits, one table entry), stays under max_bytes."""
    from raise_eval.models import DBN

    seen = []
    original = exact.binary_configurations

    def recording(n, start=0, stop=None, **kwargs):
        out = original(n, start, stop, **kwargs)
        seen.append((n, out.shape[0]))
        return out

    monkeypatch.setattr(exact.binary, "binary_configurations", recording)  # the module that enumerates
    small = 64 * 1024
    dbm = _random_dbm((784, 10, 12), seed=3, weight_std=0.1, bias_std=0.1)
    dbn = DBN.random([784, 12, 40], weight_std=0.1, bias_std=0.1, generator=torch.Generator().manual_seed(8))
    v = _binary(50, 784, seed=4)
    cases = [
        (lambda: exact.log_unnormalized_visible(dbm, v, route="odd", max_bytes=small), 10, 12),  # x_2 summed out
        (lambda: exact.log_unnormalized_visible(dbm, v, route="even", max_bytes=small), 12, 10),  # x_1 summed out
        (lambda: exact.log_partition(dbm, max_bytes=small), 10, 784),  # x_1 enumerated, v and x_2 summed out
        (lambda: exact.log_unnormalized_visible(dbn, v, max_bytes=small), 12, 784),  # x_1 and its 784 logits
    ]
    for run, units, widest in cases:
        seen.clear()
        run()
        assert seen and all(n == units for n, _ in seen)
        assert sum(size for _, size in seen) == 2**units
        assert max(size for _, size in seen) * 8 * (units + widest + 1) <= small


def test_route_is_forced_and_checked():
    model = _random_dbm((6, 30, 4), seed=0)  # odd route: 30 units, even route: 4
    assert exact.log_f_units(model) == 4
    with pytest.raises(ValueError, match="2\\^30"):
        exact.log_unnormalized_visible(model, torch.zeros(2, 6, dtype=torch.float64), route="odd")
    with pytest.raises(ValueError, match="route"):
        exact.log_unnormalized_visible(RBM.random(3, 2, generator=torch.Generator()), torch.zeros(1, 3), route="odd")
    out = exact.log_unnormalized_visible(model, torch.zeros(2, 6), progress=True)
    assert out.shape == (2,) and out.dtype == torch.float64


def test_exact_cost_names_the_routes_and_units():
    from raise_eval.models import DBM, DBN

    def zeros_model(cls, sizes):
        g = torch.Generator().manual_seed(0)
        return cls.random(sizes, weight_std=0.0, bias_std=0.0, generator=g)

    cost = exact.exact_cost(zeros_model(DBM, [784, 20, 500]), 1000)
    assert (cost.log_f_route, cost.log_f_units, cost.log_z_units, cost.log_z_group) == ("odd", 20, 20, "odd")
    configs = 2**20
    assert cost.log_f_macs == configs * (20 + 500 * 20) + 1000 * configs * 20 + 1000 * (784 * 20 + 784)
    assert cost.log_z_macs == configs * (20 + 784 * 20 + 20 * 500)
    assert cost.multiply_adds == cost.log_z_macs + cost.log_f_macs
    # The odd route (a multiply-add per x_1 unit) is kept over the even one (a softplus) up to two more units:
    # 784-18-17 enumerates 2^18 odd configurations (measured 8 times faster than the 2^17 even ones).
    assert exact.exact_cost(zeros_model(DBM, [784, 18, 17]), 10).log_f_route == "odd"
    assert exact.exact_cost(zeros_model(DBM, [784, 18, 15]), 10).log_f_route == "even"
    assert exact.exact_cost(zeros_model(DBM, [784, 26, 24]), 10).log_f_route == "even"  # odd over the limit
    assert cost.to_dict()["log_f_route"] == "odd" and cost.to_dict()["multiply_adds"] == cost.multiply_adds
    assert exact.exact_cost(zeros_model(DBM, [784, 20, 500]), 2000).log_f_macs > cost.log_f_macs

    cost = exact.exact_cost(zeros_model(DBM, [784, 500, 20]), 10)  # x_2 is the small group; log Z is out of reach
    assert (cost.log_f_route, cost.log_f_units, cost.log_z_units) == ("even", 20, 500)
    cost = exact.exact_cost(RBM.random(784, 20, generator=torch.Generator()), 10)
    assert (cost.log_f_route, cost.log_f_units, cost.log_z_units, cost.log_z_group) == ("closed-form", 0, 20, "odd")
    cost = exact.exact_cost(zeros_model(DBN, [784, 20, 500]), 10)
    assert (cost.log_f_route, cost.log_f_units, cost.log_z_units, cost.log_z_group) == ("dbn", 20, 20, "even")
    deep = zeros_model(DBN, [784, 12, 10, 8])  # the push-down sums the (x_1, x_2) table: 22 units at once
    assert exact.log_f_units(deep) == exact.exact_cost(deep, 1).log_f_units == 22
    for model in (zeros_model(DBM, [784, 20, 500]), zeros_model(DBM, [784, 500, 20])):
        assert exact.log_f_units(model) == 20
