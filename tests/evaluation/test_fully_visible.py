"""Fully visible models (DCA Potts, Ising) through the same evaluation as RBMs: `raise_eval.evaluate` and `certify`
against exact log Z and the exact test log-likelihood on enumerable models (categorical, spin, bernoulli sites), the
base fitted to training data (or uniform with a note), the cost estimate, resume files, the training hook and the
refusals before any work."""

from __future__ import annotations

import math

import pytest
import torch

from raise_eval import certify, estimate_cost, evaluate, visible_statistics
from raise_eval.evaluation.plan import plan_evaluation
from raise_eval.evaluation.report import ExactValues
from raise_eval.integrations.hooks import LikelihoodMonitor
from raise_eval.paths.fully_visible import FullyVisiblePath, base_fields_from_frequencies, site_frequencies
from raise_eval.settings import SettingsError
from tests.fully_visible_models import all_site_states, brute_log_f, random_model

# (sites, size, q): small enough to enumerate (3^5 = 243, 2^8 = 256 configurations)
KINDS = [("categorical", 5, 3), ("spin", 8, 2), ("bernoulli", 8, 2)]
RUN = dict(steps=300, ais_chains=200, raise_chains=5, raise_examples=20, threads=1, progress=False)


def _sample(model, n: int, seed: int) -> torch.Tensor:
    """n exact draws of the model's distribution (every configuration's probability enumerated), site states in
    the model's convention."""
    rows = all_site_states(model)
    log_p = torch.tensor([brute_log_f(model, r.tolist()) for r in rows])
    picks = torch.multinomial(
        torch.softmax(log_p, 0), n, replacement=True, generator=torch.Generator().manual_seed(seed)
    )
    return rows[picks]


def _exact_answers(model, test) -> tuple[float, float]:
    """(log Z, average test log-likelihood) from the definition, term by term (tests/fully_visible_models)."""
    rows = all_site_states(model)
    log_z = float(torch.logsumexp(torch.tensor([brute_log_f(model, r.tolist()) for r in rows], dtype=torch.float64), 0))
    mean_log_f = sum(brute_log_f(model, r.tolist()) for r in test) / len(test)
    return log_z, mean_log_f - log_z


@pytest.fixture(scope="module", params=KINDS, ids=[k[0] for k in KINDS])
def case(request):
    sites, size, q = request.param
    model = random_model(sites, size, q, seed=3, scale=0.4)
    test, train = _sample(model, 40, seed=1), _sample(model, 500, seed=2)
    return model, test, train


def test_evaluate_brackets_the_exact_answers(case):
    model, test, train = case
    report = evaluate(model, test, train_pixel_means=visible_statistics(model, train), **RUN)
    log_z, mean = _exact_answers(model, test)
    # the exact values the evaluation enumerated are the definition's; log f(v) is the model's own (closed form)
    assert report.log_z_exact == pytest.approx(log_z, abs=1e-9)
    assert report.exact_mean == pytest.approx(mean, abs=1e-9)
    assert report.log_f.method == "exact" and report.settings["log_f_method"] == "exact"
    brute = torch.tensor([brute_log_f(model, r.tolist()) for r in test], dtype=torch.float64)
    assert torch.allclose(report.log_f.log_unnormalized, brute, atol=1e-9)
    # AIS's log Z and RAISE's average within 4 of their standard errors of the exact ones
    assert abs(report.ais.estimate - log_z) < 4 * report.ais.stderr
    assert abs(report.raise_mean - mean) < 4 * report.raise_stderr
    assert report.settings["model"] == model.describe() and report.settings["sites"] == model.sites
    assert report.settings["init"] == "base-rates" and report.notes == []
    assert report.raise_.start == "test vector"
    document = report.to_dict()
    assert document["log_z"]["exact"] == pytest.approx(log_z, abs=1e-9)


def test_the_base_is_fitted_to_the_training_site_frequencies_or_uniform_with_a_note(case):
    model, test, train = case
    frequencies = site_frequencies(model, train)
    plan = plan_evaluation(model, test, train_pixel_means=frequencies, steps=10)
    assert isinstance(plan.path, FullyVisiblePath)
    assert torch.equal(plan.path.base_biases[0], base_fields_from_frequencies(model, frequencies))
    uniform = plan_evaluation(model, test, steps=10)  # init='base-rates' without training data
    assert bool((uniform.path.base_biases[0] == 0).all())
    assert uniform.report_settings["init"] == "uniform"
    assert "the base is uniform fields" in uniform.start_note and "train_data" in uniform.start_note
    report = evaluate(model, test, steps=10, ais_chains=8, raise_chains=2, raise_examples=3, progress=False)
    assert any(n.startswith("the base is uniform fields") for n in report.notes)


