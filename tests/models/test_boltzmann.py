"""Exact identities of the layered Boltzmann machine energy (no sampling, no tolerance beyond rounding)."""

import itertools
import json
import math

import pytest
import torch
from raise_eval.models import RBM, LayeredBoltzmannMachine
from raise_eval.models.boltzmann import products
from raise_eval.models.boltzmann.products import ROUTES
from raise_eval.models.numerics import expm1_

from raise_eval import exact
from raise_eval.runtime import product_routes


def _random_layers(model, batch, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 2, (batch, n), generator=g).double() for n in model.layer_sizes]


@pytest.mark.parametrize("fixture", ["tiny_rbm", "tiny_chain"])
def test_conditionals_are_consistent_with_the_joint(fixture, request):
    """p(x_l | rest) / p(x_l' | rest) = f(x_l, rest) / f(x_l', rest) for every layer and unit."""
    model = request.getfixturevalue(fixture)
    layers = _random_layers(model, 16, seed=0)
    for l in range(model.num_layers):
        log_p1 = torch.nn.functional.logsigmoid(model.layer_logits(layers, l))
        log_p0 = torch.nn.functional.logsigmoid(-model.layer_logits(layers, l))
        for j in range(model.layer_sizes[l]):
            on, off = [x.clone() for x in layers], [x.clone() for x in layers]
            on[l][:, j], off[l][:, j] = 1.0, 0.0
            joint_ratio = model.log_unnormalized_joint(on) - model.log_unnormalized_joint(off)
            torch.testing.assert_close(log_p1[:, j] - log_p0[:, j], joint_ratio, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fixture", ["tiny_rbm", "tiny_chain"])
def test_summing_out_layers_matches_enumeration(fixture, request):
    model = request.getfixturevalue(fixture)
    layers = _random_layers(model, 7, seed=1)
    for parity in (0, 1):
        summed = [l for l in range(model.num_layers) if l % 2 == parity]
        kept = [None if l in summed else x for l, x in enumerate(layers)]
        brute = []
        for configs in itertools.product(*[exact.binary_configurations(model.layer_sizes[l]) for l in summed]):
            full = list(kept)
            for l, c in zip(summed, configs):
                full[l] = c.expand(7, -1)
            brute.append(model.log_unnormalized_joint(full))
        expected = torch.logsumexp(torch.stack(brute), dim=0)
        torch.testing.assert_close(model.log_unnormalized_marginal(kept), expected, rtol=0, atol=1e-10)


def test_rbm_free_energy_formula(tiny_rbm):
    v = _random_layers(tiny_rbm, 5, seed=2)[0]
    expected = v @ tiny_rbm.vbias + torch.nn.functional.softplus(tiny_rbm.hbias + v @ tiny_rbm.W).sum(-1)
    torch.testing.assert_close(tiny_rbm.log_unnormalized_prob(v), expected, rtol=0, atol=1e-12)


def test_leading_batch_dimensions(tiny_rbm):
    v = torch.randint(0, 2, (3, 4, 8), generator=torch.Generator().manual_seed(0)).double()
    flat = tiny_rbm.log_unnormalized_prob(v.reshape(12, 8))
    torch.testing.assert_close(tiny_rbm.log_unnormalized_prob(v), flat.reshape(3, 4))
    assert tiny_rbm.hidden_probs(v).shape == (3, 4, 6)


def test_geometric_path_is_linear_interpolation(tiny_chain):
    """log f_beta(x) = (1 - beta) log f_base(x) + beta log f(x) for full configurations."""
    g = torch.Generator().manual_seed(4)
    base = [torch.randn(n, generator=g, dtype=torch.float64) for n in tiny_chain.layer_sizes]
    layers = _random_layers(tiny_chain, 9, seed=3)
    log_base = sum(x @ c for x, c in zip(layers, base))
    for beta in (0.0, 0.3, 1.0):
        annealed = tiny_chain.annealed(beta, base)
        expected = (1 - beta) * log_base + beta * tiny_chain.log_unnormalized_joint(layers)
        torch.testing.assert_close(annealed.log_unnormalized_joint(layers), expected, rtol=0, atol=1e-12)
        assert annealed.weights is tiny_chain.weights  # shared, not copied


def test_log_ratio_to_equals_difference_of_marginals(tiny_chain):
    g = torch.Generator().manual_seed(5)
    base = [torch.randn(n, generator=g, dtype=torch.float64) for n in tiny_chain.layer_sizes]
    layers = _random_layers(tiny_chain, 6, seed=6)
    kept = [layers[0], None, layers[2]]
    a, b = tiny_chain.annealed(0.2, base), tiny_chain.annealed(0.7, base)
    expected = b.log_unnormalized_marginal(kept) - a.log_unnormalized_marginal(kept)
    torch.testing.assert_close(a.log_ratio_to(b, kept), expected, rtol=0, atol=1e-12)
    buffers = [torch.empty(6, 4, dtype=torch.float64) for _ in range(4)]
    torch.testing.assert_close(a.log_ratio_to(b, kept, buffers=buffers), expected, rtol=0, atol=1e-12)
    full = layers  # no summed-out layer: pairwise terms change with the weight scale
    expected_full = b.log_unnormalized_joint(full) - a.log_unnormalized_joint(full)
    torch.testing.assert_close(a.log_ratio_to(b, full), expected_full, rtol=0, atol=1e-12)


def test_adjacent_summed_layers_are_refused(tiny_chain):
    with pytest.raises(ValueError, match="both summed out"):
        tiny_chain.log_unnormalized_marginal([torch.zeros(1, 5, dtype=torch.float64), None, None])


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda W, a, b: (W.index_fill(0, torch.tensor([0]), float("nan")), a, b), "NaN"),
        (lambda W, a, b: (W, a.index_fill(0, torch.tensor([1]), float("inf")), b), "infinite"),
        (lambda W, a, b: (W.t(), a, b), "shape"),
        (lambda W, a, b: (W, a.float(), b), "convert all parameters"),
        (lambda W, a, b: (W.long(), a, b), "floating point"),
    ],
)
def test_invalid_parameters_are_refused(tiny_rbm, bad, message):
    W, a, b = bad(tiny_rbm.W.clone(), tiny_rbm.vbias.clone(), tiny_rbm.hbias.clone())
    with pytest.raises((ValueError, TypeError), match=message):
        RBM(W, a, b)


