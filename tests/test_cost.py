"""Cost estimates (`raise_eval.evaluation.memory`, `.timing` and each stage's own, `.stages`): every size checked
before any work, the estimate's stages, --test-subset.

No test here times anything: the estimate's accuracy is measured by scripts/benchmark_cost_estimate.py.
"""

import importlib
import json
from pathlib import Path

import pytest
import torch
from raise_eval.models.boltzmann.dbm import DBM
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.io.checkpoints import load_checkpoint

from raise_eval import certify, estimate_cost, evaluate, plan_evaluation, run_evaluation
from raise_eval.cli import main
from raise_eval.io.datasets import load_dataset
from raise_eval.schedules import make_schedule

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
plan_module = importlib.import_module("raise_eval.evaluation.plan")
pilot_stage = importlib.import_module("raise_eval.evaluation.stages.pilot")
log_f_stage = importlib.import_module("raise_eval.evaluation.stages.log_f")
ais_stage = importlib.import_module("raise_eval.evaluation.stages.ais")
raise_stage = importlib.import_module("raise_eval.evaluation.stages.raise_")
run_module = importlib.import_module("raise_eval.evaluation.run")
timing = importlib.import_module("raise_eval.evaluation.timing")
GB = 10**9


@pytest.fixture(scope="module")
def digits():
    ckpt = load_checkpoint(DEFAULT)
    return ckpt.model, load_dataset("digits", "test"), ckpt.train_pixel_means


@pytest.fixture(scope="module")
def small_dbm():
    g = torch.Generator().manual_seed(3)
    model = DBM.random([20, 10, 8], weight_std=0.7, bias_std=0.5, generator=g)
    return model, (torch.rand(60, 20, generator=g) < 0.4).float()


@pytest.fixture
def no_work(monkeypatch):
    """Every estimator, every timing of the estimate and the making of the schedule fail the test: a refusal must
    come before all of them."""

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the refusal")

    sharding = importlib.import_module("raise_eval.runtime.sharding")
    for module, name in [
        (run_module, "run_evaluation"),
        (plan_module, "make_schedule"),
        (pilot_stage, "adaptive_pilot"),
        (log_f_stage, "log_unnormalized_estimate"),
        (sharding, "ais"),
        (sharding, "raise_log_likelihood"),
        (ais_stage, "ais"),
        (raise_stage, "raise_log_likelihood"),
        (log_f_stage, "anneal"),
        (pilot_stage, "pilot_run"),
        (importlib.import_module("raise_eval.certification.run"), "run_evaluation"),
        (importlib.import_module("raise_eval.cli.evaluate"), "run_evaluation"),
        (importlib.import_module("raise_eval.cli.evaluate"), "estimate_cost"),
    ]:
        monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize(
    "settings, option, part",
    [
        (dict(ais_chains=10**12), "ais_chains", "the log-weights of 1,000,000,000,000 chains"),
        (dict(steps=10**12), "steps", "the schedule of 1,000,000,000,000 steps"),
        (dict(schedule="adaptive", pilot_grid=10**8), "pilot_grid", "the pilot's grid of 100,000,000 cells"),
        (dict(schedule="adaptive", steps=10**9, pilot_grid=10), "steps", "the schedule of 1,000,000,000 steps"),
        (dict(raise_examples=1000, raise_chains=10**5, shard_size=1000), "raise_examples x raise_chains",
         "the log-weights of 1,000 x 100,000 chains"),
    ],
)  # fmt: skip
def test_each_size_is_refused_before_any_work(digits, no_work, settings, option, part):
    model, test, means = digits
    test = test.repeat(3, 1)  # 1,080 vectors, so that RAISE can take 1,000
    with pytest.raises(ValueError) as refused:
        evaluate(model, test, train_pixel_means=means, max_memory=GB, **settings)
    message = str(refused.value)
    assert "\n" not in message and "over the memory bound of 1.0 GB (max_memory)" in message
    assert part in message and f"lower {option} (about " in message and "nothing was computed" in message


