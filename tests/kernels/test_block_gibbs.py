"""The block-Gibbs kernel samples exactly the transition matrix built from the energy (raise_eval.exact)."""

import pytest
import torch

from raise_eval import BoltzmannPath, data_base_rates, exact
from raise_eval.kernels.block_gibbs import block_gibbs_step
from raise_eval.runtime import product_routes
from tests.statistics import assert_counts_match

CHAINS = 200_000


def _even_code(state, model):
    even = torch.cat([x for x in state.layers if x is not None], dim=-1)
    return exact.configuration_index(even)


def _state_from_code(path, code, chains):
    sizes = path.model.layer_sizes
    n_even = sum(sizes[l] for l in range(0, len(sizes), 2))
    bits = exact.binary_configurations(n_even, code, code + 1, dtype=path.model.dtype).expand(chains, -1).contiguous()
    layers, start = [], 0
    for l, n in enumerate(sizes):
        if l % 2 == 0:
            layers.append(bits[:, start : start + n].contiguous())
            start += n
        else:
            layers.append(None)
    return path.state_from_layers(layers)


@pytest.mark.parametrize("native", ["native", "pytorch"])
@pytest.mark.parametrize("fixture, beta, code", [("tiny_rbm", 0.6, 0), ("tiny_rbm", 1.0, 201), ("tiny_chain", 0.8, 77)])
def test_one_step_matches_the_exact_transition_row(fixture, beta, code, native, request, train_vectors, monkeypatch):
    """Statistical (chi-square, false alarm 1e-4): 200,000 chains from one state, one step; with the C kernels
    (Philox draws) and with RAISE_EVAL_NATIVE=0 (the PyTorch draws)."""
    if native == "pytorch":
        monkeypatch.setenv("RAISE_EVAL_NATIVE", "0")
    model = request.getfixturevalue(fixture)
    base = data_base_rates(model, train_vectors) if model.n_visible == 8 else None
    path = BoltzmannPath(model, base)
    state = _state_from_code(path, code, CHAINS)
    new = path.transition(state, beta, torch.Generator().manual_seed(code))
    row = exact.block_gibbs_transition_matrix(path.at(beta))[code]
    counts = torch.bincount(_even_code(new, model), minlength=row.numel())
    assert_counts_match(counts, row)


@pytest.mark.parametrize("fixture, beta, code", [("tiny_rbm", 0.6, 0), ("tiny_rbm", 1.0, 201), ("tiny_chain", 0.8, 77)])
def test_float32_step_with_each_product_route_matches_the_exact_transition_row(
    fixture, beta, code, request, product_route
):
    """The float32 step whose products go through each route (torch.mm; oneDNN, for the chain two products summed by
    the op's binary post-op; the table route and the amx route for the sampled layers) samples the exact transition
    row of the float32 model (chi-square, false alarm 1e-4), its logits' sigmoid and draws in the C kernel where it
    compiles."""
    model = request.getfixturevalue(fixture).to(dtype=torch.float32)
    path = BoltzmannPath(model)
    state = _state_from_code(path, code, CHAINS)
    product_route.clear()  # building the start state made products of its own
    new = path.transition(state, beta, torch.Generator().manual_seed(code))
    forced = product_routes.force_route(None)
    product_routes.force_route(forced)
    assert product_route and all(route == forced for route in product_route)
    assert new.layers[0].dtype == torch.float32
    row = exact.block_gibbs_transition_matrix(path.at(beta))[code]
    counts = torch.bincount(_even_code(new, model), minlength=row.numel())
    assert_counts_match(counts, row)


def test_clamped_visible_layer_samples_the_hidden_conditional(tiny_chain):
    """With v clamped, a step from h2 samples sum_h1 p(h1 | v, h2) p(h2' | h1) (chi-square, 1e-4)."""
    path = BoltzmannPath(tiny_chain)
    v_code, h2_code = 9, 5
    state = _state_from_code(path, v_code + (h2_code << 5), CHAINS)
    new = path.transition(state, 1.0, torch.Generator().manual_seed(0), clamped=(0,))
    assert torch.equal(new.layers[0], state.layers[0])
    v = exact.binary_configurations(5, v_code, v_code + 1)
    h1 = exact.binary_configurations(4)
    h2 = exact.binary_configurations(3)
    joint = tiny_chain.log_unnormalized_joint(
        [v.expand(16, 8, 5), h1.unsqueeze(1).expand(16, 8, 4), h2.unsqueeze(0).expand(16, 8, 3)]
    )  # (h1, h2)
    p_h1 = torch.softmax(joint[:, h2_code], 0)
    p_h2_given_h1 = torch.softmax(joint, 1)
    row = p_h1 @ p_h2_given_h1
    counts = torch.bincount(exact.configuration_index(new.layers[2]), minlength=8)
    assert_counts_match(counts, row)


def test_step_leaves_the_exact_distribution_invariant(tiny_rbm):
    """Start from exact samples of p_beta (drawn by enumeration), take three steps: still p_beta."""
    path = BoltzmannPath(tiny_rbm)
    beta = 0.9
    v = exact.binary_configurations(8)
    p = torch.softmax(path.at(beta).log_unnormalized_marginal([v, None]), 0)
    g = torch.Generator().manual_seed(1)
    codes = torch.multinomial(p, CHAINS, replacement=True, generator=g)
    state = path.state_from_layers([v[codes], None])
    for _ in range(3):
        state = path.transition(state, beta, g)
    assert_counts_match(torch.bincount(_even_code(state, tiny_rbm), minlength=256), p)


