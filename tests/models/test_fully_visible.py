"""Fully visible pairwise models (DCA Potts, Ising): log f against its definition, parameters refused by name, and
the exact answers (log Z by chunked enumeration, log f(v), the data-fitted base) against brute force."""

from __future__ import annotations

import math

import pytest
import torch
from raise_eval.models import RBM, FullyVisibleModel

from raise_eval import exact
from raise_eval.exact import fully_visible as exact_fv
from raise_eval.paths.fully_visible import FullyVisiblePath, data_base_fields
from tests.fully_visible_models import all_site_states, brute_log_f, random_model

KINDS = [("categorical", 4, 3), ("spin", 5, 2), ("bernoulli", 5, 2)]


@pytest.mark.parametrize("sites, size, q", KINDS)
def test_log_f_is_the_definition_on_every_configuration(sites, size, q):
    model = random_model(sites, size, q, seed=1)
    v = all_site_states(model)
    expected = torch.tensor([brute_log_f(model, row) for row in v.tolist()], dtype=torch.float64)
    torch.testing.assert_close(model.log_unnormalized(v), expected, rtol=0, atol=1e-12)
    # batches of any leading shape
    assert model.log_unnormalized(v[:6].reshape(2, 3, size)).shape == (2, 3)


@pytest.mark.parametrize("sites, size, q", KINDS)
def test_local_fields_are_the_change_of_log_f_with_one_site(sites, size, q):
    model = random_model(sites, size, q, seed=2)
    v = all_site_states(model)[[0, 7, 11]]
    local = model.local_fields(v)  # (3, L, q)
    codes = model.codes(v)
    for i in range(size):
        for a in range(model.num_states):
            moved = codes.clone()
            moved[:, i] = a
            diff = model.log_unnormalized_codes(moved) - model.log_unnormalized_codes(codes)
            torch.testing.assert_close(diff, local[:, i, a] - local.gather(-1, codes.unsqueeze(-1))[:, i, 0])


def test_spin_and_bernoulli_models_are_their_categorical_forms():
    model = random_model("spin", 4, seed=3)
    fields, couplings = model.categorical_parameters()
    potts = FullyVisibleModel(fields, couplings)
    v = all_site_states(model)
    torch.testing.assert_close(potts.log_unnormalized(model.codes(v)), model.log_unnormalized(v))


def _symmetric(size, q):
    j = torch.ones(size, q, size, q, dtype=torch.float64)
    for i in range(size):
        j[i, :, i, :] = 0
    return j


def _one_coupling(index):
    j = torch.zeros(2, 2, 2, 2)
    j[index] = 1.0  # J[0, 0, 1, 1] without J[1, 1, 0, 0]: not symmetric
    return j


BAD = [
    (torch.zeros(3, 2), _symmetric(3, 3), "categorical", None, "couplings of categorical sites must be shaped"),
    (torch.zeros(3), torch.zeros(3, 3), "categorical", None, "fields of categorical sites must be shaped"),
    (torch.zeros(3, 1), torch.zeros(3, 1, 3, 1), "categorical", None, "q >= 2"),
    (torch.zeros(3, 3, dtype=torch.float64), torch.ones(3, 3, 3, 3, dtype=torch.float64), "categorical", None,
     r"J\[i, :, i, :\] must be zero"),
    (torch.zeros(2, 2), _one_coupling((0, 0, 1, 1)), "categorical", None,
     r"symmetric \(J\[i, a, j, b\] == J\[j, b, i, a\]\)"),
    (torch.zeros(3), torch.eye(3), "spin", None, r"the diagonal J\[i, i\] must be zero"),
    (torch.zeros(2), torch.tensor([[0.0, 1.0], [0.5, 0.0]]), "bernoulli", None, r"symmetric \(J == J.T\)"),
    (torch.zeros(2), torch.zeros(3, 3), "spin", None, "couplings of spin sites must be shaped"),
    (torch.zeros(2, 2), torch.zeros(2), "spin", None, "fields of spin sites must be shaped"),
    (torch.tensor([0.0, math.nan]), torch.zeros(2, 2), "spin", None, "fields hold 1 NaN or infinite"),
    (torch.zeros(2), torch.tensor([[0.0, math.inf], [math.inf, 0.0]]), "spin", None, "couplings hold 2 NaN"),
    (torch.zeros(2), torch.zeros(2, 2), "potts", None, "sites must be one of categorical, spin, bernoulli"),
    (torch.zeros(2, 3), torch.zeros(2, 3, 2, 3), "categorical", "AC", "alphabet must be a string of q = 3"),
    (torch.zeros(2, 3), torch.zeros(2, 3, 2, 3), "categorical", "AAC", "distinct"),
    (torch.zeros(2), torch.zeros(2, 2), "spin", "AB", "alphabet applies to categorical sites only"),
]


@pytest.mark.parametrize("fields, couplings, sites, alphabet, message", BAD, ids=[b[-1][:30] for b in BAD])
def test_invalid_parameters_are_refused_naming_the_field(fields, couplings, sites, alphabet, message):
    with pytest.raises(ValueError, match=message) as info:
        FullyVisibleModel(fields, couplings, sites, alphabet)
    assert "\n" not in str(info.value)


def test_site_states_outside_the_model_are_refused():
    potts, spin = random_model("categorical", 3), random_model("spin", 3)
    with pytest.raises(ValueError, match="codes 0..2, found 3"):
        potts.log_unnormalized(torch.tensor([[0, 1, 3]]))
    with pytest.raises(ValueError, match=r"shaped \(\.\.\., 3\)"):
        potts.log_unnormalized(torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="spin states -1/1 only, found 0"):
        spin.log_unnormalized(torch.tensor([[1.0, 0.0, -1.0]], dtype=torch.float64))


