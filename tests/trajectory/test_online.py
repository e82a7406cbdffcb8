"""Log Z along training, online: the persistent chains' pieces are one AIS run along the trajectory (unbiased for Z
of every call's model, at 1 and 2 sub-steps per call), RAISE back along the same path is unbiased for its annealing
model, and the monitor's `track` mode (records, files, verdicts, what it refuses).

Unbiasedness in probability space (tests/statistics.py: 4 standard errors, false alarm about 6e-5 per z-score; about
20 z-scores here; seeds fixed)."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from raise_eval.models import DBN, RBM
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm

from raise_eval import LikelihoodMonitor, exact, raise_log_likelihood
from raise_eval.settings import SettingsError
from raise_eval.trajectory import TrackSettings, TrajectoryRecord
from raise_eval.trajectory.online import TrajectoryTracker
from tests.statistics import assert_unbiased
from tests.trajectories import random_walk, start_biases

CHAINS = 100_000


@pytest.mark.parametrize("sizes", [(8, 6), (5, 4, 3)], ids=["rbm", "dbm"])
@pytest.mark.parametrize("k", [1, 2])
def test_the_calls_pieces_are_one_ais_run(sizes, k):
    walk = random_walk(sizes, checkpoints=3, seed=1)
    tracker = TrajectoryTracker(TrackSettings(chains=CHAINS, steps=k, start_steps=k), start_biases(walk[0]), seed=k)
    for model in walk:
        tracker.advance(model)
        assert_unbiased(tracker.log_weights, exact.log_partition(model))
    assert tracker.num_steps == 3 * k and tracker.link_steps == [k, k, k]


def test_raise_back_along_the_tracked_trajectory_is_unbiased():
    walk = random_walk((5, 4, 3), checkpoints=3, seed=1)
    tracker = TrajectoryTracker(TrackSettings(chains=10, steps=2, start_steps=3), start_biases(walk[0]), seed=0)
    for model in walk:
        tracker.advance(model)
    path = tracker.path()
    betas = path.schedule(tracker.link_steps)
    v = exact.binary_configurations(5)[[0, 5, 29, 31]]
    p_ann = exact.annealing_model_marginal_along([path.at(b) for b in betas.tolist()])
    result = tracker.raise_(v, CHAINS, torch.Generator().manual_seed(4))
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    # the same path and schedule as a direct call
    direct = raise_log_likelihood(path, v, betas, 3, generator=torch.Generator().manual_seed(4))
    assert direct.num_steps == result.num_steps == 7


def test_a_first_model_without_weights_keeps_the_path_the_chains_followed():
    """A monitor's first call on a model with no weights (before training), from a uniform start: the chains annealed
    from that start, so RAISE's path keeps it (a found bug: the path took the weightless model as its start and had
    one link fewer than the tracker's sub-step counts, so RAISE failed)."""
    walk = random_walk((5, 3), checkpoints=2, seed=1)
    weightless = RBM(torch.zeros_like(walk[0].W), walk[0].vbias + 1.0, walk[0].hbias)
    tracker = TrajectoryTracker(TrackSettings(chains=10, steps=2, start_steps=3), None, seed=0)
    for model in [weightless, *walk]:
        tracker.advance(model)
    path = tracker.path()
    assert tracker.link_steps == [3, 2, 2] and path.num_links == 3 and list(path.checkpoint_points) == [1, 2, 3]
    betas = path.schedule(tracker.link_steps)
    v = exact.binary_configurations(5)[[0, 7, 31]]
    p_ann = exact.annealing_model_marginal_along([path.at(b) for b in betas.tolist()])
    result = tracker.raise_(v, CHAINS, torch.Generator().manual_seed(5))
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_the_tracker_keeps_its_own_copy_of_each_model():
    walk = random_walk((8, 6), checkpoints=2, seed=1)
    tracker = TrajectoryTracker(TrackSettings(chains=8, steps=2, start_steps=2), seed=0)
    tracker.advance(walk[0])
    walk[0].weights[0].add_(100.0)  # a training loop changing the parameters in place
    assert tracker.models[0].weights[0].abs().max() < 50
    with pytest.raises(ValueError, match="layers 8-5"):
        tracker.advance(random_walk((8, 5), checkpoints=1)[0])


def _prototype_data(n, seed):
    protos = (torch.rand(3, 12, generator=torch.Generator().manual_seed(0)) < 0.5).float()
    g = torch.Generator().manual_seed(seed)
    flips = (torch.rand(n, 12, generator=g) < 0.1).float()
    return (protos[torch.randint(0, 3, (n,), generator=g)] - flips).abs()