def test_a_refused_size_says_how_many_fit(digits):
    """The fix is a number: that many fit, one more would not."""
    model, test, means = digits
    with pytest.raises(ValueError, match=r"about ([\d,]+) fit") as refused:
        evaluate(model, test, train_pixel_means=means, ais_chains=10**9, max_memory=GB)
    fits = int(str(refused.value).split("about ")[-1].split(" fit")[0].replace(",", ""))
    plan = plan_evaluation(model, test, train_pixel_means=means, ais_chains=fits, max_memory=GB)  # no error
    assert plan.cost.bytes <= GB
    with pytest.raises(ValueError, match="lower ais_chains"):
        plan_evaluation(model, test, train_pixel_means=means, ais_chains=fits + 1000, max_memory=GB)


def test_deep_model_sizes_are_refused_before_any_work(small_dbm, no_work):
    model, test = small_dbm
    chunk = r"log f\(v\) .* for one chunk of 1 vector \(log_f_ais_chains .*lower log_f_ais_chains"
    with pytest.raises(ValueError, match=chunk):
        evaluate(model, test, init="uniform", exact="never", log_f_method="ais", log_f_ais_chains=10**10, max_memory=GB)
    tiny = dict(init="uniform", steps=10, ais_chains=10, raise_examples=5, raise_chains=2, max_memory=10**6)
    with pytest.raises(ValueError, match=r"exact .*use exact never or raise max_memory"):
        evaluate(model, test, exact="always", **tiny)
    with pytest.raises(ValueError, match=r"log f\(v\) .*test_subset 2,400\); lower test_subset"):
        evaluate(model, test.repeat(40, 1), exact="never", log_f_method="mean-field", **tiny)  # all at once


def test_certify_checks_the_largest_k_before_any_work(digits, no_work, monkeypatch):
    model, test, means = digits
    monkeypatch.setattr(plan_module, "make_schedule", make_schedule)  # the first K's 11 betas may be made
    with pytest.raises(ValueError, match=r"the schedule of 1,000,000,000,000 steps .*lower steps"):
        certify(model, test, tolerance=0.1, steps=10, max_steps=10**12, train_pixel_means=means, max_memory=GB)


@pytest.mark.parametrize(
    "args, option",
    [
        (["--ais-chains", "1e12"], "--ais-chains 1,000,000,000,000"),
        (["--steps", "1e12"], "--steps 1,000,000,000,000"),
        (["--schedule", "adaptive", "--pilot-grid", "1e8"], "--pilot-grid 100,000,000"),
    ],
)
def test_cli_refuses_sizes_in_one_line_before_any_work(capsys, no_work, args, option):
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", str(DEFAULT), "--max-memory", "1GB", "--no-progress", *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("raise-eval: error: ")
    assert "needs about" in err and f"({option})" in err and f"lower {option.split()[0]} (about" in err


def test_cli_counts_may_be_written_in_scientific_notation(capsys, no_work):
    with pytest.raises(AssertionError, match="work started"):  # 25 steps: accepted, the run would start
        main(["evaluate", str(DEFAULT), "--steps", "2.5e1"])
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", str(DEFAULT), "--steps", "1.5"])
    assert stop.value.code == 2 and "--steps must be an integer of at least 1, got '1.5'" in capsys.readouterr().err


