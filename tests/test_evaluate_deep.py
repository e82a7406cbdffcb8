"""The evaluation front end serves RBMs, DBMs and DBNs alike: same keys, exact answers where tractable."""

from __future__ import annotations

import json
import re

import pytest
import torch
from raise_eval.models import DBM, DBN

from raise_eval import exact
from raise_eval import evaluate, recognition_means
from raise_eval.io.results import to_jsonable


@pytest.fixture(scope="module")
def test_vectors():
    return (torch.rand(300, 20, generator=torch.Generator().manual_seed(1)) < 0.4).float()


def _check_report(report, model, test):
    d = json.loads(json.dumps(to_jsonable(report)))
    ll = d["log_likelihood"]
    for key in ("mean", "stderr", "subset_mean", "subset_stderr", "control_variate", "headline", "start"):
        assert key in ll["raise"]
    assert ll["raise"]["headline"] == "control_variate"
    assert ll["exact"] == pytest.approx(float(exact.log_likelihood(model, test).mean()), abs=1e-4)
    assert d["log_z"]["exact"] == pytest.approx(exact.log_partition(model), abs=1e-6)
    return d


def test_dbm_report(test_vectors):
    """A weakly coupled 20-10-8 DBM at K = 300: AIS log Z within 4 of its standard errors of the exact value (plus
    float32 rounding), and the table names the heating start and the control-variate headline."""
    model = DBM.random([20, 10, 8], weight_std=0.7, bias_std=0.5, generator=torch.Generator().manual_seed(0))
    report = evaluate(
        model, test_vectors, init="uniform", steps=300, ais_chains=500, raise_examples=50, raise_chains=20
    )
    d = _check_report(report, model, test_vectors)
    assert d["log_likelihood"]["raise"]["start"] == "heating"
    # --exact auto enumerates log f(v) too (its 8-unit even hidden layer), and AIS and the control variate use it
    assert d["log_likelihood"]["log_unnormalized"]["method"] == "exact"
    exact_log_f = exact.log_unnormalized_visible(model, test_vectors)
    assert report.ais_mean == pytest.approx(float(exact_log_f.mean()) - report.ais.estimate, abs=1e-9)
    assert abs(report.ais.estimate - report.log_z_exact) < 4 * float(report.ais.stderr) + 1e-3
    table = report.format_table()
    assert "log f(v): exact, by enumeration" in table and "AIS (optimistic)" in table
    assert "(heating), control variate log f(v), alpha = 1" in table and "without control variate" in table
    assert "DBM 20-10-8" in table


def test_dbm_mean_field_and_optimal_alpha(test_vectors):
    model = DBM.random([20, 10, 8], weight_std=0.7, bias_std=0.5, generator=torch.Generator().manual_seed(0))
    report = evaluate(
        model,
        test_vectors,
        init="uniform",
        steps=50,
        ais_chains=100,
        raise_examples=30,
        raise_chains=5,
        log_f_method="mean-field",
        cv_alpha="optimal",
        exact="never",  # else the exact log f(v) replaces the bound
    )
    assert report.log_f.method == "mean-field"
    assert report.control_variate.alpha_rule == "optimal"
    assert "(optimal)" in report.format_table()
    bound = model.mean_field_bound(test_vectors)
    assert float(report.log_f.log_unnormalized.mean()) == pytest.approx(float(bound.mean()))


def test_dbn_report_with_recognition_base_rates(test_vectors):
    model = DBN.random([20, 10, 8, 6], weight_std=0.7, bias_std=0.5, generator=torch.Generator().manual_seed(2))
    means = recognition_means(model, test_vectors)
    assert means.shape == (8,)
    report = evaluate(
        model,
        test_vectors,
        init="base-rates",
        train_pixel_means=means,
        steps=100,
        ais_chains=200,
        raise_examples=20,
        raise_chains=5,
    )
    d = _check_report(report, model, test_vectors)
    assert d["log_likelihood"]["raise"]["start"] == "heated" and d["settings"]["dbn_start"] == "heated"
    assert report.ais.num_chains == 200 and "DBN 20-10-8-6" in report.format_table()
    unrolled = evaluate(
        model, test_vectors, init="base-rates", train_pixel_means=means, steps=100, ais_chains=200, raise_examples=20,
        raise_chains=5, dbn_start="unrolled",
    )  # fmt: skip
    d = _check_report(unrolled, model, test_vectors)
    assert d["log_likelihood"]["raise"]["start"] == "unrolled" and d["settings"]["dbn_start"] == "unrolled"
    assert unrolled.ais_mean == report.ais_mean  # the start changes RAISE only
    with pytest.raises(ValueError, match="dbn_start must be one of heated, unrolled"):
        evaluate(model, test_vectors, init="uniform", steps=2, dbn_start="paper")


def test_base_rates_for_a_dbn_need_the_top_layer_means(test_vectors):
    model = DBN.random([20, 10, 8, 6], generator=torch.Generator().manual_seed(2))
    with pytest.raises(ValueError, match="recognition means"):
        evaluate(model, test_vectors, init="base-rates", steps=2)
    with pytest.raises(ValueError, match="8 values"):
        evaluate(model, test_vectors, init="base-rates", train_pixel_means=test_vectors.mean(0), steps=2)


