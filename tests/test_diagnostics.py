"""Warnings: each one is triggered by a model and settings that deserve it, and a healthy run raises none."""

import json
import math
from pathlib import Path

import pytest
import torch
from raise_eval.models import RBM

from raise_eval import evaluate
from raise_eval.diagnostics import SandwichNumbers
from raise_eval.diagnostics import diagnose as diagnose_numbers
from raise_eval.io.datasets import load_dataset
from raise_eval.io.results import to_jsonable

HEALTHY = dict(ais_mean=-18.07, ais_stderr=0.007, ais_ess=948, ais_chains=1000, ais_lower=65.68)


NUMBER_FIELDS = set(SandwichNumbers.__dataclass_fields__)


def diagnose(**kwargs):
    """`diagnostics.diagnose` of the numbers among `kwargs` (a `SandwichNumbers`), the other keywords passed on."""
    numbers = SandwichNumbers(**{k: v for k, v in kwargs.items() if k in NUMBER_FIELDS})
    return diagnose_numbers(numbers, **{k: v for k, v in kwargs.items() if k not in NUMBER_FIELDS})


def _codes(warnings):
    return {w.code for w in warnings}


def test_a_healthy_evaluation_raises_nothing():
    assert diagnose(**HEALTHY, raise_mean=-18.08, raise_stderr=0.007, exact_mean=-18.072) == []


@pytest.mark.parametrize(
    "change, code",
    [
        (dict(ais_ess=40), "low-ess"),
        (dict(ais_lower=-math.inf), "interval-not-finite"),
        (dict(raise_mean=-17.9), "raise-above-ais"),
        (dict(raise_mean=-19.5), "large-gap"),
        (dict(exact_mean=-17.5), "exact-outside-sandwich"),
        (dict(log_z=60.0, log_test_mass=65.0), "log-z-below-test-mass"),
    ],
)
def test_each_warning_has_its_trigger(change, code):
    args = {**HEALTHY, "raise_mean": -18.08, "raise_stderr": 0.007, "exact_mean": -18.072, **change}
    warnings = diagnose(**args)
    assert code in _codes(warnings)
    message = next(w.message for w in warnings if w.code == code)
    assert len(message) > 60 and ("--steps" in message or "Raise K" in message)


def test_a_large_gap_from_the_unrolled_dbn_start_names_the_heated_one():
    args = {**HEALTHY, "raise_mean": -19.5, "raise_stderr": 0.007}
    plain = next(w for w in diagnose(**args) if w.code == "large-gap")
    unrolled = next(w for w in diagnose(**args, raise_start="unrolled") if w.code == "large-gap")
    assert "dbn_start" not in plain.message
    assert "(dbn_start unrolled)" in unrolled.message and "dbn_start heated does" in unrolled.message


def test_log_z_above_the_test_mass_is_not_flagged():
    assert diagnose(**HEALTHY, raise_mean=-18.08, raise_stderr=0.007, log_z=65.7, log_test_mass=55.0) == []
    assert diagnose(**HEALTHY, raise_mean=-18.08, raise_stderr=0.007, log_z=65.7, log_test_mass=66.2) == []


def test_the_embedded_default_reports_its_test_mass(tmp_path):
    """Z >= sum of f(v) over the distinct test vectors: for the digits RBM log Z = 65.71 and the test mass is far
    below it."""
    from raise_eval import exact, load_checkpoint

    ckpt = load_checkpoint(Path(__file__).resolve().parents[1] / "checkpoints" / "rbm_digits_64-16.pt")
    test = load_dataset("digits", "test")
    report = evaluate(ckpt.model, test, init="uniform", steps=20, ais_chains=50, raise_examples=5, raise_chains=2)
    distinct = torch.unique(test, dim=0)
    expected = float(torch.logsumexp(exact.log_unnormalized_visible(ckpt.model, distinct), 0))
    assert report.log_test_mass == pytest.approx(expected, abs=1e-3)
    assert report.log_test_mass < exact.log_partition(ckpt.model)


def test_raise_within_noise_of_ais_is_not_flagged():
    assert diagnose(**HEALTHY, raise_mean=-18.06, raise_stderr=0.01) == []


