"""`evaluate_trajectory` on short trajectories of tiny RBMs and DBMs (every checkpoint enumerable): the numbers
against exact values, the report's data, table and plot, and what it refuses.

The comparisons with exact values allow 4 standard errors of the estimators' own (AIS's delta-method error of log
Z-hat, BAR's bootstrap error, RAISE's control-variate error; false alarm about 6e-5 per comparison; seeds fixed).
RAISE bounds its annealing model's log-likelihood, which at K = 20 sub-steps per link is the model's to within
its error here.
"""

from __future__ import annotations

import json

import pytest
import torch

from raise_eval import exact
from raise_eval.paths.trajectory import trajectory_path
from raise_eval.settings import SettingsError
from raise_eval.trajectory import TrajectorySettings, evaluate_trajectory
from raise_eval.trajectory.run import raise_points
from tests.trajectories import random_walk


def _samples_of(model, seed=0, n=300):
    """n exact samples of the model's visible layer, float64 (test data the model fits)."""
    v = exact.binary_configurations(model.layer_sizes[0]).double()
    log_p = exact.log_likelihood(model, v)
    g = torch.Generator().manual_seed(seed)
    return v[torch.multinomial(torch.exp(log_p - log_p.max()), n, replacement=True, generator=g)]


def _test_data(n_visible, seed=0, n=300):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, n_visible, generator=g, dtype=torch.float64) < 0.5).double()


@pytest.mark.parametrize("sizes", [(8, 6), (5, 4, 3)], ids=["rbm", "dbm"])
def test_every_checkpoint_against_exact_values(sizes):
    walk = random_walk(sizes, checkpoints=4, seed=1)
    # Data the last checkpoint fits: training that improved the model, so the verdict can close (on uniform data
    # this walk gets 1.5 nats worse, which keeps a trajectory's verdict open: see the test below).
    test = _samples_of(walk[-1])
    assert [float(exact.log_likelihood(m, test).mean()) for m in walk] == sorted(
        float(exact.log_likelihood(m, test).mean()) for m in walk
    )
    report = evaluate_trajectory(walk, test, steps=20, ais_chains=4000, raise_examples=60, raise_chains=40,
                                 raise_checkpoints=2, init="uniform", training_steps=[5, 10, 15, 20])  # fmt: skip
    assert [c.step for c in report.checkpoints] == [5, 10, 15, 20]
    assert [c.raise_mean is not None for c in report.checkpoints] == [True, False, False, True]
    for c, model in zip(report.checkpoints, walk):
        truth_z = exact.log_partition(model)
        truth_ll = float(exact.log_likelihood(model, test).mean())
        assert c.log_z_exact == pytest.approx(truth_z, abs=1e-9) and c.exact_mean == pytest.approx(truth_ll, abs=1e-9)
        assert c.log_f_method == "exact"
        assert abs(c.log_z - truth_z) < 4 * c.log_z_stderr + 1e-3, (c.log_z, truth_z, c.log_z_stderr)
        assert abs(c.log_z_bar - truth_z) < 4 * c.log_z_bar_stderr, (c.log_z_bar, truth_z, c.log_z_bar_stderr)
        if c.raise_mean is not None:
            assert abs(c.raise_mean - truth_ll) < 4 * c.raise_stderr, (c.raise_mean, truth_ll, c.raise_stderr)
    assert [(link.start, link.end) for link in report.links][:2] == [("start", "checkpoint 0"),
                                                                      ("checkpoint 0", "checkpoint 1")]  # fmt: skip
    assert report.verdict == "closed" and report.reasons == []
    lo, hi = report.interval
    assert lo <= report.final.exact_mean <= hi


