"""Adaptive links along a training trajectory (`raise_eval.estimators.adaptive_links`), against exact enumeration.

Short trajectories of tiny RBMs and a DBM (tests/trajectories.py: four checkpoints, an independent base prepended,
every checkpoint enumerable). A plan (uneven sub-steps, K = 1, 2, 3 per link, and a checkpoint re-anchored in
temperature) is run by `adaptive_trajectory_pass`: each checkpoint's Z-hat must be unbiased, over 20,000 replicate
groups of 10 chains (independent SMC runs batched in one pass). RAISE along the path and reversed schedule the
forward run used (`plan_piece`) must be unbiased for that path's annealing model p_ann(v), computed exactly from
transition matrices. Checked in probability space (tests/statistics.py: |mean(exp(log w - log truth)) - 1| < 4 SE;
false alarm about 6e-5 per z-score; this file makes about 110, so about 0.7% under fresh seeds; the seeds are fixed,
so each run is deterministic).
"""

from __future__ import annotations

import math

import pytest
import torch

from raise_eval import exact, raise_log_likelihood
from raise_eval.estimators.adaptive_links import (
    LinkPlan,
    adaptive_trajectory_pass,
    conditional_ess,
    fraction_schedule,
    plan_links,
    plan_piece,
    segment_path,
)
from raise_eval.paths.trajectory import trajectory_path
from raise_eval.trajectory import evaluate_trajectory
from tests.statistics import assert_unbiased
from tests.trajectories import random_walk, start_biases

GROUPS, PER_GROUP = 20_000, 10
SIZES = {"rbm-6-4": (6, 4), "dbm-4-3-2": (4, 3, 2)}
POSITIONS = {1: [1.0], 2: [0.3, 1.0], 3: [0.2, 0.5, 1.0]}


@pytest.fixture(scope="module", params=list(SIZES), ids=list(SIZES))
def walk(request):
    return random_walk(SIZES[request.param], checkpoints=4, weight_step=0.8, seed=1)


