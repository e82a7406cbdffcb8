"""DBMs and DBNs: AIS, heating RAISE, heated and unrolled RAISE for DBNs and the estimates of log f(v), against exact
answers.

Unbiasedness is checked in probability space (tests/statistics.py: |mean(exp(log w - log truth)) - 1| < 4 SE, false-
alarm rate about 6e-5 per z-score, so about 2.5e-4 for an assertion over 4 test vectors and about 2% for the ~300
z-scores of this file under fresh seeds; the seeds are fixed, so each run is deterministic). K = 1, 2, 3 expose off-
by-one errors in the schedule; K = 40 makes the steps small enough that the annealing step takes its small-step
weight update and reuses the odd-layer probabilities between steps, which `reuse_counter` proves for every direction
(AIS, heating, reverse).
"""

from __future__ import annotations

import pytest
import torch

import raise_eval.paths.boltzmann as boltzmann_paths
from raise_eval import BoltzmannPath, ais, data_base_rates, exact, linear_schedule, raise_log_likelihood
from raise_eval.estimators.unnormalized import log_unnormalized_estimate
from raise_eval.paths.posterior import DBNPosteriorPath
from tests.statistics import assert_unbiased, unbiasedness_z

CHAINS = 100_000
SMALL_STEPS_K = 40
KS = [1, 2, 3, SMALL_STEPS_K]
HEATED_SMALL_STEPS_CHAINS = 30_000  # the unit-wise heating sweeps of 100,000 chains x 40 steps take 15 s


@pytest.fixture
def reuse_counter(monkeypatch):
    """Counts block-Gibbs steps that reused the probabilities left by the small-step weight update."""
    counts = {"reused": 0, "steps": 0}
    original = boltzmann_paths.block_gibbs_step

    def counting(model, state, generator, **kwargs):
        counts["steps"] += 1
        counts["reused"] += kwargs.get("odd_probs") is not None
        return original(model, state, generator, **kwargs)

    monkeypatch.setattr(boltzmann_paths, "block_gibbs_step", counting)
    return counts


def _check_reuse(counts, k, passes, handed_over=0):
    if k == SMALL_STEPS_K:
        # every step after the first of each pass reuses the probabilities of the previous weight update, and so
        # does the first step of a pass that starts where another ended (heating hands its beta = 1 state, with
        # the probabilities of its last weight update, to the reverse pass)
        assert counts["reused"] == passes * (k - 1) + handed_over, counts
    return counts


def _cast(model, dtype):
    return model.to(dtype=dtype)


def _test_vectors(n_visible):
    v = exact.binary_configurations(n_visible)
    return v[[0, 5, 2**n_visible - 3, 2**n_visible - 1]]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("k", KS)
def test_dbm_ais_weights_are_unbiased_for_z(tiny_dbm, k, dtype, reuse_counter):
    model = _cast(tiny_dbm, dtype)
    path = BoltzmannPath(model)
    result = ais(path, linear_schedule(k), CHAINS, generator=torch.Generator().manual_seed(100 + k))
    assert result.log_weights.dtype == torch.float64
    assert_unbiased(result.log_weights, exact.log_partition(tiny_dbm))
    _check_reuse(reuse_counter, k, passes=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("k", KS)
def test_heating_raise_is_unbiased_for_p_ann(tiny_dbm, k, dtype, reuse_counter):
    """Heating RAISE (Alg. 3 with the slip fixed) on a DBM with 2 or 3 hidden layers: each test vector's weights
    have mean p_ann(v), the visible marginal of AIS's final state, computed exactly from transition matrices."""
    model = _cast(tiny_dbm, dtype)
    path = BoltzmannPath(model)
    betas = linear_schedule(k)
    v = _test_vectors(model.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbm, path.base_biases, betas)
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(200 + k))
    assert result.start == "heating" and result.log_weights.shape == (4, CHAINS)
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    _check_reuse(reuse_counter, k, passes=2, handed_over=1)