def test_report_json_table_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    walk = random_walk((8, 6), checkpoints=3, seed=2)
    means = torch.full((8,), 0.4, dtype=torch.float64)
    report = evaluate_trajectory(walk, _test_data(8), TrajectorySettings(steps=5, ais_chains=200, raise_examples=10,
                                 raise_chains=4), train_pixel_means=means, names=["a.pt", "b.pt", "c.pt"],
                                 labels={"folder": "run"})  # fmt: skip
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["settings"]["init"] == "base-rates" and doc["settings"]["folder"] == "run"
    assert len(doc["checkpoints"]) == 3 and len(doc["links"]) == 3
    assert set(doc["checkpoints"][-1]) >= {"step", "log_z", "log_z_bar", "log_z_exact", "ais_mean", "raise_mean", "gap"}
    assert doc["verdict"] in ("closed", "open") and "timing" in doc
    table = report.format_table({"tolerance": "--tolerance"})
    assert "a.pt -> b.pt" in table or "healthy" in table
    assert "verdict on the last checkpoint (step 2" in table
    png = tmp_path / "t.png"
    report.plot(str(png))
    assert png.stat().st_size > 10_000


def test_a_dbm_whose_log_f_is_not_enumerated_is_estimated_and_left_open():
    walk = random_walk((5, 4, 3), checkpoints=2, seed=3)
    report = evaluate_trajectory(walk, _test_data(5, n=40), steps=5, ais_chains=200, raise_examples=10,
                                 raise_chains=4, init="uniform", exact="never", log_f_samples=50)  # fmt: skip
    assert {c.log_f_method for c in report.checkpoints} == {"importance"}
    assert all(c.log_z_exact is None and c.exact_mean is None for c in report.checkpoints)
    assert report.verdict == "open" and any("not checked for bias" in r for r in report.reasons + [
        w.message for w in report.warnings])  # fmt: skip


def test_auto_skips_an_enumeration_that_costs_more_than_the_estimators(monkeypatch):
    """exact='auto' prices the checkpoints' enumerations as `evaluate` does (here with its floor of 2e11 multiply-adds
    lowered so that tiny models cross it): skipped with a note that names the way to force it; 'always' enumerates."""
    import raise_eval.trajectory.run as trajectory_run

    monkeypatch.setattr(trajectory_run, "EXACT_AUTO_MIN_MACS", 0.0)
    walk = random_walk((5, 4, 3), checkpoints=2, seed=3)
    settings = dict(steps=2, ais_chains=2, raise_examples=2, raise_chains=1, raise_checkpoints=1, init="uniform",
                    log_f_samples=20)  # fmt: skip
    skipped = evaluate_trajectory(walk, _test_data(5, n=40), **settings)
    assert all(c.log_z_exact is None and c.log_f_method == "importance" for c in skipped.checkpoints)
    note = next(n for n in skipped.to_dict()["notes"] if n.startswith("exact values skipped"))
    assert note.endswith("use exact always to force"), note  # the library names fields; the CLI, flags
    forced = evaluate_trajectory(walk, _test_data(5, n=40), exact="always", **settings)
    assert all(c.log_z_exact == pytest.approx(exact.log_partition(m)) for c, m in zip(forced.checkpoints, walk))
    assert {c.log_f_method for c in forced.checkpoints} == {"exact"}
    monkeypatch.undo()
    cheap = evaluate_trajectory(walk, _test_data(5, n=40), **settings)  # the floor: tiny models are enumerated
    assert {c.log_f_method for c in cheap.checkpoints} == {"exact"}