def test_wrong_number_of_biases_is_refused():
    with pytest.raises(ValueError, match="bias vectors"):
        LayeredBoltzmannMachine([torch.zeros(3, 2)], [torch.zeros(3)])


def test_sampled_layer_frequencies_match_conditionals(tiny_rbm):
    """Statistical: the mean of 200,000 samples is within 4 standard errors of p(h_j = 1 | v) for each unit
    (failure probability about 6e-5 per unit for a correct sampler; fixed seed)."""
    g = torch.Generator().manual_seed(7)
    v = torch.tensor([[1, 0, 1, 1, 0, 0, 1, 0]], dtype=torch.float64).expand(200_000, 8)
    h = tiny_rbm.sample_hidden(v, g)
    p = tiny_rbm.hidden_probs(v[:1])[0]
    se = (p * (1 - p) / 200_000).sqrt()
    assert ((h.mean(0) - p).abs() < 4 * se).all()
    assert set(h.unique().tolist()) <= {0.0, 1.0}


def test_small_step_form_of_the_log_ratio_is_exact(tiny_chain):
    """log1p(expm1(d) sigmoid(z)) = softplus(z + d) - softplus(z): the two forms agree to rounding."""
    g = torch.Generator().manual_seed(8)
    base = [torch.randn(n, generator=g, dtype=torch.float64) for n in tiny_chain.layer_sizes]
    layers = _random_layers(tiny_chain, 64, seed=9)
    kept = [layers[0], None, layers[2]]
    for b0, b1 in [(0.3, 0.31), (0.8, 0.75), (0.0, 0.2)]:
        a, b = tiny_chain.annealed(b0, base), tiny_chain.annealed(b1, base)
        plain = a.log_ratio_to(b, kept)
        small = a.log_ratio_to(b, kept, small_steps=[False, True, False])
        torch.testing.assert_close(small, plain, rtol=0, atol=1e-12)