def test_certify_closes_around_the_exact_answer():
    model = random_model("spin", 8, seed=5, scale=0.3)
    test, train = _sample(model, 30, seed=1), _sample(model, 300, seed=2)
    cert = certify(model, test, tolerance=0.1, steps=50, max_steps=800, ais_chains=100, raise_chains=5,
                   raise_examples=15, train_pixel_means=visible_statistics(model, train), progress=False)  # fmt: skip
    _, mean = _exact_answers(model, test)
    assert cert.closed and cert.history
    low, high = cert.interval
    assert low <= mean <= high
    assert cert.report.exact_mean == pytest.approx(mean, abs=1e-9)


def test_cost_estimate_and_memory_plan():
    model = random_model("categorical", 5, 3, seed=1)
    test = _sample(model, 10, seed=1)
    plan = plan_evaluation(model, test, steps=20, ais_chains=16, raise_chains=2, raise_examples=4)
    names = [s.name for s in plan.cost.stages]
    assert names == ["ais", "exact", "raise"] and all(s.bytes > 0 for s in plan.cost.stages)
    estimate = estimate_cost(plan)
    assert estimate.seconds > 0 and math.isfinite(estimate.seconds)


def test_a_crashed_run_continues_from_its_resume_file_with_the_same_bits(tmp_path, monkeypatch):
    model = random_model("categorical", 5, 3, seed=2, scale=0.5)
    test = _sample(model, 6, seed=1)
    settings = dict(steps=12, ais_chains=30, raise_examples=6, raise_chains=5, exact="never", progress=False)
    whole = evaluate(model, test, **settings)
    file = tmp_path / "run.pt"
    real, calls = FullyVisiblePath.transition, []

    def crash_in_raise(self, state, beta, generator):  # AIS takes 12 steps; the 4th step of RAISE crashes
        if len(calls) == 12 + 3:
            raise RuntimeError("simulated crash")
        calls.append(beta)
        return real(self, state, beta, generator)

    with monkeypatch.context() as m:
        m.setattr(FullyVisiblePath, "transition", crash_in_raise)
        with pytest.raises(RuntimeError, match="simulated crash"):
            evaluate(model, test, **settings, resume_file=str(file), resume_interval=0.0)
    saved = torch.load(file, weights_only=True)["running"]
    assert (saved["phase"], saved["step"]) == ("RAISE", 3)
    assert saved["state"]["layers"][0].shape == (6, 5, 5)  # the site codes of 6 vectors x 5 chains
    resumed = evaluate(model, test, **settings, resume_file=str(file), resume_interval=0.0)
    assert torch.equal(resumed.raise_.log_weights, whole.raise_.log_weights)
    assert resumed.ais.estimate == whole.ais.estimate and resumed.raise_mean == whole.raise_mean
    assert any("raise shard 0 continued from step 3 (RAISE)" in n for n in resumed.notes)


def test_the_training_hook_follows_a_fully_visible_model():
    model = random_model("spin", 6, seed=4, scale=0.3)
    test, train = _sample(model, 12, seed=1), _sample(model, 100, seed=2)
    monitor = LikelihoodMonitor(test, train_pixel_means=visible_statistics(model, train), steps=20, ais_chains=16,
                                raise_chains=2, raise_examples=4)  # fmt: skip
    record = monitor(0, model)
    assert record is not None and record.exact is not None
    alone = evaluate(model, test, **monitor.evaluate_kwargs)
    assert record.ais == alone.ais_mean and record.raise_ == alone.raise_mean