def test_settings_are_checked():
    walk = random_walk((8, 6), checkpoints=2)
    with pytest.raises(SettingsError, match="train_pixel_means"):
        evaluate_trajectory(walk, _test_data(8), steps=2, ais_chains=10)
    with pytest.raises(SettingsError, match="steps must be an integer of at least 1"):
        evaluate_trajectory(walk, _test_data(8), steps=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        evaluate_trajectory(walk, _test_data(8), sub_steps=3)
    with pytest.raises(ValueError, match="7 columns"):
        evaluate_trajectory(walk, torch.zeros(3, 7), init="uniform")
    with pytest.raises(ValueError, match="not one model's trajectory"):
        evaluate_trajectory([walk[0], random_walk((8, 5))[0]], _test_data(8), init="uniform")


def test_raise_points_spread_from_first_to_last():
    assert raise_points(21, 5) == [0, 5, 10, 15, 20]
    assert raise_points(21, 1) == [20]
    assert raise_points(3, 5) == [0, 1, 2]
    assert raise_points(4, 2) == [0, 3]


def test_a_model_that_got_worse_keeps_the_verdict_open():
    """RAISE along a training trajectory bounds the annealing model, whose chains lag toward earlier models: when an
    earlier checkpoint fit the test data better than the last by more than the tolerance, the verdict stays open
    naming that (here the last checkpoint's visible biases turn away from the data: 8 nats worse than the one
    before; the sandwich itself closes, as the same run with the checkpoints in the better order shows)."""
    from raise_eval.models import RBM

    walk = random_walk((8, 6), checkpoints=2, seed=1)
    g = torch.Generator().manual_seed(3)
    test = (torch.rand(300, 8, generator=g, dtype=torch.float64) < 0.8).double()
    good = RBM(walk[1].W, walk[1].vbias + 1.5, walk[1].hbias)
    worse = RBM(walk[1].W, walk[1].vbias - 1.5, walk[1].hbias)
    drop = float(exact.log_likelihood(good, test).mean() - exact.log_likelihood(worse, test).mean())
    assert drop > 5
    settings = dict(steps=20, ais_chains=2000, raise_examples=60, raise_chains=20, raise_checkpoints=1, init="uniform")
    report = evaluate_trajectory([walk[0], good, worse], test, **settings)
    assert report.verdict == "open"
    assert [r for r in report.reasons if r.startswith("an earlier model on the path fit the test data")], report.reasons
    better_order = evaluate_trajectory([walk[0], worse, good], test, **settings)
    assert better_order.verdict == "closed", better_order.reasons


@pytest.mark.parametrize(
    "kinds",
    [("categorical", "bernoulli"), ("gaussian", "bernoulli"), ("spin", "categorical", "bernoulli")],
    ids=["potts", "gaussian", "dbm-spin-potts-binary"],
)
def test_typed_layers_against_exact_values(kinds):
    """A Potts RBM, a Gaussian-visible one and a DBM of spin, Potts and binary layers (every checkpoint enumerable or
    integrated): log Z, the sandwich (RAISE with heating for the DBM) and the verdict as for binary machines; the test
    data are the visible layer's states (Potts: category codes)."""
    from tests.trajectories import typed_walk

    walk = typed_walk(kinds, checkpoints=4, seed=1)
    g = torch.Generator().manual_seed(0)
    path = trajectory_path(walk)
    state = path.sample_initial(100, g)
    for _ in range(200):  # test data the last checkpoint fits: a long chain of its own
        state = path.transition(state, 1.0, g)
    test = state.layers[0]
    if kinds[0] == "categorical":
        test = test.view(100, 2, 3).argmax(-1)  # the codes users keep (N, sites)
    report = evaluate_trajectory(walk, test, steps=20, ais_chains=2000, raise_examples=30, raise_chains=20,
                                 raise_checkpoints=2, init="uniform")  # fmt: skip
    assert report.settings["units"] == list(kinds)
    assert report.settings["likelihood"] == ("density" if kinds[0] == "gaussian" else "probability")
    for c, model in zip(report.checkpoints, walk):
        truth_z = exact.log_partition(model)
        assert c.log_z_exact == pytest.approx(truth_z, abs=1e-9)
        assert abs(c.log_z - truth_z) < 4 * c.log_z_stderr + 1e-3, (c.log_z, truth_z, c.log_z_stderr)
        if c.raise_mean is not None:
            assert abs(c.raise_mean - c.exact_mean) < 4 * c.raise_stderr, (c.raise_mean, c.exact_mean)
    assert report.verdict == "closed", report.reasons
    assert f"of {', '.join(kinds)} units" in report.format_table()


def test_a_typed_dbm_whose_log_f_cannot_be_enumerated_is_refused_before_work():
    from tests.trajectories import typed_walk

    walk = typed_walk(("spin", "categorical", "bernoulli"), seed=1)
    test = torch.ones(5, 3, dtype=torch.float64)
    with pytest.raises(SettingsError, match=r"computed only by enumeration, of 3 units here: raise max_exact_units"):
        evaluate_trajectory(walk, test, steps=2, ais_chains=20, max_exact_units=2, init="uniform")