def test_path_bounds_the_logit_change_of_a_step(tiny_chain):
    """BoltzmannPath's host-side bound |z'(x) - z(x)| <= |beta' - beta| * speed holds for every state."""
    from raise_eval import BoltzmannPath

    g = torch.Generator().manual_seed(10)
    base = [torch.randn(n, generator=g, dtype=torch.float64) for n in tiny_chain.layer_sizes]
    path = BoltzmannPath(tiny_chain, base)
    state = path.sample_initial(5000, g)
    for b0, b1 in [(0.0, 1.0), (0.4, 0.45)]:
        z0 = path.at(b0).layer_logits(state.layers, 1, state.odd_inputs[1])
        z1 = path.at(b1).layer_logits(state.layers, 1, state.odd_inputs[1])
        assert (z1 - z0).abs().max().item() <= abs(b1 - b0) * path._logit_speed[1] + 1e-12


def _float32_chain(sizes, seed):
    from raise_eval.models.boltzmann.layered import random_chain_parameters

    g = torch.Generator().manual_seed(seed)
    weights, biases = random_chain_parameters(sizes, weight_std=0.1, bias_std=0.5, generator=g)
    layers = [(torch.rand(600, n, generator=g) < 0.5).float() for n in sizes]
    return LayeredBoltzmannMachine(weights, biases, weight_scale=0.7), layers


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("sizes", [(300, 200), (120, 200, 90)])
def test_every_product_route_is_float32_accurate_deterministic_and_row_by_row(sizes, route, monkeypatch):
    """Every route of the float32 CPU products (torch.mm; oneDNN, a middle layer's two products summed by the op's
    binary post-op; the table route for binary inputs, its two tables in one): within float32 rounding of the
    float64 products (relative to the sum of |terms|, as for torch.mm), the same bits on every call, a row's result
    independent of the other rows, and written into `out` when given."""
    if route == "onednn" and not products.onednn_available():
        pytest.skip("this torch build has no oneDNN")
    if route == "amx" and not products.amx_available():
        pytest.skip("this CPU has no AMX tiles (or no C compiler)")
    model, layers = _float32_chain(sizes, seed=12)
    m64 = model.to(dtype=torch.float64)
    abs64 = LayeredBoltzmannMachine([w.abs() for w in m64.weights], [b.abs() for b in m64.biases], 0.7)
    layers64 = [x.double() for x in layers]
    calls = []
    original = products.run_route
    monkeypatch.setattr(products, "run_route", lambda r, *a, **k: calls.append(r) or original(r, *a, **k))
    with product_routes.forced_route(route):
        for l in range(model.num_layers):
            for get, get64, get_abs in (
                (model.unscaled_input, m64.unscaled_input, abs64.unscaled_input),
                (model.layer_logits, m64.layer_logits, abs64.layer_logits),
            ):
                calls.clear()
                y = get(layers, l, sampled=True)
                assert calls == [route]  # the layer's products (one or two) went through the route, in one call
                error = (y.double() - get64(layers64, l)).abs() / get_abs(layers64, l).clamp_min(1.0)
                assert error.max().item() < 64 * 2**-24
                assert torch.equal(get(layers, l, sampled=True), y)
                assert torch.equal(get([x[:250] for x in layers], l, sampled=True), y[:250])
                out = torch.empty_like(y)
                get(layers, l, out=out, sampled=True)
                assert torch.equal(out, y)