def test_the_model_declares_what_it_is():
    model = FullyVisibleModel(torch.zeros(53, 21), torch.zeros(53, 21, 53, 21), alphabet="-ACDEFGHIKLMNPQRSTVWY")
    assert model.family == "fully-visible" and vars(FullyVisibleModel)["family"] == "fully-visible"
    assert model.describe() == "fully-visible categorical(53x21)"
    assert random_model("spin", 7).describe() == "fully-visible spin(7)"
    moved = random_model("bernoulli", 3).to(dtype=torch.float32)
    assert moved.dtype == torch.float32 and moved.device.type == "cpu" and moved.n_visible == 3
    tensors, scale = moved.digest_parts()
    assert scale == 1.0 and tensors[0] is moved.fields and tensors[1] is moved.couplings


@pytest.mark.parametrize("sites, size, q", KINDS)
def test_exact_log_z_is_the_sum_over_every_configuration(sites, size, q):
    model = random_model(sites, size, q, seed=4)
    v = all_site_states(model)
    brute = math.log(sum(math.exp(brute_log_f(model, row)) for row in v.tolist()))
    assert exact.log_partition(model) == pytest.approx(brute, abs=1e-10)
    # in chunks, the memory bound holding them small: the same answer
    assert exact.log_partition(model, chunk_size=5) == pytest.approx(brute, abs=1e-10)
    assert exact.log_partition(model, max_bytes=2000) == pytest.approx(brute, abs=1e-10)
    torch.testing.assert_close(exact.log_unnormalized_visible(model, v), model.log_unnormalized(v))
    torch.testing.assert_close(exact.log_likelihood(model, v).exp().sum(), torch.tensor(1.0, dtype=torch.float64))


def test_exact_answers_dispatch_on_the_family_and_refuse_what_does_not_apply():
    model = random_model("categorical", 30, 21)
    with pytest.raises(ValueError, match=r"2\^132 configurations"):
        exact.log_partition(model)
    cost = exact.exact_cost(model, 10)
    assert cost.enumerable and cost.log_z_units == 132 and cost.log_f_route == "closed-form"
    assert exact.log_f_units(model) == 0
    with pytest.raises(ValueError, match="route 'odd' applies to binary machines"):
        exact.log_unnormalized_visible(model, torch.zeros(1, 30, dtype=torch.int64), route="odd")
    # the Boltzmann machines keep their own modules
    rbm = RBM.random(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    v = exact.binary_configurations(4)
    torch.testing.assert_close(exact.log_likelihood(rbm, v).exp().sum(), torch.tensor(1.0, dtype=torch.float64))


def test_site_configurations_number_the_states_in_base_q():
    codes = exact_fv.site_configurations(3, 3)
    assert codes.shape == (27, 3) and codes[5].tolist() == [2, 1, 0]
    assert torch.equal(exact_fv.site_configuration_index(codes, 3), torch.arange(27))


@pytest.mark.parametrize("sites, size, q", KINDS)
def test_the_data_fitted_base_has_the_smoothed_site_frequencies(sites, size, q):
    model = random_model(sites, size, q, seed=5)
    data = all_site_states(model)[torch.tensor([0, 3, 3, 9, 14])]
    pseudocount = 0.2
    path = FullyVisiblePath(model, data_base_fields(model, data, pseudocount))
    codes = model.codes(data)
    every = exact_fv.site_configurations(size, model.num_states)
    p0 = path.log_base_prob(every).exp()
    assert float(p0.sum()) == pytest.approx(1.0, abs=1e-12)
    for i in range(size):
        for a in range(model.num_states):
            frequency = float((codes[:, i] == a).double().mean())
            marginal = float(p0[every[:, i] == a].sum())
            assert marginal == pytest.approx((1 - pseudocount) * frequency + pseudocount / model.num_states)
    # log Z_0 in closed form is the base's sum over every configuration
    log_f0 = path.log_density(every, 0.0)
    assert path.log_partition_initial == pytest.approx(float(torch.logsumexp(log_f0, 0)), abs=1e-12)


def test_data_base_fields_refuse_bad_input():
    model = random_model("categorical", 3)
    with pytest.raises(ValueError, match=r"pseudocount must be in \(0, 1\)"):
        data_base_fields(model, torch.zeros(2, 3, dtype=torch.int64), 0.0)
    with pytest.raises(ValueError, match=r"training data shaped \(N, 3\)"):
        data_base_fields(model, torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="training data must hold integer codes 0..2, found 5"):
        data_base_fields(model, torch.tensor([[0, 5, 1]]))


@pytest.mark.parametrize("sites, size, q", KINDS)
def test_the_base_sampler_draws_exactly_from_the_base(sites, size, q):
    """AIS and thermodynamic integration start from `sample_initial`; a Gibbs scan at beta = 0 would hide a wrong
    start (it redraws every site from the base), a Metropolis scan would not: the draws are checked on their own."""
    from tests.statistics import assert_counts_match

    model = random_model(sites, size, q, seed=6)
    data = all_site_states(model)[torch.tensor([0, 1, 1, 5, 9, 9, 9])]
    path = FullyVisiblePath(model, data_base_fields(model, data, 0.1))
    draws = path.sample_initial(20_000, torch.Generator().manual_seed(7))
    assert draws.shape == (20_000, size) and draws.dtype == torch.int64
    every = exact_fv.site_configurations(size, q)
    counts = torch.bincount(exact_fv.site_configuration_index(draws, q), minlength=every.shape[0])
    assert_counts_match(counts, path.log_base_prob(every).exp())
