"""The certified loop: its stopping rule (closes on an easy model, stops open and says why on a hard one, respects
the step and time budgets), its trend, its resume file, the CLI and the hook.

The runs are on tiny RBMs with exact answers and fixed seeds; the rule's conditions are also tested on reports
built by hand, where nothing is random.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from raise_eval.models import RBM

from raise_eval import certify as certify_fn
from raise_eval import exact
from raise_eval.certification import CertifyStep, closure_reasons
from raise_eval.certification.verdict import trend as _trend
from raise_eval.settings import parse_duration
from raise_eval.diagnostics import Warning

SMALL = dict(ais_chains=400, raise_examples=20, raise_chains=10, init="uniform", seed=0)


def _easy_rbm() -> RBM:
    """A 10-6 RBM with weak weights: its annealing path is short, so a small K closes the sandwich."""
    g = torch.Generator().manual_seed(7)
    return RBM.random(10, 6, weight_std=0.3, bias_std=0.5, generator=g, dtype=torch.float64)


def _test_vectors(model: RBM, n: int = 60) -> torch.Tensor:
    g = torch.Generator().manual_seed(8)
    return (torch.rand(n, model.n_visible, generator=g, dtype=torch.float64) < 0.5).double()


def test_closes_on_an_easy_model_and_the_interval_holds_the_exact_value():
    model = _easy_rbm()
    test = _test_vectors(model)
    cert = certify_fn(model, test, tolerance=0.5, steps=10, max_steps=640, **SMALL)
    truth = float(exact.log_likelihood(model, test).mean())
    assert cert.verdict == "closed", cert.format_table()
    assert cert.reasons == []
    lo, hi = cert.interval
    assert lo <= truth <= hi
    last = cert.history[-1]
    assert abs(last.gap) <= 0.5 and last.exact_mean == pytest.approx(truth, abs=1e-9)
    assert "CLOSED" in cert.format_table()
    from raise_eval.io.results import to_jsonable

    doc = json.loads(json.dumps(to_jsonable(cert)))
    assert doc["verdict"] == "closed" and doc["interval"] == [lo, hi]


def test_stops_open_at_max_steps_and_says_why(tiny_rbm):
    # A multimodal 8-6 RBM with strong weights: K = 2 and 4 leave a gap far above a 0.01-nat tolerance.
    g = torch.Generator().manual_seed(1)
    test = (torch.rand(40, 8, generator=g, dtype=torch.float64) < 0.5).double()
    cert = certify_fn(tiny_rbm, test, tolerance=0.01, steps=2, max_steps=4, **SMALL)
    assert cert.verdict == "open"
    assert [s.steps for s in cert.history] == [2, 4]
    assert any("would pass max_steps 4" in r for r in cert.reasons)
    assert any("above the tolerance" in r or "standard error" in r for r in cert.reasons)
    assert cert.interval is None
    assert "OPEN" in cert.format_table()


def _fix_gaps(monkeypatch, gaps) -> None:
    """Make each evaluation of a certified run report AIS at RAISE + the next of `gaps`."""
    import sys

    ev = sys.modules["raise_eval.certification.run"]
    gaps, real = iter(gaps), ev.run_evaluation

    def fixed_gap(plan, **kwargs):
        report = real(plan, **kwargs)
        report.ais_mean = report.raise_mean + next(gaps)
        return report

    monkeypatch.setattr(ev, "run_evaluation", fixed_gap)


def test_says_when_the_gap_stopped_shrinking(monkeypatch):
    _fix_gaps(monkeypatch, [0.60, 0.55, 0.56])
    model = _easy_rbm()
    cert = certify_fn(model, _test_vectors(model), tolerance=0.1, steps=5, max_steps=20, **SMALL)
    assert cert.verdict == "open" and any("stopped shrinking (0.600, 0.550, 0.560" in r for r in cert.reasons)
    assert cert.needed_steps is None
    assert not any("dbn_start" in r for r in cert.reasons)  # an RBM: nothing about DBN starts


def test_a_slowly_shrinking_gap_says_its_rate_when_the_trend_is_too_far(monkeypatch):
    """The committed 784-500-2000 DBN's gaps at K = 100, 200, 400 (91.0, 73.3, 64.9 nats, tolerance 0.5): the
    trend's K is beyond 10,000 times the last, so the table says how fast the gap shrinks instead."""
    _fix_gaps(monkeypatch, [91.0177, 73.3343, 64.8837])
    model = _easy_rbm()
    cert = certify_fn(model, _test_vectors(model), tolerance=0.5, steps=5, max_steps=20, **SMALL)
    assert cert.verdict == "open" and cert.needed_steps is None
    slope = (math.log(64.8837) - math.log(91.0177)) / math.log(4)  # equally spaced log K: the fit's slope is the ends'
    assert cert.gap_per_doubling == pytest.approx(2**slope, rel=1e-9)
    table = cert.format_table()
    assert "the gap shrinks by 16% per doubling of K: at that rate it reaches 0.5 nats only beyond K = 200,000" in table
    from raise_eval.io.results import to_jsonable

    assert json.loads(json.dumps(to_jsonable(cert)))["gap_per_doubling"] == pytest.approx(cert.gap_per_doubling)