def test_cached_inputs_stay_consistent(tiny_chain):
    path = BoltzmannPath(tiny_chain)
    g = torch.Generator().manual_seed(2)
    state = path.sample_initial(50, g)
    for beta in (0.1, 0.5, 1.0):
        state = path.transition(state, beta, g)
        torch.testing.assert_close(state.odd_inputs[1], tiny_chain.unscaled_input(state.layers, 1))
        assert state.layers[1] is None


def test_same_seed_same_chain(tiny_chain):
    def run(seed):
        path = BoltzmannPath(tiny_chain)
        g = torch.Generator().manual_seed(seed)
        s = path.sample_initial(20, g)
        for _ in range(5):
            s = block_gibbs_step(path.at(0.5), s, g)
        return s.layers[0], s.layers[2]

    a, b, c = run(0), run(0), run(1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


def _small_step_path():
    from raise_eval.models import RBM

    model = RBM.random(12, 9, weight_std=0.3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    return lambda: BoltzmannPath(model)


def test_reused_probabilities_give_exactly_the_same_step():
    """After a small-step weight update the state carries p(h | v) at beta_to for the next transition at beta_to;
    that step must be bit-identical to one that recomputes the probabilities, in place or not, and must leave the
    state it was given unchanged."""
    path = _small_step_path()()
    state = path.sample_initial(5000, torch.Generator().manual_seed(0))
    ratio, carried = path.weight_update(state, 0.50, 0.51)
    assert carried.probs_key == path.probs_key(0.51, state) and carried.odd_probs[1] is not None  # small-step form
    assert state.probs_key is None and carried.layers[0] is state.layers[0]
    assert torch.equal(ratio, path.log_density_ratio(state, 0.50, 0.51))
    kept = carried.odd_probs[1].clone()
    a = path.transition(carried, 0.51, torch.Generator().manual_seed(1))
    assert torch.equal(carried.odd_probs[1], kept)  # `transition` samples from a copy
    b = path.transition(state, 0.51, torch.Generator().manual_seed(1))
    assert torch.equal(a.layers[0], b.layers[0])
    own = path.clone_state(state)
    _, own = path.weight_update_(own, 0.50, 0.51)
    c = path.transition_(own, 0.51, torch.Generator().manual_seed(1))
    assert c.probs_key is None and torch.equal(c.layers[0], b.layers[0])


def test_probabilities_of_another_beta_are_never_reused(monkeypatch):
    """A state's probabilities serve a transition of their own path, at their own beta, from the state unchanged;
    a large step (the softplus form) leaves none."""
    import raise_eval.paths.boltzmann as boltzmann_paths

    path = _small_step_path()()
    state = path.sample_initial(5000, torch.Generator().manual_seed(2))
    given = []
    original = boltzmann_paths.block_gibbs_step
    monkeypatch.setattr(
        boltzmann_paths,
        "block_gibbs_step",
        lambda *a, **k: given.append(k.get("odd_probs")) or original(*a, **k),
    )
    _, carried = path.weight_update(state, 0.50, 0.51)
    a = path.transition(carried, 0.52, torch.Generator().manual_seed(3))
    b = path.transition(state, 0.52, torch.Generator().manual_seed(3))
    assert given == [None, None] and torch.equal(a.layers[0], b.layers[0])
    other = _small_step_path()()  # another path over the same model: its own probabilities only
    c = other.transition(carried, 0.51, torch.Generator().manual_seed(3))
    d = path.transition(carried, 0.51, torch.Generator().manual_seed(3))
    assert given[2] is None and given[3] is not None and torch.equal(c.layers[0], d.layers[0])
    assert path.with_clamped(()).probs_key(0.51, state) == path.probs_key(0.51, state) != other.probs_key(0.51, state)
    # changed in place after the weight update (a user setting the visible layer): stale, recomputed
    _, carried = path.weight_update(state, 0.50, 0.51)
    flipped = 1.0 - state.layers[0]
    carried.layers[0].copy_(flipped)
    carried.odd_inputs[1].copy_(path.state_from_layers([flipped, None]).odd_inputs[1])
    e = path.transition(carried, 0.51, torch.Generator().manual_seed(4))
    assert given[4] is None
    f = path.transition(path.state_from_layers([flipped, None]), 0.51, torch.Generator().manual_seed(4))
    assert torch.equal(e.layers[0], f.layers[0])
    # a new state built around the old probabilities: not its own, recomputed
    _, carried = path.weight_update(state, 0.50, 0.51)
    rebuilt = path.state_from_layers([state.layers[0].clone(), None])._replace(
        odd_probs=carried.odd_probs, probs_key=carried.probs_key
    )
    path.transition(rebuilt, 0.51, torch.Generator().manual_seed(4))
    assert given[-1] is None
    _, far = path.weight_update(state, 0.0, 1.0)  # |d| may exceed 2: no probabilities
    assert far.probs_key is None
