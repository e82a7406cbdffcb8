"""The palindromic single-site scan of fully visible models: its exact transition matrix satisfies detailed balance
with respect to p_beta and leaves it invariant (float64, tiny models), and the sampler draws from that matrix."""

from __future__ import annotations

import pytest
import torch

from raise_eval import contracts
from raise_eval.annealing import anneal
from raise_eval.exact import fully_visible as exact_fv
from raise_eval.kernels.site_gibbs import CouplingTables, SiteGibbsKernel, palindromic_order, site_scan
from raise_eval.paths.fully_visible import FullyVisiblePath, data_base_fields
from tests.fully_visible_models import random_model
from tests.statistics import assert_counts_match

TINY = [("categorical", 3, 3), ("spin", 4, 2), ("bernoulli", 4, 2)]


def _p_beta(path: FullyVisiblePath, beta: float) -> torch.Tensor:
    codes = exact_fv.site_configurations(path.model.n_visible, path.model.num_states)
    return torch.softmax(path.log_density(codes, beta), dim=0)


def _path(sites, size, q, seed=0):
    model = random_model(sites, size, q, seed=seed)
    data = exact_fv.site_configurations(size, q)[[0, 4, 4, 7]]
    return FullyVisiblePath(model, data_base_fields(model, model.sites_from_codes(data), 0.3))


def test_the_scan_is_palindromic():
    assert palindromic_order(3) == [0, 1, 2, 2, 1, 0]


@pytest.mark.parametrize("method", ["gibbs", "metropolis"])
@pytest.mark.parametrize("sites, size, q", TINY)
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_the_scan_satisfies_detailed_balance_and_leaves_p_beta_invariant(sites, size, q, beta, method):
    path = _path(sites, size, q)
    p = _p_beta(path, beta)
    matrix = exact_fv.scan_transition_matrix(path.at(beta), method)
    torch.testing.assert_close(matrix.sum(1), torch.ones_like(p), rtol=0, atol=1e-12)
    flow = p.unsqueeze(1) * matrix
    torch.testing.assert_close(flow, flow.t(), rtol=0, atol=1e-14)
    torch.testing.assert_close(p @ matrix, p, rtol=0, atol=1e-14)
    # a one-way scan (0..L-1 only) is not reversible: the palindrome is what makes it so
    if method == "gibbs" and beta > 0:
        one_way = None
        for site in range(size):
            step = exact_fv.site_update_matrix(path.at(beta), site, method)
            one_way = step if one_way is None else one_way @ step
        flow = p.unsqueeze(1) * one_way
        assert float((flow - flow.t()).abs().max()) > 1e-6


@pytest.mark.parametrize("method", ["gibbs", "metropolis"])
@pytest.mark.parametrize("sites, size, q", TINY)
def test_the_sampler_draws_from_the_scan_s_transition_matrix(sites, size, q, method):
    path = _path(sites, size, q, seed=1)
    beta, start_index, n = 0.7, 5, 40_000
    start = exact_fv.site_configurations(size, q)[start_index]
    fields, tables, scale = path.site_parameters(beta)
    codes, acceptance = site_scan(start.expand(n, size), fields, tables, scale, torch.Generator().manual_seed(2),
                                  method)  # fmt: skip
    counts = torch.bincount(exact_fv.site_configuration_index(codes, q), minlength=q**size)
    row = exact_fv.scan_transition_matrix(path.at(beta), method)[start_index]
    assert_counts_match(counts, row)
    assert (acceptance is None) == (method == "gibbs")


def test_the_kernel_reports_metropolis_acceptance_through_anneal_and_uses_only_its_generator():
    path = _path("categorical", 3, 3)
    kernel = SiteGibbsKernel(path, "metropolis")
    assert isinstance(kernel, contracts.InfoKernel)
    start = path.sample_initial(6, torch.Generator().manual_seed(0)).reshape(2, 3, 3)  # chains in two dims
    before = start.clone()
    seen = []
    betas = torch.linspace(0, 1, 4, dtype=torch.float64)
    final, log_w = anneal(path, start, betas, generator=torch.Generator().manual_seed(1), kernel=kernel,
                          on_info=lambda step, info: seen.append(info["acceptance"]))  # fmt: skip
    assert torch.equal(start, before) and final.shape == (2, 3, 3) and log_w.shape == (2, 3)
    assert len(seen) == 3 and all(a.shape == (2, 3) and bool(((a >= 0) & (a <= 1)).all()) for a in seen)
    assert bool((seen[0] < 1).any())
    torch.manual_seed(123)  # the global generator plays no part
    _, again = anneal(path, start, betas, generator=torch.Generator().manual_seed(1), kernel=kernel)
    assert torch.equal(log_w, again)
    with pytest.raises(ValueError, match="method must be one of gibbs, metropolis"):
        SiteGibbsKernel(path, "heat-bath")