def test_a_shrinking_gap_gives_the_trend_k(monkeypatch):
    _fix_gaps(monkeypatch, [2.0, 1.0, 0.5])
    model = _easy_rbm()
    cert = certify_fn(model, _test_vectors(model), tolerance=0.1, steps=5, max_steps=20, **SMALL)
    assert cert.verdict == "open" and cert.needed_steps == 100 and cert.gap_per_doubling == pytest.approx(0.5)
    assert "if the trend holds, the gap reaches 0.1 nats at about K = 100" in cert.format_table()


def test_a_stalled_unrolled_dbn_is_pointed_to_the_heated_start(monkeypatch):
    """A DBN certificate whose gap stopped shrinking with dbn_start='unrolled' names the heated start, as fields in
    the API and as flags on the command line."""
    from raise_eval.models import DBN
    from raise_eval.settings import render_names

    _fix_gaps(monkeypatch, [0.60, 0.55, 0.56])
    g = torch.Generator().manual_seed(5)
    model = DBN.random([8, 5, 4, 3], weight_std=0.5, generator=g)
    test = (torch.rand(40, 8, generator=g) < 0.4).float()
    cert = certify_fn(model, test, tolerance=0.1, steps=5, max_steps=20, init="uniform", ais_chains=20,
                      raise_examples=5, raise_chains=2, dbn_start="unrolled")  # fmt: skip
    stalled = [r for r in cert.reasons if "stopped shrinking" in r]
    assert stalled and "dbn_start heated anneals it away" in stalled[0]
    assert "--dbn-start heated anneals it away" in render_names(stalled[0].template, {"dbn_start": "--dbn-start"})


def test_respects_the_time_budget():
    model = _easy_rbm()
    test = _test_vectors(model)
    # A budget that one K already spends: the next K is predicted not to fit, so the loop stops after one.
    cert = certify_fn(model, test, tolerance=1e-6, steps=20, time_budget=1e-3, **SMALL)
    assert [s.steps for s in cert.history] == [20]
    assert any("time budget" in r for r in cert.reasons)


def _fake_report(gap=0.05, ais_se=0.01, raise_se=0.01, codes=()):
    return SimpleNamespace(
        gap=gap,
        ais=SimpleNamespace(stderr=torch.tensor(ais_se)),
        raise_stderr=raise_se,
        warnings=[Warning(c, "") for c in codes],
    )


@pytest.mark.parametrize(
    "code",
    ["low-ess", "interval-not-finite", "raise-above-ais", "log-z-below-test-mass", "exact-outside-sandwich",
     "log-f-biased", "log-f-unchecked"],
)
def test_an_undermining_warning_keeps_the_sandwich_open(code):
    assert closure_reasons(_fake_report(), 0.1) == []
    reasons = closure_reasons(_fake_report(codes=(code,)), 0.1)
    assert len(reasons) == 1


def test_large_noise_or_gap_keeps_it_open():
    assert any("above the tolerance" in r for r in closure_reasons(_fake_report(gap=0.2), 0.1))
    assert any("standard error" in r for r in closure_reasons(_fake_report(ais_se=0.06), 0.1))
    # RAISE above AIS within the tolerance and the noise is not a reason by itself
    assert closure_reasons(_fake_report(gap=-0.02), 0.1) == []