def _plan(path, k: int, anchors=(3,)) -> LinkPlan:
    positions = POSITIONS[k]
    return LinkPlan(
        fractions=[list(positions) for _ in range(path.num_links)], anchors=list(anchors),
        anchor_fractions={a: list(positions) for a in anchors}, sweeps=1,
    )  # fmt: skip


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_run_along_a_plan_is_unbiased_at_every_checkpoint(walk, k):
    path = trajectory_path(walk, start_biases(walk[0]))
    plan = _plan(path, k)
    assert plan.segments() == [(0, 3), (3, 5)]
    result = adaptive_trajectory_pass(
        path, plan, GROUPS * PER_GROUP, generator=torch.Generator().manual_seed(80 + k), resample_ess=0.5,
        replicates=GROUPS,
    )  # fmt: skip
    assert result.replicate_log_z.shape == (5, GROUPS)
    assert result.num_steps == 4 * k  # points 0-1-2, then the temperature link to 3 and 3-4 (2-3 is not run)
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(result.replicate_log_z[point], exact.log_partition(model))
    # BAR's ratios across the segments' boundary are those of the two points (not zeros).
    assert bool(result.forward[2].abs().sum() > 0) and bool(result.reverse[2].abs().sum() > 0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_raise_along_the_plan_is_unbiased_for_its_annealing_model(walk, k):
    # the AIS tests' smaller steps: RAISE's weights at K = 1 along the larger ones are too spread for the test
    walk = random_walk(tuple(m.layer_sizes for m in walk[:1])[0], checkpoints=4, seed=1)
    """RAISE of a checkpoint before the anchor (the first segment truncated) and of the last checkpoint (the
    anchored segment: the temperature link to point 3, then the trajectory), each along the forward run's
    schedule."""
    path = trajectory_path(walk, start_biases(walk[0]))
    plan = _plan(path, k)
    v = exact.binary_configurations(walk[0].n_visible)[[0, 5, 2 ** walk[0].n_visible - 1]]
    for point in (2, 4):
        piece, betas = plan_piece(path, plan, point)
        assert betas.numel() - 1 == 2 * k  # two links either way
        p_ann = exact.annealing_model_marginal_along([piece.at(b) for b in betas.tolist()])
        result = raise_log_likelihood(piece, v, betas, 100_000, generator=torch.Generator().manual_seed(90 + k))
        assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    assert torch.equal(plan_piece(path, plan, 4)[0].model.weights[0], walk[-1].weights[0])


def test_a_segment_starts_with_the_temperature_link():
    walk = random_walk(SIZES["rbm-6-4"], checkpoints=4, seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    piece = segment_path(path, 3, 5)
    assert [p.weights[0].abs().sum().item() for p in piece.points[:1]] == [0.0]
    assert torch.equal(piece.points[1].weights[0], walk[2].weights[0]) and piece.checkpoint_points == [1, 2]
    betas = fraction_schedule(piece, [[0.5, 1.0], [1.0]])
    assert betas.tolist() == [0.0, 0.25, 0.5, 1.0]
    with pytest.raises(ValueError, match="end at 1.0"):
        fraction_schedule(piece, [[0.5], [1.0]])


def test_conditional_ess():
    log_w = torch.zeros(4, dtype=torch.float64)
    assert conditional_ess(log_w, torch.zeros(4, dtype=torch.float64)) == pytest.approx(1.0)
    # one chain carries all the increment: CESS = 1 / M
    assert conditional_ess(log_w, torch.tensor([0.0, -1e9, -1e9, -1e9], dtype=torch.float64)) == pytest.approx(0.25)


def test_the_pilot_keeps_every_sub_step_above_its_target_and_anchors_where_told():
    walk = random_walk(SIZES["rbm-6-4"], checkpoints=4, weight_step=0.8, seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    common = dict(pilot_chains=400, resample_ess=0.5, sweeps=1, max_link_steps=200)
    loose = plan_links(path, generator=torch.Generator().manual_seed(1), target_cess=0.5, anchor_margin=None, **common)
    tight = plan_links(path, generator=torch.Generator().manual_seed(1), target_cess=0.99, anchor_margin=None, **common)
    assert loose.anchors == [] and loose.probe_gain == {}
    assert all(f[-1] == 1.0 and f == sorted(f) for f in tight.fractions)
    assert tight.num_steps() > loose.num_steps() >= path.num_links
    every = plan_links(path, generator=torch.Generator().manual_seed(1), target_cess=0.9, anchor_margin=-math.inf,
                       **common)  # fmt: skip
    assert every.anchors == [2, 3, 4] and sorted(every.anchor_fractions) == [2, 3, 4]
    assert every.segments() == [(0, 2), (2, 3), (3, 4), (4, 5)]
    # the pilot's log Z follows the exact values (a sanity check of its bookkeeping, 400 chains)
    for point, model in zip(path.checkpoint_points, walk):
        assert abs(tight.pilot_log_z[point] - float(exact.log_partition(model))) < 0.2


def test_the_command_with_adaptive_links_runs_against_exact():
    walk = random_walk(SIZES["rbm-6-4"], checkpoints=4, weight_step=0.8, seed=1)
    test = exact.binary_configurations(6)[:8]
    report = evaluate_trajectory(
        walk, test, init="uniform", links="adaptive", ais_chains=400, resample_ess=0.5, replicates=10, pilot_chains=200,
        raise_examples=4, raise_chains=10, raise_checkpoints=2, bootstrap=20, anchor_margin=0.0,
    )  # fmt: skip
    assert set(report.settings["anchors"]) <= {"checkpoint 1", "checkpoint 2", "checkpoint 3"}
    assert any(n.startswith("adaptive links:") for n in report.notes)
    for c in report.checkpoints:
        assert abs(c.log_z - c.log_z_exact) < 5 * c.log_z_stderr + 0.05, (c.log_z, c.log_z_exact, c.log_z_stderr)
    assert report.checkpoints[-1].raise_mean is not None


def test_adaptive_links_refuse_chains_that_do_not_split_into_the_replicates_before_any_work():
    """The fresh run is SMC in replicate groups even at resample_ess 0: a count that does not split is refused by the
    settings, not after the pilot has run (a found bug: it was accepted)."""
    from raise_eval.settings import SettingsError
    from raise_eval.trajectory.settings import TrajectorySettings

    with pytest.raises(SettingsError, match="ais_chains .*1001.* multiple of replicates .*10.*links"):
        TrajectorySettings(links="adaptive", ais_chains=1001)


def test_sweeps_per_link_are_run_as_the_plan_says_and_stay_unbiased():
    """A plan whose links ask for different sweeps (0, 3, 1 and the anchor's 2): the run passes them per sub-step
    (`segment_sweeps`) and every checkpoint's Z-hat stays unbiased; the pilot with max_sweeps chooses at least the
    least and at most the most."""
    walk = random_walk(SIZES["rbm-6-4"], checkpoints=4, weight_step=0.8, seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    plan = _plan(path, 2)
    plan.link_sweeps, plan.anchor_sweeps = [0, 3, 1, 1], {3: 2}
    assert plan.segment_sweeps(0, 3) == [0, 0, 3, 3] and plan.segment_sweeps(3, 5) == [2, 2, 1, 1]
    result = adaptive_trajectory_pass(
        path, plan, GROUPS * PER_GROUP, generator=torch.Generator().manual_seed(95), resample_ess=0.5,
        replicates=GROUPS,
    )  # fmt: skip
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(result.replicate_log_z[point], exact.log_partition(model))
    chosen = plan_links(path, pilot_chains=400, generator=torch.Generator().manual_seed(1), target_cess=0.9,
                        resample_ess=0.5, sweeps=1, max_link_steps=200, anchor_margin=0.0, max_sweeps=6)  # fmt: skip
    assert len(chosen.link_sweeps) == path.num_links and all(1 <= n <= 6 for n in chosen.link_sweeps)
    assert all(1 <= chosen.anchor_sweeps[a] <= 6 for a in chosen.anchors)