def test_products_are_routed_by_timing_once_per_shape(monkeypatch):
    """Large float32 CPU products are timed once per shape (every route that can compute them) and take the
    fastest; the choice is recorded with its timings and reused; float64 has no oneDNN route, non-binary inputs no
    table route; small products, CUDA and products that need a gradient stay with torch.mm, unrecorded; a route
    that cannot compute a product it is forced on leaves it to torch.mm."""
    product_routes.clear_route_choices()
    monkeypatch.delenv(product_routes.ROUTE_ENV, raising=False)
    cpu = torch.device("cpu")
    timed = []
    original = product_routes._time_routes
    monkeypatch.setattr(
        product_routes, "_time_routes", lambda routes, *a: timed.append(tuple(routes)) or original(routes, *a)
    )
    choice = product_routes.choose_route(64, (784,), 500, torch.float32, cpu, True, False)
    expected = ("mm", "onednn", "table") if products.onednn_available() else ("mm", "table")
    if products.amx_available():
        expected += ("amx",)
    assert timed == [expected] and choice.how == "measured"
    timings = dict(choice.timings_ms)
    assert set(timings) == set(expected) and choice.route == min(timings, key=timings.get)
    assert product_routes.choose_route(64, (784,), 500, torch.float32, cpu, True, False) is choice  # cached
    assert len(timed) == 1 and product_routes.route_choices() == (choice,)
    record = choice.as_dict()
    assert record["route"] == choice.route and set(record["timings_ms"]) == set(expected)
    product_routes.choose_route(64, (784,), 500, torch.float64, cpu, True, False)
    product_routes.choose_route(64, (784,), 500, torch.float32, cpu, False, False)
    assert timed[1:] == [("mm", "table"), tuple(r for r in expected if r in ("mm", "onednn"))]
    assert product_routes.choose_route(10, (8,), 6, torch.float32, cpu, True, False) is None  # small
    assert product_routes.choose_route(64, (784,), 500, torch.float32, cpu, True, True) is None  # gradient
    assert product_routes.choose_route(64, (784,), 500, torch.float32, torch.device("meta"), True, False) is None
    monkeypatch.setenv(product_routes.ROUTE_ENV, "table")
    forced = product_routes.choose_route(10, (8,), 6, torch.float32, cpu, False, False)
    assert (forced.route, forced.how) == ("mm", "forced-unavailable")
    assert product_routes.choose_route(10, (8,), 6, torch.float32, cpu, True, False).how == "forced"
    monkeypatch.setenv(product_routes.ROUTE_ENV, "fastest")
    with pytest.raises(ValueError, match="RAISE_EVAL_PRODUCT_ROUTE"):
        product_routes.choose_route(10, (8,), 6, torch.float32, cpu, True, False)
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False  # a user who switched oneDNN off never gets it
    try:
        monkeypatch.setenv(product_routes.ROUTE_ENV, "onednn")
        assert product_routes.choose_route(10, (8,), 6, torch.float32, cpu, True, False).route == "mm"
    finally:
        torch.backends.mkldnn.enabled = enabled
    product_routes.clear_route_choices()


@pytest.mark.parametrize("sizes", [(300, 200), (120, 200, 90)])
def test_products_that_need_a_gradient_are_differentiable(sizes):
    """With parameters that require a gradient (training, e.g. a free-energy loss), the layer's input is torch.mm's,
    without out= buffers, and backpropagates to the weights."""
    model, layers = _float32_chain(sizes, seed=16)
    weights = [w.clone().requires_grad_() for w in model.weights]
    trained = LayeredBoltzmannMachine(weights, model.biases, model.weight_scale)
    for l in range(trained.num_layers):
        for w in weights:
            w.grad = None
        trained.layer_logits(layers, l).sum().backward()
        adjacent = [i in (l - 1, l) for i in range(len(weights))]
        assert [w.grad is not None for w in weights] == adjacent