def _step(k, gap):
    return CertifyStep(k, gap, 0.0, 0.0, 0.0, 100.0, None, 1.0, 1.0, [], ["x"])


def test_trend_predicts_the_k_a_power_law_needs():
    # gap = 400 / K: halves with each doubling; 0.1 nats at K = 4,000
    history = [_step(k, 400.0 / k) for k in (100, 200, 400)]
    assert _trend(history, 0.1) == pytest.approx(4000, rel=1e-6)
    assert _trend([_step(100, 1.0), _step(200, 1.2)], 0.1) is None  # not shrinking
    assert _trend([_step(100, 1.0)], 0.1) is None
    # the last gap is within the tolerance (noise or warnings keep it open): no K to predict
    assert _trend([_step(100, 4.0), _step(200, 2.0), _step(400, -0.1)], 0.1) is None


def test_resume_keeps_finished_k(tmp_path, monkeypatch):
    model = _easy_rbm()
    test = _test_vectors(model)
    resume = str(tmp_path / "cert.json")
    first = certify_fn(model, test, tolerance=1e-6, steps=5, max_steps=10, resume_file=resume, **SMALL)
    assert [s.steps for s in first.history] == [5, 10]
    import sys

    ev = sys.modules["raise_eval.certification.run"]  # where certify finds run_evaluation

    calls = []
    real = ev.run_evaluation

    def counting(plan, **kwargs):
        calls.append(plan.steps)
        return real(plan, **kwargs)

    monkeypatch.setattr(ev, "run_evaluation", counting)
    second = certify_fn(model, test, tolerance=1e-6, steps=5, max_steps=20, resume_file=resume, **SMALL)
    assert calls == [20]  # K = 5 and 10 were read back
    assert [s.to_dict() for s in second.history[:2]] == [s.to_dict() for s in first.history]
    # the same K from scratch gives the same numbers as the resumed run's new K
    fresh = certify_fn(model, test, tolerance=1e-6, steps=20, max_steps=20, **SMALL)
    assert fresh.history[0].ais_mean == second.history[2].ais_mean
    # another tolerance reuses every finished K and judges it anew (here: it closes at K = 5)
    calls.clear()
    looser = certify_fn(model, test, tolerance=0.5, steps=5, max_steps=20, resume_file=resume, **SMALL)
    assert calls == [] and looser.verdict == "closed" and len(looser.history) == 1
    assert looser.history[0].reasons_open == []
    with pytest.raises(ValueError, match="other settings .*seed: 0 in the file, 1 now"):
        certify_fn(model, test, tolerance=0.5, steps=5, max_steps=20, resume_file=resume, **{**SMALL, "seed": 1})


def test_bad_arguments_are_refused():
    model = _easy_rbm()
    test = _test_vectors(model)
    for kwargs, match in (
        (dict(tolerance=0.0), "tolerance"),
        (dict(tolerance=0.1, steps=0), "steps"),
        (dict(tolerance=0.1, growth=1), "growth"),
        (dict(tolerance=0.1, steps=10, max_steps=5), "max_steps"),
        (dict(tolerance=0.1, time_budget=-1.0), "time_budget"),
        (dict(tolerance=0.1, log_f=None), "log_f"),
    ):
        with pytest.raises(ValueError, match=match):
            certify_fn(model, test, **kwargs)