def test_bad_inputs_are_refused_before_any_work():
    model = random_model("categorical", 5, 3, seed=1)
    with pytest.raises(ValueError, match=r"test data must hold integer codes 0..2, found 3"):
        evaluate(model, torch.full((4, 5), 3), steps=5)
    with pytest.raises(ValueError, match=r"test data must be shaped \(\.\.\., 5\)"):
        evaluate(model, torch.zeros(4, 6, dtype=torch.long), steps=5)
    spin = random_model("spin", 4, seed=1)
    with pytest.raises(ValueError, match="test data must hold spin states -1/1 only, found 0"):
        evaluate(spin, torch.zeros(3, 4), steps=5)
    with pytest.raises(ValueError, match=r"site frequencies must be shaped \(L, q\) = \(4, 2\)"):
        evaluate(spin, torch.ones(3, 4), steps=5, train_pixel_means=torch.full((4,), 0.5))
    with pytest.raises(SettingsError, match="half-split has nothing to compute in a fully visible model"):
        evaluate(model, torch.zeros(2, 5, dtype=torch.long), gpu_products="half-split")
    with pytest.raises(ValueError, match="exact_values hold log f"):  # a reused exact answer of other vectors
        evaluate(model, torch.zeros(2, 5, dtype=torch.long), steps=5,
                 exact_values=ExactValues(0.0, torch.zeros(3, dtype=torch.float64), 0.0, ""))  # fmt: skip
    # log f(v) is the model's own: a log f(v) method asked for is not used, and the report says so
    report = evaluate(model, torch.zeros(2, 5, dtype=torch.long), steps=5, ais_chains=4, raise_chains=2,
                      log_f_method="importance", progress=False)  # fmt: skip
    assert report.log_f.method == "exact"
    assert any("a fully visible model's log f(v) is exact (closed form)" in n for n in report.notes)


def test_thermodynamic_integration_is_reported_beside_ais_from_its_own_stream():
    from raise_eval.estimators.thermodynamic import thermodynamic_integration
    from raise_eval.seeds import stage_seed

    model = random_model("categorical", 5, 3, seed=3, scale=0.4)
    test = _sample(model, 20, seed=1)
    small = dict(steps=50, ais_chains=40, raise_chains=3, raise_examples=8, progress=False)
    without = evaluate(model, test, **small)
    report = evaluate(model, test, ti_chains=30, **small)
    # its own stream: the sandwich, the exact values and the verdict's numbers are those of a run without it
    assert report.ais.estimate == without.ais.estimate and report.raise_mean == without.raise_mean
    assert without.thermodynamic is None and "thermodynamic_integration" not in without.to_dict()["log_z"]
    plan = plan_evaluation(model, test, ti_chains=30, **small)
    generator = torch.Generator().manual_seed(stage_seed(0, "ti"))
    alone = thermodynamic_integration(plan.path, plan.betas, 30, generator=generator)
    assert float(report.thermodynamic.log_normalizer) == float(alone.log_normalizer)
    document = report.to_dict()["log_z"]["thermodynamic_integration"]
    assert document["num_chains"] == 30 and document["stderr"] == float(alone.stderr) and "caveat" in document
    assert report.timing["ti_seconds"] is not None and report.settings["ti_chains"] == 30
    assert "TI (not in the verdict)" in report.format_table()
    assert [s.name for s in plan.cost.stages] == ["ais", "exact", "raise", "ti"]


def test_thermodynamic_integration_is_refused_where_it_cannot_run():
    from raise_eval.models import RBM

    rbm = RBM.random(5, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(SettingsError, match="ti_chains runs thermodynamic integration on fully visible models"):
        evaluate(rbm, torch.zeros(2, 5), ti_chains=10, init="uniform")
    with pytest.raises(SettingsError, match="ti_chains 1: .* needs two"):
        evaluate(random_model("spin", 4, seed=1), torch.ones(2, 4), ti_chains=1)


def test_no_note_about_the_boltzmann_c_kernels_which_a_fully_visible_run_never_uses(monkeypatch):
    """Before: without a C compiler a fully visible run's report said that 'the PyTorch draws and weight update ran,
    slower, and with other random numbers than where they compile', which its site scan never does."""
    from raise_eval.models import native

    monkeypatch.setattr(native, "report", lambda: {"step": "no C compiler", "amx_products": "no C compiler"})
    model = random_model("spin", 4, seed=1)
    report = evaluate(model, torch.ones(3, 4), steps=5, ais_chains=4, raise_chains=2, progress=False)
    assert not any(n.startswith("the C kernels") for n in report.notes)
    assert "native_kernels" not in report.settings