def test_adopted_route_choices_are_used_without_timing(monkeypatch):
    """Choices saved by another process (as JSON-ready dicts) are taken for their shapes without timing, so that a
    resumed run computes its products as the interrupted one did."""
    product_routes.clear_route_choices()
    monkeypatch.delenv(product_routes.ROUTE_ENV, raising=False)
    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    record = product_routes.RouteChoice(64, (784,), 500, "float32", threads, True, "mm", "measured", (("mm", 1.0),))
    product_routes.adopt_route_choices([json.loads(json.dumps(record.as_dict()))])
    monkeypatch.setattr(product_routes, "_time_routes", lambda *a: pytest.fail("timed an adopted shape"))
    choice = product_routes.choose_route(64, (784,), 500, torch.float32, cpu, True, False)
    assert (choice.route, choice.how, dict(choice.timings_ms)) == ("mm", "measured", {"mm": 1.0})
    product_routes.adopt_route_choices([{k: v for k, v in record.as_dict().items() if k != "how"}])
    assert product_routes.choose_route(64, (784,), 500, torch.float32, cpu, True, False).how == "adopted"
    with pytest.raises(ValueError, match="unknown product route"):
        product_routes.adopt_route_choices([dict(record.as_dict(), route="gpu")])
    product_routes.clear_route_choices()