def test_plan_memory_covers_every_stage_in_order(small_dbm):
    model, test = small_dbm
    plan = plan_evaluation(model, test, init="uniform", exact="never", schedule="adaptive", steps=50,
                           log_f_method="ais", log_f_check=10)  # fmt: skip
    stages = plan.cost.stages
    assert [s.name for s in stages] == ["pilot", "ais", "log_f", "raise", "log_f_check"]
    assert all(s.seconds is None and s.bytes == sum(t.bytes for t in s.terms) > 0 for s in stages)
    assert plan.cost.bytes == max(s.bytes for s in stages) <= plan.max_memory
    # what does not depend on K says so, and its memory does not change with K
    assert [s.steps_independent for s in stages] == [False, False, True, False, True]
    longer = plan.checked_at_steps(5000).cost
    for a, b in zip(stages, longer.stages):
        assert (a.bytes == b.bytes) == a.steps_independent, a.name
    exact = plan_evaluation(model, test, init="uniform", exact="always").cost
    assert [s.name for s in exact.stages] == ["ais", "exact", "raise"]  # exact log f(v): nothing estimated


def test_estimate_has_seconds_per_stage_and_serializes(small_dbm):
    model, test = small_dbm
    plan = plan_evaluation(model, test, init="uniform", exact="never", steps=30, log_f_method="ais", log_f_check=10)
    estimate = estimate_cost(plan)
    assert [s.name for s in estimate.stages] == ["ais", "log_f", "raise", "log_f_check"]
    assert all(s.seconds > 0 for s in estimate.stages)
    assert estimate.seconds == pytest.approx(sum(s.seconds for s in estimate.stages))
    doc = json.loads(json.dumps(estimate.to_dict()))
    assert set(doc) >= {"seconds", "bytes", "max_memory", "per_stage", "timing"}
    assert list(doc["per_stage"]) == ["ais", "log_f", "raise", "log_f_check"]
    assert doc["per_stage"]["log_f"]["depends_on_steps"] is False and doc["per_stage"]["ais"]["depends_on_steps"]
    assert sum(s["share"] for s in doc["per_stage"].values()) == pytest.approx(1.0)
    text = estimate.format()
    assert text.startswith("estimated time ") and "log f(v)" in text and "timed in" in text
    assert plan.cost.stages[0].seconds is None  # the plan itself is left as it was


@pytest.mark.parametrize("family", ["RBM", "DBN", "DBM mean-field", "adaptive"])
def test_every_kind_of_run_gets_an_estimate(digits, family):
    model, test, means = digits
    kwargs = dict(train_pixel_means=means, steps=20, ais_chains=50, raise_examples=10, raise_chains=4)
    if family == "DBN":
        model = DBN.random([64, 12, 8], generator=torch.Generator().manual_seed(4))
        kwargs = dict(init="uniform", steps=20, ais_chains=50, raise_examples=10, raise_chains=4, exact="never",
                      log_f_method="importance", log_f_samples=20, log_f_check=5)  # fmt: skip
    elif family == "DBM mean-field":
        model = DBM.random([64, 10, 8], generator=torch.Generator().manual_seed(4))
        kwargs.update(init="uniform", train_pixel_means=None, exact="never", log_f_method="mean-field", log_f_check=5)
    elif family == "adaptive":
        kwargs.update(schedule="adaptive", pilot_chains=20, pilot_grid=10)
    estimate = estimate_cost(plan_evaluation(model, test, **kwargs))
    expected = {
        "RBM": ["ais", "exact", "raise"],
        "DBN": ["ais", "log_f", "raise", "log_f_check"],
        "DBM mean-field": ["ais", "log_f", "raise", "log_f_check"],
        "adaptive": ["pilot", "ais", "exact", "raise"],
    }[family]
    assert [s.name for s in estimate.stages] == expected
    assert all(s.seconds >= 0 and s.bytes > 0 for s in estimate.stages) and estimate.seconds > 0


def test_the_estimate_leaves_the_numbers_alone(digits):
    """The timing runs chains of its own: a run after an estimate gives the numbers of a run without one."""
    model, test, means = digits
    kwargs = dict(train_pixel_means=means, steps=20, ais_chains=40, raise_examples=10, raise_chains=4, exact="never")
    plain = evaluate(model, test, **kwargs)
    plan = plan_evaluation(model, test, **kwargs)
    estimate = estimate_cost(plan)
    report = run_evaluation(plan, cost_estimate=estimate)
    assert torch.equal(report.ais.log_weights, plain.ais.log_weights)
    assert torch.equal(report.raise_.log_weights, plain.raise_.log_weights)
    assert report.to_dict()["cost_estimate"]["per_stage"]["ais"]["work"] == "40 chains x 20 steps"
    assert plain.to_dict()["cost_estimate"] is None