def test_large_weight_rbm_is_flagged_in_table_and_json():
    """The review's case: W = 50 randn(64, 16) on the digits. RAISE lands hundreds of nats above AIS with an ESS of
    a few chains; the report must say so."""
    g = torch.Generator().manual_seed(0)
    rbm = RBM(50 * torch.randn(64, 16, generator=g), torch.zeros(64), torch.zeros(16))
    train = load_dataset("digits", "train")
    report = evaluate(
        rbm,
        load_dataset("digits", "test"),
        train_pixel_means=train.double().mean(0),
        steps=100,
        ais_chains=200,
        raise_examples=20,
        raise_chains=5,
    )
    codes = _codes(report.warnings)
    assert {"low-ess", "interval-not-finite", "raise-above-ais", "large-gap"} <= codes
    table = report.format_table()
    assert "warning [raise-above-ais]" in table
    doc = json.loads(json.dumps(to_jsonable(report)))
    assert {w["code"] for w in doc["warnings"]} == codes


def test_the_embedded_default_is_healthy():
    from raise_eval.models.io.checkpoints import load_checkpoint

    ckpt = load_checkpoint(Path(__file__).resolve().parents[1] / "checkpoints" / "rbm_digits_64-16.pt")
    report = evaluate(ckpt.model, load_dataset("digits", "test"), train_pixel_means=ckpt.train_pixel_means)
    assert report.warnings == []
    assert json.loads(json.dumps(to_jsonable(report)))["warnings"] == []


def test_an_interrupted_report_keeps_the_warnings_of_finished_stages():
    """Stopped after AIS (no log f(v), no RAISE): the AIS warnings still apply and are shown."""
    from raise_eval import BoltzmannPath, ais, linear_schedule
    from raise_eval.evaluation import EvaluationReport

    g = torch.Generator().manual_seed(0)
    rbm = RBM(50 * torch.randn(64, 16, generator=g), torch.zeros(64), torch.zeros(16))
    result = ais(BoltzmannPath(rbm), linear_schedule(20), 100, generator=g)
    settings = {"dtype": "float32", "device": "cpu", "init": "uniform", "schedule": "linear", "steps": 20, "seed": 0}
    report = EvaluationReport(
        settings=settings,
        num_test=10,
        ais=result,
        raise_=None,
        ais_mean=None,
        raise_mean=None,
        raise_stderr=None,
        control_variate=None,
        log_f=None,
        log_z_exact=None,
        exact_mean=None,
        timing={"seconds": 1.0, "ais_seconds": result.seconds},
        interrupted="the log f(v) estimates",
    )
    assert {"low-ess", "interval-not-finite"} <= {w.code for w in report.warnings}
    table = report.format_table()
    assert "warning [low-ess]" in table and "interrupted during the log f(v) estimates" in table
    assert to_jsonable(report)["complete"] is False


def test_low_ess_wording_fits_the_chain_count():
    """At millions of chains a low ESS is not "a few chains": the message speaks of the share of the chains, and
    more chains (which do not raise the share) are not the advice; at a handful it is a few chains."""
    def low_ess(ess, chains):
        warnings = diagnose(**{**HEALTHY, "ais_ess": ess, "ais_chains": chains}, raise_mean=None, raise_stderr=None)
        return next(w for w in warnings if w.code == "low-ess")

    many = low_ess(400_371, 5_000_000)
    assert "400,371 of 5,000,000 chains" in many.message and "as if only 8.0% of the chains counted" in many.message
    assert "a few chains" not in many.message and "more chains" not in many.message
    assert "Raise K (steps)" in many.message
    few = low_ess(4, 1000)
    assert "4 of 1,000 chains: log Z rests on a few chains" in few.message and "run more chains" in few.message


def test_one_test_vector_is_warned_about():
    codes = {w.code for w in diagnose(**HEALTHY, raise_mean=-18.08, raise_stderr=math.nan, num_test=1)}
    assert "one-test-vector" in codes
    assert diagnose(**HEALTHY, raise_mean=-18.08, raise_stderr=0.007, num_test=2) == []
    # Through evaluate: RAISE's standard error over one vector is NaN, and the report says why.
    from raise_eval.models.io.checkpoints import load_checkpoint

    ckpt = load_checkpoint(Path(__file__).resolve().parents[1] / "checkpoints" / "rbm_digits_64-16.pt")
    one = load_dataset("digits", "test")[:1]
    report = evaluate(ckpt.model, one, train_pixel_means=ckpt.train_pixel_means, steps=30, ais_chains=100)
    assert math.isnan(report.raise_stderr) and "one-test-vector" in _codes(report.warnings)
    assert "warning [one-test-vector]" in report.format_table()