def test_monitor_tracks_log_z_in_a_training_loop(tmp_path):
    pytest.importorskip("matplotlib")
    train, test = _prototype_data(120, 1), _prototype_data(40, 2)
    logged = []
    monitor = LikelihoodMonitor(
        test, init="uniform", raise_examples=10, raise_chains=20, seed=3,
        track=TrackSettings(chains=500, steps=20, start_steps=50, verdict_every=2),
        history_path=tmp_path / "h.csv", plot_path=tmp_path / "h.png", logger=lambda m, s: logged.append((m, s)),
    )  # fmt: skip
    config = RBMTrainingConfig(n_hidden=4, epochs=4, batch_size=20, learning_rate=0.1, method="cd")
    model = train_rbm(train, config, generator=torch.Generator().manual_seed(3), callback=monitor)
    final = monitor.final(3, model)
    assert [r.epoch for r in monitor.history] == [0, 1, 2, 3]
    assert all(isinstance(r, TrajectoryRecord) for r in monitor.history)
    assert [r.verdict is not None for r in monitor.history] == [False, True, False, True]
    assert final is monitor.history[-1] and final.steps == 50 + 3 * 20
    for r in monitor.history:
        # exact values (a 12-4 RBM): log Z within 4 standard errors
        assert r.log_z_exact is not None and abs(r.log_z - r.log_z_exact) < 4 * r.log_z_stderr + 1e-6
    assert abs(final.raise_ - final.exact) < 4 * final.raise_se and monitor.last_verdict[0] == final.verdict
    rows = list(csv.DictReader(open(tmp_path / "h.csv")))
    assert len(rows) == 4 and rows[1]["verdict"] in ("closed", "open") and rows[0]["raise"] == ""
    assert logged[-1][0].keys() >= {"test_ll/log_z", "test_ll/ais", "test_ll/raise", "test_ll/gap", "test_ll/exact"}
    assert (tmp_path / "h.png").stat().st_size > 10_000


def test_final_after_a_recorded_epoch_adds_the_verdict_without_moving_the_chains(tmp_path):
    test = _prototype_data(30, 2)
    walk = random_walk((12, 4), checkpoints=2, seed=5)
    track = TrackSettings(chains=50, steps=3, start_steps=5)
    monitor = LikelihoodMonitor(
        test, init="uniform", raise_examples=5, raise_chains=4, track=track, history_path=tmp_path / "h.json"
    )
    monitor(0, walk[0])
    before = monitor(1, walk[1])
    steps = monitor.tracker.num_steps
    record = monitor.final(1, walk[1])
    assert monitor.tracker.num_steps == steps and len(monitor.history) == 2
    assert record.verdict in ("closed", "open") and record.log_z == before.log_z and before.verdict is None
    assert monitor.final(1, walk[1]) is record
    doc = json.loads((tmp_path / "h.json").read_text())
    assert doc[-1]["verdict"] == record.verdict and "log_z" in doc[0]


def test_what_track_refuses():
    test = _prototype_data(10, 2)
    with pytest.raises(SettingsError, match="choose one"):
        LikelihoodMonitor(test, init="uniform", track=True, until_gap=0.5)
    with pytest.raises(SettingsError, match="TrackSettings"):
        LikelihoodMonitor(test, init="uniform", track="yes")
    monitor = LikelihoodMonitor(test, init="uniform", track=True)
    assert monitor.settings.track == TrackSettings()
    with pytest.raises(TypeError, match="RBMs and DBMs"):
        monitor(0, DBN.random([12, 4, 3], generator=torch.Generator().manual_seed(0)))


GROUPS = 20_000


@pytest.mark.parametrize("k", [1, 2])
def test_the_tracker_with_resampling_is_unbiased_at_every_call(k):
    """Resampled replicate groups (20,000 groups of 10 chains, each an independent SMC run) along larger parameter
    steps than above, so that the groups resample: every call's Z-hat unbiased over the groups."""
    walk = random_walk((6, 4), checkpoints=3, weight_step=0.8, seed=1)
    settings = TrackSettings(chains=GROUPS * 10, steps=k, start_steps=k, resample_ess=0.5, replicates=GROUPS)
    tracker = TrajectoryTracker(settings, start_biases(walk[0]), seed=k)
    for model in walk:
        tracker.advance(model)
        assert_unbiased(tracker.groups.log_z(tracker.log_weights), exact.log_partition(model))
    assert tracker.groups.resamplings > GROUPS // 10
    summary = tracker.log_z()
    assert float(summary.ess) <= GROUPS * 10 and bool(torch.isfinite(summary.stderr))


def test_a_re_anchored_tracker_stays_unbiased_and_raise_follows_its_segment():
    """anchor_margin 0: the pilot re-anchors wherever its temperature probe beats its trajectory estimate (the
    choice from the pilot's own stream); the main chains then restart from the start, and RAISE runs back along
    the segment since the last anchor."""
    walk = random_walk((6, 4), checkpoints=4, weight_step=0.8, seed=1)
    settings = TrackSettings(chains=CHAINS, steps=2, start_steps=3, anchor_margin=0.0, pilot_chains=20)
    tracker = TrajectoryTracker(settings, start_biases(walk[0]), seed=3)
    for model in walk:
        tracker.advance(model)
        assert_unbiased(tracker.log_weights, exact.log_partition(model))
    assert tracker.anchors and len(tracker.probe_gain) == 3, (tracker.anchors, tracker.probe_gain)
    path = tracker.path()
    assert path.num_links == len(walk) - tracker.anchors[-1]
    betas = path.schedule(tracker.link_steps[tracker.segment_start :])
    v = exact.binary_configurations(6)[[0, 5, 63]]
    p_ann = exact.annealing_model_marginal_along([path.at(b) for b in betas.tolist()])
    result = tracker.raise_(v, CHAINS, torch.Generator().manual_seed(6))
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_track_settings_refuse_chains_that_do_not_split_into_the_replicates():
    with pytest.raises(SettingsError, match="chains .*100.* multiple of replicates .*7"):
        TrackSettings(chains=100, replicates=7, resample_ess=0.5)