def test_cli_json_has_the_estimate(tmp_path, capsys):
    out = tmp_path / "r.json"
    main(["evaluate", str(DEFAULT), "--steps", "20", "--ais-chains", "40", "--raise-examples", "10",
          "--raise-chains", "4", "--no-progress", "--json", str(out)])  # fmt: skip
    doc = json.loads(out.read_text())["cost_estimate"]
    assert list(doc["per_stage"]) == ["ais", "exact", "raise"] and doc["seconds"] > 0 and doc["bytes"] > 0
    assert "estimated time" not in capsys.readouterr().err  # a run of seconds prints no estimate


# ----------------------------------------------------------------------------------------------- --test-subset
def test_test_subset_is_fixed_by_the_seed_and_recorded(digits):
    model, test, means = digits
    kwargs = dict(train_pixel_means=means, steps=10, ais_chains=20, raise_examples=10, raise_chains=2, exact="never")
    a = evaluate(model, test, test_subset=100, **kwargs)
    b = evaluate(model, test, test_subset=100, **kwargs)
    s = a.settings
    assert a.num_test == 100 and s["test_subset"] == 100 and s["test_vectors_total"] == len(test)
    assert s["test_subset_seed"] == 6 and len(set(s["test_subset_indices"])) == 100
    assert s["test_subset_indices"] == sorted(s["test_subset_indices"]) == b.settings["test_subset_indices"]
    assert (a.ais_mean, a.raise_mean) == (b.ais_mean, b.raise_mean)
    # the recorded indices are the vectors evaluated: the same as passing them
    picked = evaluate(model, test[s["test_subset_indices"]], **kwargs)
    assert picked.ais_mean == a.ais_mean and picked.raise_mean == a.raise_mean
    other = evaluate(model, test, test_subset=100, **{**kwargs, "seed": 1})
    assert other.settings["test_subset_indices"] != s["test_subset_indices"]
    assert "100 of 360 vectors, a fixed random subset (seed 6)" in a.format_table()
    whole = evaluate(model, test, test_subset=10**6, **kwargs)  # at least N: the whole set
    assert whole.num_test == len(test) and whole.settings["test_subset"] is None
    with pytest.raises(ValueError, match="test_subset"):
        evaluate(model, test, test_subset=1, **kwargs)


def test_test_subset_shrinks_the_log_f_stage(small_dbm):
    model, test = small_dbm
    kwargs = dict(init="uniform", exact="never", steps=30, log_f_method="ais", log_f_check=10)
    full = plan_evaluation(model, test, **kwargs).cost.stage("log_f")
    part = plan_evaluation(model, test, test_subset=15, **kwargs).cost.stage("log_f")
    assert full.work.startswith("60 vectors") and part.work.startswith("15 vectors")


def test_resume_with_another_subset_is_refused(digits, tmp_path):
    model, test, means = digits
    kwargs = dict(train_pixel_means=means, steps=10, ais_chains=20, raise_examples=10, raise_chains=2, exact="never")
    path = tmp_path / "run.pt"
    evaluate(model, test, test_subset=100, resume_file=str(path), **kwargs)
    with pytest.raises(ValueError, match=r"test_subset: 100 in the file, 200 now"):
        evaluate(model, test, test_subset=200, resume_file=str(path), **kwargs)