def test_reused_log_f_gives_the_same_report(test_vectors):
    """log f(v) estimates passed back in (as the table script does across K and starts) change no number; estimates
    of other vectors or with another sample count are refused before any work."""
    model = DBM.random([20, 6, 4], weight_std=0.7, generator=torch.Generator().manual_seed(2))
    kwargs = dict(
        init="uniform", steps=20, ais_chains=10, raise_examples=5, raise_chains=2, log_f_samples=8, seed=3,
        exact="never", log_f_method="importance",
    )
    first = evaluate(model, test_vectors, **kwargs)
    again = evaluate(model, test_vectors, **{**kwargs, "steps": 20}, log_f=first.log_f)
    assert again.ais_mean == first.ais_mean and again.raise_mean == first.raise_mean
    assert torch.equal(again.log_f.log_unnormalized, first.log_f.log_unnormalized)
    with pytest.raises(ValueError, match="needs importance estimates of its 299 test vectors"):
        evaluate(model, test_vectors[:299], **kwargs, log_f=first.log_f)
    with pytest.raises(ValueError, match="log_f used 8 importance samples but log_f_samples=9"):
        evaluate(model, test_vectors, **{**kwargs, "log_f_samples": 9}, log_f=first.log_f)
    importance_only = {k: v for k, v in kwargs.items() if k != "log_f_samples"}  # ais refuses an importance budget
    ais = {**importance_only, "log_f_method": "ais", "log_f_ais_steps": 5, "log_f_ais_chains": 3}
    first_ais = evaluate(model, test_vectors, **ais)
    assert first_ais.log_f.method == "ais" and first_ais.log_f.steps == 5
    with pytest.raises(ValueError, match="log_f used AIS with 5 steps x 3 chains but log_f_ais_steps=6"):
        evaluate(model, test_vectors, **{**ais, "log_f_ais_steps": 6}, log_f=first_ais.log_f)


def test_auto_log_f_method_takes_ais_for_dbms_and_narrow_dbns(test_vectors):
    """--log-f auto: per-vector AIS for DBMs, and for DBNs while its sweeps stay cheap (else importance, noted)."""
    from raise_eval.evaluation import plan_evaluation

    dbm = DBM.random([20, 6, 4], weight_std=0.7, generator=torch.Generator().manual_seed(2))
    plan = plan_evaluation(dbm, test_vectors, init="uniform", exact="never")
    assert plan.log_f_options["method"] == "ais" and plan.log_f_note is None
    dbn = DBN.random([20, 6, 4], generator=torch.Generator().manual_seed(2))
    assert plan_evaluation(dbn, test_vectors, init="uniform", exact="never").log_f_options["method"] == "ais"
    deep = DBN.random([20, 6, 5, 4], generator=torch.Generator().manual_seed(2))  # any depth
    assert plan_evaluation(deep, test_vectors, init="uniform", exact="never").log_f_options["method"] == "ais"
    wide = DBN.random([20, 500, 2000], generator=torch.Generator().manual_seed(2))
    some = test_vectors.repeat(4, 1)  # 1,200 vectors: 1.2e12 updates, minutes at any of the rates
    assert plan_evaluation(wide, some, init="uniform", exact="never").log_f_options["method"] == "ais"
    many = test_vectors.repeat(400, 1)  # 120,000 vectors: AIS's sweeps would make 1.2e14 updates
    plan = plan_evaluation(wide, many, init="uniform", exact="never")
    assert plan.log_f_options["method"] == "importance" and "log_f_method auto chose importance" in plan.log_f_note
    assert "1.2e+14 unit updates" in plan.log_f_note
    assert re.search(r"about \d+ min with the (C sweep on \d+ thread\(s\)|PyTorch sweep)\)", plan.log_f_note)


def test_auto_log_f_method_prices_the_pytorch_sweep_without_the_kernel(test_vectors, monkeypatch):
    """Without the C kernel a DBN's sweep is about four times slower, and 'auto' prices it so."""
    from raise_eval.evaluation import plan_evaluation

    monkeypatch.setenv("RAISE_EVAL_NATIVE", "0")
    wide = DBN.random([20, 500, 2000], generator=torch.Generator().manual_seed(2))
    plan = plan_evaluation(wide, test_vectors.repeat(40, 1), init="uniform", exact="never")  # 1.2e13 updates
    assert plan.log_f_options["method"] == "importance" and "min with the PyTorch sweep)" in plan.log_f_note


def test_a_log_f_check_on_one_vector_is_refused():
    """One vector gives no standard error for the check's rise (a new user saw 'rose by 0.137 +- nan')."""
    from raise_eval.evaluation.settings import EvaluateSettings
    from raise_eval.settings import SettingsError

    with pytest.raises(SettingsError, match="log_f_check 1 cannot say whether the estimates rose"):
        EvaluateSettings(log_f_check=1)
    assert EvaluateSettings(log_f_check=0).log_f_check == 0 and EvaluateSettings(log_f_check=2).log_f_check == 2
