"""Exact identities of the layered Boltzmann machine energy (no sampling, no tolerance beyond rounding)."""

import itertools

import pytest
import torch
from raise_eval.models import RBM, LayeredBoltzmannMachine

from raise_eval import exact


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
    buffers = [torch.empty(6, 4, dtype=torch.float64), torch.empty(6, 4, dtype=torch.float64)]
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


@pytest.mark.parametrize("sizes", [(300, 200), (120, 200, 90)])
def test_onednn_products_are_float32_accurate_deterministic_and_row_by_row(sizes, monkeypatch):
    """Large float32 CPU products go through oneDNN (a middle layer's two products summed by the op's binary
    post-op): within float32 rounding of the float64 products (relative to the sum of |terms|, as for torch.mm),
    the same bits on every call, a row's result independent of the other rows, and written into `out` when given."""
    from raise_eval.models.boltzmann import layered

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN")
    model, layers = _float32_chain(sizes, seed=12)
    m64 = model.to(dtype=torch.float64)
    abs64 = LayeredBoltzmannMachine([w.abs() for w in m64.weights], [b.abs() for b in m64.biases], 0.7)
    layers64 = [x.double() for x in layers]
    calls = []
    original = layered._use_onednn
    monkeypatch.setattr(layered, "_use_onednn", lambda x, w: calls.append(original(x, w)) or calls[-1])
    for l in range(model.num_layers):
        for get, get64, get_abs in (
            (model.unscaled_input, m64.unscaled_input, abs64.unscaled_input),
            (model.layer_logits, m64.layer_logits, abs64.layer_logits),
        ):
            calls.clear()
            y = get(layers, l)
            assert calls and all(calls)  # every product for this layer went through oneDNN
            error = (y.double() - get64(layers64, l)).abs() / get_abs(layers64, l).clamp_min(1.0)
            assert error.max().item() < 64 * 2**-24
            assert torch.equal(get(layers, l), y)
            assert torch.equal(get([x[:250] for x in layers], l), y[:250])
            out = torch.empty_like(y)
            get(layers, l, out=out)
            assert torch.equal(out, y)
    monkeypatch.setattr(layered, "ONEDNN_MIN_MACS", None)  # switched off: torch.mm, equal up to rounding
    calls.clear()
    mkl = model.unscaled_input(layers, 1)
    assert calls and not any(calls)
    torch.testing.assert_close(mkl, m64.unscaled_input(layers64, 1).float(), rtol=1e-5, atol=1e-5)


def test_products_that_onednn_does_not_take():
    """float64, small products and products that need a gradient stay with torch.mm."""
    from raise_eval.models.boltzmann.layered import ONEDNN_MIN_MACS, _use_onednn

    x, w = torch.ones(1000, 784), torch.ones(784, 500)
    assert _use_onednn(x, w) == torch.backends.mkldnn.is_available()
    assert not _use_onednn(x.double(), w.double())
    assert 10 * 8 * 6 < ONEDNN_MIN_MACS <= 1000 * 784 * 500
    assert not _use_onednn(torch.ones(10, 8), torch.ones(8, 6))
    assert not _use_onednn(x, w.clone().requires_grad_())
    with torch.no_grad():
        assert _use_onednn(x, w.clone().requires_grad_()) == torch.backends.mkldnn.is_available()
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        assert not _use_onednn(x, w)
    finally:
        torch.backends.mkldnn.enabled = enabled


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_small_step_log_ratio_has_the_bits_of_the_direct_formula(tiny_chain, dtype):
    """The small-step term is -log1p(expm1(-d) sigmoid(z')) summed over the units (d = z' - z), computed without
    negating d and each term (it negates the sum, exactly): bit for bit the direct formula."""
    model = tiny_chain.to(dtype=dtype)
    g = torch.Generator().manual_seed(13)
    base = [torch.randn(n, generator=g, dtype=dtype) for n in model.layer_sizes]
    layers = [x.to(dtype) for x in _random_layers(model, 4000, seed=14)]
    kept = [layers[0], None, layers[2]]
    u = model.unscaled_input(kept, 1)
    for b0, b1 in [(0.3, 0.31), (0.8, 0.75), (0.0, 0.2)]:
        a, b = model.annealed(b0, base), model.annealed(b1, base)
        got = a.log_ratio_to(b, kept, [None, u, None], small_steps=[False, True, False])
        z1 = torch.add(b.biases[1], u, alpha=b.weight_scale)
        d = torch.add(b.biases[1] - a.biases[1], u, alpha=b.weight_scale - a.weight_scale)
        hidden = (-torch.log1p(torch.expm1(-d) * torch.sigmoid(z1))).sum(-1)
        even = [torch.mv(layers[l], b.biases[l] - a.biases[l]) for l in (0, 2)]
        assert torch.equal(got, even[0] + hidden + even[1])