def test_the_table_route_follows_changes_of_the_weights():
    """The tables are built once per weight tensor and rebuilt when it changes in place (a model trained between
    evaluations)."""
    g = torch.Generator().manual_seed(15)
    w = torch.randn(40, 12, generator=g)
    x = (torch.rand(7, 40, generator=g) < 0.5).float()
    table = products.cached_table([(w, False)])
    assert products.cached_table([(w, False)]) is table
    torch.testing.assert_close(table([x], None, None, 1.0), x @ w)
    w.mul_(2.0)
    rebuilt = products.cached_table([(w, False)])
    assert rebuilt is not table
    torch.testing.assert_close(rebuilt([x], None, None, 1.0), x @ w)
    with torch.inference_mode():
        frozen = torch.randn(40, 12)
    assert products.cached_table([(frozen, False)]) is None  # no version counter: not cached, torch.mm instead


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("inner", [(784,), (60, 45)])
def test_the_table_route_leaves_out_zero_groups_with_the_same_bits(inner, dtype, monkeypatch):
    """Sparse inputs: the groups whose units are all 0 are left out of the lookups (fewer indices handed to
    embedding_bag) once a check finds at least TABLE_SPARSE_MIN_ZERO_SHARE of them, with the same bits as the lookups
    of every group, rows of zeros included; dense inputs keep every lookup."""
    g = torch.Generator().manual_seed(21)
    matrices = [torch.randn(n, 70, generator=g, dtype=dtype) for n in inner]
    lookups = []
    original = torch.embedding_bag
    monkeypatch.setattr(torch, "embedding_bag", lambda w, idx, *a: lookups.append(idx.numel()) or original(w, idx, *a))
    for density, compacts in [(0.0, True), (0.02, True), (0.15, True), (0.5, False)]:
        xs = [(torch.rand(301, n, generator=g) < density).to(dtype) for n in inner]
        xs[0][:3] = 0
        if len(xs) > 1:
            xs[1][:3] = 0
        results = []
        for compact in (False, True):
            table = products.SubsetSumTable(matrices)
            table._products, table._compact = 1, compact  # no check on this product: the given setting holds
            lookups.clear()
            results.append(table(xs, None, None, 1.0))
            assert len(set(lookups)) == 1 and len(lookups) == len(table.blocks)
            per_block = lookups[0]
            if compact:
                assert per_block == int(
                    sum((x.view(301, -1, k).sum(-1) > 0).sum() for x, k in zip(xs, table.group_sizes))
                )
            else:
                assert per_block == 301 * table.groups
        assert torch.equal(results[0], results[1])
        assert torch.equal(results[1][:3], torch.zeros(3, 70, dtype=dtype))
        checked = products.SubsetSumTable(matrices)
        torch.testing.assert_close(checked(xs, None, None, 1.0), results[0], rtol=0, atol=0)
        assert checked._compact == compacts  # the first product is checked


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_table_codes_are_the_groups_bit_patterns(dtype):
    """The table route's codes, row r and group g: offset + g 2^k + sum_i 2^i x_{g k + i}, as int32 (float32 tables
    read them off the bits of 2^23 + code, float64 tables convert), for one and two terms, every pattern of a group
    and the largest codes of big tables: 2^23 + code up to 2^24 - 1, where the bit trick is still exact, and a table
    of 2^23 rows, which converts instead."""
    g = torch.Generator().manual_seed(3)
    for inner in [(784,), (60, 45), (4 * (2**19 - 1),), (4 * 2**19,)]:
        matrices = [torch.zeros(n, 1, dtype=dtype) for n in inner]
        table = products.SubsetSumTable(matrices)
        xs = [(torch.rand(17, n, generator=g) < 0.5).to(dtype) for n in inner]
        xs[0][0] = 1  # the largest codes of the first term
        codes = table._codes(xs)
        want = []
        for x, k, offset in zip(xs, table.group_sizes, table.offsets):
            groups = x.shape[1] // k
            bits = x.view(17, groups, k).long() << torch.arange(k)
            want.append(offset + torch.arange(groups) * (1 << k) + bits.sum(-1))
        assert codes.dtype == torch.int32 and torch.equal(codes.long(), torch.cat(want, 1))
        assert table._magic == (dtype == torch.float32 and inner[0] < 2**21)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_small_step_log_ratio_sums_the_log1p_of_the_direct_formula(tiny_chain, dtype):
    """The small-step term is -sum_j log1p(expm1(-d_j) sigmoid(z'_j)) (d = z' - z), with the argument of log1p
    computed in the model's dtype (expm1 by `expm1_`, tested in tests/models/test_numerics.py) and the sum as a
    float64 log of products: within 1e-13 of that sum computed term by term in float64 from the same arguments,
    and the even layers' terms added in float64."""
    model = tiny_chain.to(dtype=dtype)
    g = torch.Generator().manual_seed(13)
    base = [torch.randn(n, generator=g, dtype=dtype) for n in model.layer_sizes]
    layers = [x.to(dtype) for x in _random_layers(model, 4000, seed=14)]
    kept = [layers[0], None, layers[2]]
    u = model.unscaled_input(kept, 1)
    for b0, b1 in [(0.3, 0.31), (0.8, 0.75), (0.0, 0.2)]:
        a, b = model.annealed(b0, base), model.annealed(b1, base)
        got = a.log_ratio_to(b, kept, [None, u, None], small_steps=[False, True, False])
        assert got.dtype == torch.float64
        z1 = torch.add(b.biases[1], u, alpha=b.weight_scale)
        d = torch.add(b.biases[1] - a.biases[1], u, alpha=b.weight_scale - a.weight_scale)
        arguments = expm1_(-d) * torch.sigmoid(z1)
        hidden = (-torch.log1p(arguments.double())).sum(-1)
        even = [torch.mv(layers[l], b.biases[l] - a.biases[l]).double() for l in (0, 2)]
        torch.testing.assert_close(got, even[0] + hidden + even[1], rtol=0, atol=1e-13)


@pytest.mark.parametrize("width", [1, 7, 256, 500, 513, 1000])
def test_sum_of_log1p_by_block_products(width):
    """_sum_log1p agrees with the float64 sum of log1p to 1e-12 for widths that split into blocks evenly and
    unevenly, with every factor at the ends of its range [e^-2, e^2]."""
    from raise_eval.models.boltzmann.layered import _sum_log1p

    g = torch.Generator().manual_seed(width)
    x = torch.expm1(torch.empty(3, width, dtype=torch.float64).uniform_(-2, 2, generator=g))
    x[0] = math.expm1(2.0)
    x[1] = math.expm1(-2.0)
    expected = torch.log1p(x).sum(-1)
    torch.testing.assert_close(
        _sum_log1p(x.float().clone(), None), torch.log1p(x.float().double()).sum(-1), rtol=0, atol=1e-12 * width
    )
    torch.testing.assert_close(_sum_log1p(x.clone()), expected, rtol=0, atol=1e-12 * width)