@pytest.mark.parametrize("k", [1, 3, SMALL_STEPS_K])
def test_heating_raise_with_data_base_rates(tiny_dbm, k):
    g = torch.Generator().manual_seed(7)
    rates = torch.linspace(0.1, 0.9, tiny_dbm.n_visible, dtype=torch.float64)
    train = (torch.rand(300, tiny_dbm.n_visible, generator=g, dtype=torch.float64) < rates).double()
    path = BoltzmannPath(tiny_dbm, data_base_rates(tiny_dbm, train))
    betas = linear_schedule(k)
    v = _test_vectors(tiny_dbm.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbm, path.base_biases, betas)
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(300 + k))
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_heating_box_as_printed_is_detected(tiny_dbm, k):
    """Power check: Alg. 3 as printed draws h'_k with the operator of p_k (T_k^(v)) and weights at h'_k. The same
    test rejects it: |z| > 4 for at least one test vector (observed: the largest |z| per run is 36 to 56 for
    K = 1, 2, 3 on both DBMs, the smallest 5 to 18; an independent exact computation of the first two moments
    gives expected largest |z| of 36 to 56)."""
    path = BoltzmannPath(tiny_dbm)
    betas = linear_schedule(k)
    forward = betas.tolist()
    next_beta = dict(zip(forward[:-1], forward[1:]))
    heating = path.with_clamped((0,))

    def as_printed(state, beta, generator):
        return heating.transition(state, next_beta[beta], generator)

    v = _test_vectors(tiny_dbm.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbm, path.base_biases, betas)
    result = raise_log_likelihood(
        path, v, betas, CHAINS, generator=torch.Generator().manual_seed(400 + k), heating_kernel=as_printed
    )
    z, _ = unbiasedness_z(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    assert float(z.abs().max()) > 4, z


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("k", KS)
def test_unrolled_raise_is_unbiased_for_the_dbns_p_ann(tiny_dbn, k, dtype, reuse_counter):
    """Unrolled RAISE on a DBN with 2 or 3 hidden layers: weights unbiased for the exact p_ann(v) of the unrolled
    annealing model (the top RBM's annealing model pushed through the directed layers)."""
    model = _cast(tiny_dbn, dtype)
    path = BoltzmannPath(model.top)
    betas = linear_schedule(k)
    v = _test_vectors(model.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbn, path.base_biases, betas)
    result = raise_log_likelihood(
        path, v, betas, CHAINS, generator=torch.Generator().manual_seed(500 + k), unroll=model, dbn_start="unrolled"
    )
    assert result.start == "unrolled"
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    _check_reuse(reuse_counter, k, passes=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("k", KS)
def test_heated_raise_is_unbiased_for_the_dbns_p_ann(tiny_dbn, k, dtype, reuse_counter):
    """Heated RAISE (the default for a DBN) on DBNs with 2 and 3 hidden layers: forward AIS over the directed
    layers with v clamped, then the top RBM's reverse pass; the weights are unbiased for the same exact p_ann(v)
    as unrolling's (observed |z| <= 2.7 over these 64 z-scores)."""
    model = _cast(tiny_dbn, dtype)
    path = BoltzmannPath(model.top)
    betas = linear_schedule(k)
    v = _test_vectors(model.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbn, path.base_biases, betas)
    chains = CHAINS if k < SMALL_STEPS_K else HEATED_SMALL_STEPS_CHAINS  # (standard errors below 0.002 still)
    result = raise_log_likelihood(path, v, betas, chains, generator=torch.Generator().manual_seed(600 + k), unroll=model)
    assert result.start == "heated" and result.log_weights.shape == (4, chains)
    assert result.log_weights.dtype == torch.float64
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    _check_reuse(reuse_counter, k, passes=1)  # the heating pass moves the posterior, not the Boltzmann path


@pytest.mark.parametrize("k, heating_k", [(3, 1), (2, 5), (1, 4)])
def test_heated_raise_with_its_own_heating_schedule(tiny_dbn, k, heating_k):
    """p_ann(v) is the unrolled annealing model of the reverse schedule whatever the heating schedule: a heating
    pass of K_h steps (shorter or longer than the reverse pass's K) leaves the weights unbiased for it."""
    path = BoltzmannPath(tiny_dbn.top)
    betas = linear_schedule(k)
    v = _test_vectors(tiny_dbn.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbn, path.base_biases, betas)
    result = raise_log_likelihood(
        path, v, betas, CHAINS, generator=torch.Generator().manual_seed(650 + 10 * k + heating_k), unroll=tiny_dbn,
        heating_betas=linear_schedule(heating_k),
    )  # fmt: skip
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_dbn_heating_with_the_next_temperatures_kernel_is_detected(tiny_dbn, k):
    """Power check: heating the directed layers with the kernel of the next temperature, then weighting (the order
    Alg. 3's box prints for DBMs) is biased, and the same test rejects it: |z| > 4 for every vector (observed z
    from 93 to 172 on both DBNs)."""
    path = BoltzmannPath(tiny_dbn.top)
    posterior = DBNPosteriorPath(tiny_dbn)
    betas = linear_schedule(k)
    forward = betas.tolist()
    next_beta = dict(zip(forward[:-1], forward[1:]))

    def as_printed(state, beta, generator):
        return posterior.transition(state, next_beta[beta], generator)

    v = _test_vectors(tiny_dbn.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbn, path.base_biases, betas)
    result = raise_log_likelihood(
        path, v, betas, CHAINS, generator=torch.Generator().manual_seed(700 + k), unroll=tiny_dbn,
        heating_kernel=as_printed,
    )  # fmt: skip
    z, _ = unbiasedness_z(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    assert bool((z.abs() > 4).all()), z


def test_heated_dbn_raise_continues_from_a_saved_heating_step(tiny_dbn, tmp_path):
    """The heating pass saves its chains' layers through the resume file's record (`raise_eval.resume`) and a run
    that crashed mid-heating continues from the saved step with the bits of an uninterrupted run."""
    from raise_eval.resume import ResumeFile

    path = BoltzmannPath(tiny_dbn.top)
    v = _test_vectors(tiny_dbn.n_visible)
    betas = linear_schedule(6)

    def run(store=None, crash_at=None):
        g = torch.Generator().manual_seed(9)
        checkpoint = None if store is None else store.checkpoint("raise", 0, g)
        calls = []
        real = DBNPosteriorPath.transition_

        def counted(self, state, beta, generator):
            if len(calls) == crash_at:
                raise RuntimeError("simulated crash")
            calls.append(beta)
            return real(self, state, beta, generator)

        DBNPosteriorPath.transition_ = counted
        try:
            return raise_log_likelihood(path, v, betas, 32, generator=g, unroll=tiny_dbn, checkpoint=checkpoint), calls
        finally:
            DBNPosteriorPath.transition_ = real

    whole, _ = run()
    file = tmp_path / "run.pt"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(ResumeFile(file, {"seed": 9}, interval=0.0), crash_at=4)
    saved = torch.load(file, weights_only=True)["running"]
    assert (saved["phase"], saved["step"]) == ("heating", 4)
    resumed, calls = run(ResumeFile(file, {"seed": 9}, interval=0.0))
    assert len(calls) == 2  # heating steps 5 and 6 only
    assert torch.equal(resumed.log_weights, whole.log_weights)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_dbm_importance_sampling_of_f_is_unbiased(tiny_dbm, dtype):
    """Each single-sample importance weight f(v, h) / q(h | v) has mean f(v) (400,000 draws per vector)."""
    model = _cast(tiny_dbm, dtype)
    v = _test_vectors(model.n_visible)
    draws = 400_000
    est = log_unnormalized_estimate(
        model, v.repeat_interleave(draws, 0), num_samples=1, generator=torch.Generator().manual_seed(1)
    )
    assert est.method == "importance"
    assert_unbiased(est.log_unnormalized.reshape(4, draws), exact.log_unnormalized_visible(tiny_dbm, v))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_dbn_importance_sampling_of_f_is_unbiased(tiny_dbn, dtype):
    model = _cast(tiny_dbn, dtype)
    v = _test_vectors(model.n_visible)
    draws = 400_000
    est = log_unnormalized_estimate(
        model, v.repeat_interleave(draws, 0), num_samples=1, generator=torch.Generator().manual_seed(2)
    )
    assert_unbiased(est.log_unnormalized.reshape(4, draws), exact.log_unnormalized_visible(tiny_dbn, v))


def test_importance_estimates_with_the_default_samples(tiny_dbm):
    """500 samples by default, one estimate and one standard error per vector, in float64."""
    v = exact.binary_configurations(tiny_dbm.n_visible)
    est = log_unnormalized_estimate(tiny_dbm, v, generator=torch.Generator().manual_seed(3))
    assert est.num_samples == 500 and est.log_unnormalized.shape == est.stderr.shape == (v.shape[0],)
    assert est.log_unnormalized.dtype == torch.float64 and bool((est.stderr > 0).all())


def test_mean_field_bound_is_below_the_exact_log_f(tiny_dbm):
    v = exact.binary_configurations(tiny_dbm.n_visible)
    bound = log_unnormalized_estimate(tiny_dbm, v, method="mean-field", generator=torch.Generator())
    truth = exact.log_unnormalized_visible(tiny_dbm, v)
    assert bool((bound.log_unnormalized <= truth + 1e-10).all())
    assert float((truth - bound.log_unnormalized).max()) > 1e-3  # a real bound, not the exact value


def test_mean_field_bound_on_a_larger_dbm():
    """20-10-12 DBM (even hidden layer of 12 units: exact by enumeration), strong weights."""
    from raise_eval.models import DBM

    model = DBM.random([20, 10, 12], weight_std=1.0, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    v = (torch.rand(50, 20, generator=torch.Generator().manual_seed(5)) < 0.5).double()
    assert bool((model.mean_field_bound(v) <= exact.log_unnormalized_visible(model, v) + 1e-10).all())


def test_rbm_log_f_is_exact(tiny_rbm):
    v = exact.binary_configurations(8)[:10]
    est = log_unnormalized_estimate(tiny_rbm, v, generator=torch.Generator())
    assert est.method == "exact"
    torch.testing.assert_close(est.log_unnormalized, tiny_rbm.log_unnormalized_prob(v))


def test_bad_arguments_are_refused(tiny_dbm, tiny_dbn):
    g = torch.Generator().manual_seed(0)
    v = torch.zeros(2, tiny_dbm.n_visible)
    with pytest.raises(ValueError, match="method"):
        log_unnormalized_estimate(tiny_dbm, v, method="exact", generator=g)
    with pytest.raises(ValueError, match="mean-field bound is for DBMs"):
        log_unnormalized_estimate(tiny_dbn, torch.zeros(2, tiny_dbn.n_visible), method="mean-field", generator=g)
    with pytest.raises(ValueError, match="top RBM"):
        raise_log_likelihood(
            BoltzmannPath(tiny_dbm),
            torch.zeros(2, tiny_dbn.n_visible),
            linear_schedule(2),
            2,
            generator=g,
            unroll=tiny_dbn,
        )
