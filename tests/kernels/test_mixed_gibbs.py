"""The block-Gibbs kernel of typed layers leaves p_beta invariant, for every RBM pairing at beta = 1 and at a point
inside the path: exact samples of p_beta(v) go through one transition and a chi-square test compares them with
p_beta(v) (over every configuration of a discrete visible layer; over cells of a Gaussian one, whose exact
probabilities are products of normal CDFs given the hidden layer, or of the whitened joint Gaussian). Each test has
a false-alarm rate of about 1e-4 (tests.statistics.chi_square_threshold); seeds are fixed."""

import pytest
import torch

from raise_eval import exact
from raise_eval.paths.mixed import MixedPath
from tests.mixed_models import (
    PAIRINGS,
    exact_visible_samples,
    gaussian_visible_marginal,
    normal_cdf,
    tiny_dbm,
    tiny_pair,
)
from tests.statistics import assert_counts_match

SAMPLES = 60_000
EDGES = torch.tensor([-1.0, -0.3, 0.3, 1.0], dtype=torch.float64)  # standardized cell edges per Gaussian unit


def _cells_and_probs(model, v):
    """(cell index of each row of v, exact probability of each cell) for the visible layer of `model`."""
    lv, lh = model.layers
    if lv.discrete:
        p = torch.softmax(exact.log_unnormalized_visible(model, lv.configurations(0, lv.num_configurations)), 0)
        return lv.configuration_index(v), p
    bins = len(EDGES) + 1
    lows = torch.cat([torch.tensor([-float("inf")], dtype=torch.float64), EDGES])
    highs = torch.cat([EDGES, torch.tensor([float("inf")], dtype=torch.float64)])
    if lh.discrete:  # v | h diagonal Gaussian: cells standardized by the mixture's moments
        h = lh.configurations(0, lh.num_configurations)
        p_h = torch.softmax(model.log_unnormalized_marginal([None, h]), 0)
        eta, lam = model.biases[0]
        means = (eta + model.layer_input([None, h], 0)) / lam  # (H, n)
        sd = lam.rsqrt()
        center = p_h @ means
        spread = (p_h @ (means - center).square() + sd.square()).sqrt()
        cell = ((v - center) / spread).unsqueeze(-1).gt(EDGES).sum(-1)  # (N, n) bins 0..4
        per_unit = []
        for i in range(lv.size):
            z_hi = (center[i] + spread[i] * highs - means[:, i : i + 1]) / sd[i]
            z_lo = (center[i] + spread[i] * lows - means[:, i : i + 1]) / sd[i]
            per_unit.append(normal_cdf(z_hi) - normal_cdf(z_lo))  # (H, bins)
        probs = per_unit[0]
        for more in per_unit[1:]:
            probs = (probs.unsqueeze(-1) * more.unsqueeze(1)).reshape(probs.shape[0], -1)
        codes = sum(cell[:, i] * bins**i for i in range(lv.size))
        # probs' columns run with the first unit slowest: reorder to codes with the first unit the least significant
        probs = probs.reshape(-1, *[bins] * lv.size).permute(0, *range(lv.size, 0, -1)).reshape(probs.shape[0], -1)
        return codes, p_h @ probs
    mean, cov = gaussian_visible_marginal(model)  # whitened: independent standard normals
    z = torch.linalg.solve_triangular(torch.linalg.cholesky(cov), (v - mean).t(), upper=False).t()
    cell = z.unsqueeze(-1).gt(EDGES).sum(-1)
    p1 = normal_cdf(highs) - normal_cdf(lows)
    probs = p1
    for _ in range(lv.size - 1):
        probs = (p1.unsqueeze(-1) * probs.unsqueeze(0)).reshape(-1)
    return sum(cell[:, i] * bins**i for i in range(lv.size)), probs


@pytest.mark.parametrize("beta", [1.0, 0.6])
@pytest.mark.parametrize("visible,hidden", PAIRINGS)
def test_block_gibbs_leaves_p_beta_invariant(visible, hidden, beta):
    model = tiny_pair(visible, hidden)
    path = MixedPath(model)
    at = path.at(beta)
    g = torch.Generator().manual_seed(5)
    v = exact_visible_samples(at, SAMPLES, g)
    state = path.transition(path.state_from_layers([v, None]), beta, g)
    cells, probs = _cells_and_probs(at, state.layers[0])
    assert_counts_match(torch.bincount(cells, minlength=probs.numel()), probs)


def test_the_cells_of_a_gaussian_layer_are_right():
    """Power check of the cells: exact samples pass, samples of another beta are rejected."""
    model = tiny_pair("gaussian", "bernoulli")
    path = MixedPath(model)
    g = torch.Generator().manual_seed(6)
    cells, probs = _cells_and_probs(model, exact_visible_samples(model, SAMPLES, g))
    assert_counts_match(torch.bincount(cells, minlength=probs.numel()), probs)
    cells, _ = _cells_and_probs(model, exact_visible_samples(path.at(0.6), SAMPLES, g))
    with pytest.raises(AssertionError, match="chi-square"):
        assert_counts_match(torch.bincount(cells, minlength=probs.numel()), probs)


def test_the_clamped_kernel_leaves_p_of_the_even_hidden_layer_given_v_invariant():
    """The heating kernel of a DBM (visible layer clamped): exact samples of p(x_2 | v) stay exact."""
    model = tiny_dbm(("spin", "categorical", "bernoulli"))
    path = MixedPath(model).with_clamped((0,))
    top = model.layers[2]
    x2 = top.configurations(0, top.num_configurations)
    v = torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64)
    log_f = model.log_unnormalized_marginal([v.expand(x2.shape[0], -1), None, x2])
    p = torch.softmax(log_f, 0)
    g = torch.Generator().manual_seed(7)
    start = x2[torch.multinomial(p, SAMPLES, replacement=True, generator=g)]
    state = path.state_from_layers([v.expand(SAMPLES, -1), None, start])
    after = path.transition(state, 1.0, g)
    assert torch.equal(after.layers[0], state.layers[0])
    assert_counts_match(torch.bincount(top.configuration_index(after.layers[2]), minlength=x2.shape[0]), p)