def test_cli_test_subset(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["evaluate", str(DEFAULT), "--steps", "10", "--ais-chains", "20", "--raise-examples", "10", "--raise-chains",
            "2", "--no-progress", "--test-subset", "50", "--seed", "3", "--json", str(out)]  # fmt: skip
    main(args)
    settings = json.loads(out.read_text())["settings"]
    assert settings["test_subset"] == 50 and settings["test_subset_seed"] == 9
    assert len(settings["test_subset_indices"]) == 50 and settings["test_vectors_total"] == 360
    assert "50 of 360 vectors" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main([*args[:-2], "--test-subset", "1"])
    assert stop.value.code == 2 and "--test-subset must be an integer of at least 2" in capsys.readouterr().err


def test_a_steps_fixed_cost_is_shared_by_the_runs_batch():
    """Two timings on a step of fixed cost a plus b per chain price the run's own batch exactly; where the cost per
    chain grows with the batch (caches), the larger batch's own cost stands."""
    from raise_eval.evaluation.timers import Timer as _Timer

    a, b = 3e-4, 3e-7  # the step at 1,000 chains costs a third more than at 500: a line is fitted
    launch_bound = _Timer(lambda batch, steps: ((a + b * batch) / batch, 0.0), 5000.0 * 100, 5000, 5000, 500)
    launch_bound.measure(500, 3)
    assert launch_bound.seconds() == pytest.approx(100 * (a + b * 500) * 10)  # one timing: as measured
    launch_bound.measure(1000, 2)
    assert launch_bound.seconds() == pytest.approx(100 * (a + b * 5000), rel=1e-9)
    cache_bound = _Timer(lambda batch, steps: (b * (1 + batch / 1000), 0.0), 5000.0 * 100, 5000, 5000, 500)
    cache_bound.measure(500, 3)
    cache_bound.measure(1000, 2)
    assert cache_bound.seconds() == pytest.approx(5000 * 100 * b * 2)


def test_a_noisy_pair_of_timings_keeps_the_larger_batchs_cost():
    """A larger batch whose step cost less in all than a smaller one's, or barely more (noise; seen on a GPU and on
    a CPU timing a DBN's sweep on 30 and 60 chains): no line is fitted, the larger batch's cost per item stands
    (never a negative or a vanishing price)."""
    from raise_eval.evaluation.timers import Timer as _Timer

    for small, large in [(4e-4, 3e-4), (2.0e-4, 2.2e-4)]:
        timings = iter([(small / 500, 0.0), (large / 1000, 0.0)])
        timer = _Timer(lambda batch, steps, timings=timings: next(timings), 5000.0 * 100, 5000, 5000, 500)
        timer.measure(500, 3)
        timer.measure(1000, 2)
        assert timer.seconds() == pytest.approx(5000 * 100 * large / 1000)


def test_a_flat_step_over_a_wide_range_of_batches_is_fixed_cost():
    """Timings 16 times apart whose step costs the same: a fixed cost (a GPU's launches), shared by the run's batch."""
    from raise_eval.evaluation.timers import WIDER_FACTOR
    from raise_eval.evaluation.timers import Timer as _Timer

    timer = _Timer(lambda batch, steps: (3e-4 / batch, 0.0), 50_000.0 * 100, 50_000, 50_000, 200)
    for batch in (200, 400, 400 * WIDER_FACTOR):
        timer.measure(batch, 2)
    assert timer.seconds() == pytest.approx(100 * 3e-4)


def test_on_a_cpu_the_widest_timings_cost_per_item_stands():
    """A CPU's cost per item grows with the batch (caches) as the fixed part shrinks: no line there."""
    from raise_eval.evaluation.timers import Timer as _Timer

    timer = _Timer(lambda batch, steps: ((0.18 + 7e-4 * batch) / batch, 0.0), 3000.0 * 100, 3000, 3000, 30)
    timer.fit_fixed_cost = False
    for batch in (30, 60, 480):
        timer.measure(batch, 2)
    assert timer.seconds() == pytest.approx(3000 * 100 * (0.18 + 7e-4 * 480) / 480)
