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