def test_parse_duration():
    assert parse_duration("90") == 90.0
    assert parse_duration("90s") == 90.0
    assert parse_duration("30m") == 1800.0
    assert parse_duration("1.5h") == 5400.0
    for bad in ("soon", "-5m", "0"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_cli_until_gap_writes_the_verdict_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from raise_eval.cli import main

    model = _easy_rbm()
    test = _test_vectors(model)
    import numpy as np

    np.save(tmp_path / "test.npy", test.numpy())
    from raise_eval import save_checkpoint

    save_checkpoint(str(tmp_path / "rbm.pt"), model)
    out = tmp_path / "cert.json"
    code = main(
        [
            "evaluate", str(tmp_path / "rbm.pt"), "--data", str(tmp_path / "test.npy"), "--init", "uniform",
            "--steps", "10", "--ais-chains", "400", "--raise-chains", "10", "--raise-examples", "20",
            "--until-gap", "0.5", "--max-steps", "640", "--json", str(out), "--no-progress", "--threads", "1",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "K = 10:" in printed and "verdict: CLOSED" in printed
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "closed" and doc["history"][0]["steps"] == 10
    assert (tmp_path / "cert.png").stat().st_size > 1000


def test_cli_refuses_certify_options_without_until_gap(tmp_path, capsys):
    from raise_eval.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "checkpoints/rbm_digits_64-16.pt", "--max-steps", "100"])
    assert stop.value.code == 2
    assert "--until-gap" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", "checkpoints/rbm_digits_64-16.pt", "--until-gap", "0.1", "--time-budget", "soon"])
    assert "duration" in capsys.readouterr().err


def test_monitor_certifies_when_asked():
    from raise_eval import LikelihoodMonitor

    model = _easy_rbm()
    test = _test_vectors(model)
    monitor = LikelihoodMonitor(test, steps=10, until_gap=0.5, max_steps=640, **SMALL)
    rec = monitor(0, model)
    assert rec.verdict == "closed" and monitor.last_certificate.closed
    assert math.isfinite(rec.ais)
    with pytest.raises(ValueError, match="until_gap"):
        LikelihoodMonitor(test, max_steps=100)


def test_a_reason_no_k_can_remove_stops_after_the_first_k():
    """log f(v) is made once: with its check off (log-f-unchecked), a larger K cannot close the sandwich."""
    from raise_eval import DBM

    dbm = DBM.random([12, 6, 5], weight_std=0.5, generator=torch.Generator().manual_seed(2))
    test = (torch.rand(60, 12, generator=torch.Generator().manual_seed(3)) < 0.5).float()
    cert = certify_fn(dbm, test, tolerance=0.5, steps=5, max_steps=80, exact="never", log_f_check=0, **SMALL)
    assert [s.steps for s in cert.history] == [5]
    assert any("not checked for bias" in r for r in cert.reasons)
    assert any("no larger K can remove" in r for r in cert.reasons)


def test_cli_open_exits_3_and_ctrl_c_keeps_the_finished_ks(tmp_path, capsys, monkeypatch):
    import sys

    from raise_eval.cli import main
    from raise_eval.evaluation import EvaluationInterrupted

    model = _easy_rbm()
    import numpy as np

    from raise_eval import save_checkpoint

    np.save(tmp_path / "test.npy", _test_vectors(model).numpy())
    save_checkpoint(str(tmp_path / "rbm.pt"), model)
    args = ["evaluate", str(tmp_path / "rbm.pt"), "--data", str(tmp_path / "test.npy"), "--init", "uniform",
            "--steps", "5", "--ais-chains", "100", "--raise-chains", "4", "--raise-examples", "10", "--no-progress",
            "--threads", "1", "--until-gap", "1e-6"]  # fmt: skip
    assert main([*args, "--max-steps", "10"]) == 3  # open
    assert "verdict: OPEN" in capsys.readouterr().out
    ev = sys.modules["raise_eval.certification.run"]
    real = ev.run_evaluation

    def ctrl_c_at_k20(plan, **kwargs):
        report = real(plan, **kwargs)
        if plan.steps == 20:
            raise EvaluationInterrupted(report) from None
        return report

    monkeypatch.setattr(ev, "run_evaluation", ctrl_c_at_k20)
    out = tmp_path / "c.json"
    assert main([*args, "--max-steps", "40", "--json", str(out)]) == 130
    printed = capsys.readouterr().out
    assert "verdict: INTERRUPTED" in printed and "interrupted: the finished Ks" in printed
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "interrupted" and [h["steps"] for h in doc["history"]] == [5, 10]
    with pytest.raises(SystemExit):
        main([*args, "--plot", str(tmp_path / "p.txt")])
    assert "name a .png" in capsys.readouterr().err


def test_monitor_checks_its_certify_settings_when_made():
    from raise_eval import LikelihoodMonitor

    test = _test_vectors(_easy_rbm())
    for kwargs, says in (
        (dict(until_gap=float("inf")), "until_gap"),
        (dict(until_gap=0.5, time_budget="soon"), "time_budget"),
        (dict(until_gap=0.5, max_steps=10), "max_steps"),
    ):
        with pytest.raises(ValueError, match=says):
            LikelihoodMonitor(test, steps=100, **kwargs)


def test_a_closed_interval_says_which_side_is_which():
    """RAISE normally lies below AIS and the interval runs from RAISE to AIS; when RAISE came out above AIS
    (within the noise) the table says so instead of calling the upper end RAISE's."""
    import dataclasses

    model = _easy_rbm()
    cert = certify_fn(model, _test_vectors(model), tolerance=0.5, steps=10, max_steps=640, **SMALL)
    assert cert.verdict == "closed"
    last = cert.history[-1]
    below = dataclasses.replace(last, raise_mean=last.ais_mean - 0.01)
    above = dataclasses.replace(last, raise_mean=last.ais_mean + 0.01)
    cert.history[-1] = below
    assert "(RAISE to AIS, ±2 standard errors" in cert.format_table()
    cert.history[-1] = above
    table = cert.format_table()
    assert "(AIS to RAISE: RAISE came out above AIS, within the noise, ±2 standard errors" in table


def _small_dbn():
    """The 12-6-5-4 DBN and 30 test vectors that tests/data's 0.3 resume files were written for."""
    from raise_eval.models import DBN

    g = torch.Generator().manual_seed(4)
    model = DBN.random([12, 6, 5, 4], weight_std=0.5, generator=g)
    return model, (torch.rand(30, 12, generator=g) < 0.3).float()


DBN_RUN = dict(
    steps=5, ais_chains=40, raise_examples=10, raise_chains=4, exact="never", shard_size=10, init="uniform", threads=1
)


def test_a_certified_dbn_resumed_with_the_other_start_is_refused(tmp_path):
    """Issue 41: the certified file's fingerprint lacked dbn_start, so a run resumed under the other DBN start kept
    the Ks computed with the first one under the new label."""
    model, test = _small_dbn()
    resume = str(tmp_path / "cert.json")
    first = certify_fn(model, test, tolerance=1e-9, max_steps=5, resume_file=resume, **DBN_RUN, dbn_start="unrolled")
    assert [s.steps for s in first.history] == [5]
    with pytest.raises(ValueError, match=r"dbn_start: 'unrolled' in the file, 'heated' now"):
        certify_fn(model, test, tolerance=1e-9, max_steps=5, resume_file=resume, **DBN_RUN)
    again = certify_fn(model, test, tolerance=1e-9, max_steps=5, resume_file=resume, **DBN_RUN, dbn_start="unrolled")
    assert again.report is None and [s.to_dict() for s in again.history] == [s.to_dict() for s in first.history]


def test_a_certified_file_of_0_3_continues(tmp_path, monkeypatch):
    """tests/data/certify_0.3_dbn.json was written by raise-eval 0.3 (which did not record dbn_start): it continues
    under the default start, with a note saying so, and is refused under the other one, saying why."""
    import shutil
    import sys
    from pathlib import Path

    model, test = _small_dbn()
    resume = tmp_path / "cert.json"
    shutil.copy(Path(__file__).parent / "data" / "certify_0.3_dbn.json", resume)
    saved = json.loads(resume.read_text())["history"]
    ev = sys.modules["raise_eval.certification.run"]
    calls = []
    monkeypatch.setattr(ev, "run_evaluation", lambda plan, **kwargs: calls.append(plan.steps))
    cert = certify_fn(model, test, tolerance=1e-9, max_steps=5, resume_file=str(resume), **DBN_RUN)
    assert calls == [] and [s.steps for s in cert.history] == [h["steps"] for h in saved]
    assert cert.history[0].ais_mean == saved[0]["ais_mean"]
    assert any("does not record dbn_start" in n and "'heated'" in n for n in cert.notes)
    with pytest.raises(ValueError, match=r"dbn_start: 'heated' in the file, 'unrolled' now \(the file, written by"):
        certify_fn(model, test, tolerance=1e-9, max_steps=5, resume_file=str(resume), **DBN_RUN, dbn_start="unrolled")