def _ring(size, q, seed=5, dtype=torch.float64):
    """Couplings of a ring of `size` Potts sites (each coupled to its two neighbours) and random fields."""
    g = torch.Generator().manual_seed(seed)
    couplings = torch.zeros(size, q, size, q, dtype=dtype)
    for i in range(size):
        j = (i + 1) % size
        block = torch.randn(q, q, generator=g, dtype=dtype)
        couplings[i, :, j, :] = block
        couplings[j, :, i, :] = block.t()
    return couplings, torch.randn(size, q, generator=g, dtype=dtype)


def test_sparse_couplings_read_only_the_coupled_sites_and_colour_the_lattice():
    # a ring of 12 Potts sites: each coupled to two others, so the kernel keeps per-site tables of those two
    size, q = 12, 3
    couplings, _ = _ring(size, q)
    tables = CouplingTables(couplings)
    assert tables.sparse and [t.tolist() for t in tables.sites[:2]] == [[1, 11], [0, 2]]
    assert not CouplingTables(random_model("categorical", 4, 3).categorical_parameters()[1]).sparse  # dense
    # an even ring is two-coloured, and no two coupled sites share a colour
    assert [c.tolist() for c in tables.colours] == [list(range(0, size, 2)), list(range(1, size, 2))]
    assert tables.scan_order() == [*range(0, size, 2), *range(1, size, 2), *range(1, size, 2), *range(0, size, 2)]
    full = CouplingTables(couplings, sparse=False)
    assert full.colours is None and full.scan_order() == palindromic_order(size)
    start = torch.randint(0, q, (50, size), generator=torch.Generator().manual_seed(1))
    rows = tables.row_index(start)
    direct = torch.stack([sum(couplings[i, :, j, start[:, j]].t() for j in range(size)) for i in range(size)], 1)
    for i in range(size):  # both tables give the coupling input by definition, sum_j J[i, :, j, v_j]
        torch.testing.assert_close(tables.coupling_input(i, rows), direct[:, i])
        torch.testing.assert_close(full.coupling_input(i, rows), direct[:, i])
    for k, colour in enumerate(tables.colours):
        torch.testing.assert_close(tables.colour_input(k, start), direct[:, colour])


@pytest.mark.parametrize("method", ["gibbs", "metropolis"])
def test_the_colour_scan_draws_from_a_reversible_scan_that_leaves_p_beta_invariant(method):
    """Updating a colour's sites at once is the single-site scan in the colour order: the sampler's draws match that
    scan's exact transition matrix, which satisfies detailed balance (an odd ring needs three colours)."""
    from raise_eval.models.fully_visible import FullyVisibleModel

    size, q = 5, 3
    couplings, fields = _ring(size, q, seed=3)
    model = FullyVisibleModel(fields, couplings, "categorical")
    tables = CouplingTables(couplings, sparse=True)
    assert len(tables.colours) == 3
    order = tables.scan_order()
    matrix = exact_fv.scan_transition_matrix(model, method, order=order)
    p = torch.softmax(model.log_unnormalized(model.sites_from_codes(exact_fv.site_configurations(size, q))), 0)
    flow = p.unsqueeze(1) * matrix
    torch.testing.assert_close(flow, flow.t(), rtol=0, atol=1e-14)
    torch.testing.assert_close(p @ matrix, p, rtol=0, atol=1e-14)
    start_index, n = 17, 60_000
    start = exact_fv.site_configurations(size, q)[start_index]
    codes, acceptance = site_scan(start.expand(n, size), fields, tables, 1.0, torch.Generator().manual_seed(2), method)
    counts = torch.bincount(exact_fv.site_configuration_index(codes, q), minlength=q**size)
    assert_counts_match(counts, matrix[start_index])
    assert (acceptance is None) == (method == "gibbs")
    if acceptance is not None:
        assert acceptance.shape == (n,) and bool(((acceptance > 0) & (acceptance <= 1)).all())


def test_sparse_tables_give_an_uncoupled_site_no_input():
    """A lattice with a site coupled to nothing (a vacancy, or a site whose couplings were all pruned): its sparse
    table is empty and its coupling input zero, site by site and in its colour (whose padding reads an all-zero
    table)."""
    g = torch.Generator().manual_seed(9)
    size, q, isolated = 10, 3, 4
    couplings = torch.zeros(size, q, size, q, dtype=torch.float64)
    ring = [i for i in range(size) if i != isolated]
    for i, j in zip(ring, ring[1:] + ring[:1]):
        block = torch.randn(q, q, generator=g, dtype=torch.float64)
        couplings[i, :, j, :] = block
        couplings[j, :, i, :] = block.t()
    tables, full = CouplingTables(couplings), CouplingTables(couplings, sparse=False)
    assert tables.sparse and tables.sites[isolated].numel() == 0
    start = torch.randint(0, q, (200, size), generator=g)
    rows = tables.row_index(start)
    for t in (tables, full):
        torch.testing.assert_close(t.coupling_input(isolated, rows), torch.zeros(200, q, dtype=torch.float64))
    k = next(k for k, c in enumerate(tables.colours) if isolated in c.tolist())
    direct = torch.stack([sum(couplings[i, :, j, start[:, j]].t() for j in range(size)) for i in range(size)], 1)
    torch.testing.assert_close(tables.colour_input(k, start), direct[:, tables.colours[k]])
    assert not bool(direct[:, isolated].any())
