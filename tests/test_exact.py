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
