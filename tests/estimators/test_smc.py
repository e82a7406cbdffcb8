"""Sequential Monte Carlo along a training trajectory (`smc_ladder_pass`), against exact enumeration.

Short trajectories of tiny RBMs and a DBM (tests/trajectories.py: three checkpoints, an independent base prepended;
every checkpoint enumerable). Unbiasedness is checked in probability space over the replicates: each replicate
group is resampled only within itself, so its Z-hat is an independent estimate, and 20,000 groups of 10 chains
batched in one pass are 20,000 independent SMC runs (tests/statistics.py: |mean(exp(log Z-hat - log Z)) - 1| < 4
SE; false alarm about 6e-5 per z-score; this file makes 27, so about 0.2% under fresh seeds; the seeds are fixed).
"""

from __future__ import annotations

import pytest
import torch

from raise_eval import exact
from raise_eval.estimators.ladder import ladder_pass
from raise_eval.estimators.smc import smc_ladder_pass
from raise_eval.paths.trajectory import trajectory_path
from raise_eval.trajectory import evaluate_trajectory
from tests.statistics import assert_unbiased, unbiasedness_z
from tests.trajectories import random_walk, start_biases

GROUPS, PER_GROUP = 20_000, 10
SIZES = {"rbm-6-4": (6, 4), "dbm-4-3-2": (4, 3, 2)}


@pytest.fixture(scope="module", params=list(SIZES), ids=list(SIZES))
def walk(request):
    # Larger steps than the AIS tests' walks: the chains fall behind, so the groups resample.
    return random_walk(SIZES[request.param], weight_step=0.8, seed=1)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_smc_along_the_trajectory_is_unbiased_at_every_checkpoint(walk, k):
    path = trajectory_path(walk, start_biases(walk[0]))
    betas = path.schedule(k)
    knots = path.knot_indices(betas)
    result = smc_ladder_pass(
        path, betas, GROUPS * PER_GROUP, rungs=knots, generator=torch.Generator().manual_seed(60 + k),
        resample_ess=0.5, replicates=GROUPS, sweeps=1,
    )  # fmt: skip
    assert result.replicate_log_z.shape == (4, GROUPS)
    # Resampling happened: in more than a tenth of the groups (as counted in resampling events) before the last
    # checkpoint (observed: 8,323 to 18,555 events at K = 1 to 3 on the RBM).
    assert result.resamplings[-1] > GROUPS // 10, result.resamplings
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(result.replicate_log_z[point], exact.log_partition(model))


def test_resampling_before_a_checkpoint_on_the_way():
    """At K = 3, groups resample inside the first links too, so the middle checkpoint's estimate is one after
    resampling (with no extra sweeps: the next sub-step's transition is the only rejuvenation)."""
    walk = random_walk(SIZES["rbm-6-4"], weight_step=0.8, seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    betas = path.schedule(3)
    knots = path.knot_indices(betas)
    result = smc_ladder_pass(
        path, betas, GROUPS * PER_GROUP, rungs=knots, generator=torch.Generator().manual_seed(70),
        resample_ess=0.8, replicates=GROUPS, sweeps=0,
    )  # fmt: skip
    assert result.resamplings[2] > 0, result.resamplings
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(result.replicate_log_z[point], exact.log_partition(model))


@pytest.mark.parametrize("k", [1, 3])
def test_threshold_zero_is_plain_ais_bit_for_bit(k):
    walk = random_walk(SIZES["rbm-6-4"], weight_step=0.8, seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    betas = path.schedule(k)
    knots = path.knot_indices(betas)
    plain = ladder_pass(path, betas, 500, rungs=knots, generator=torch.Generator().manual_seed(5))
    smc = smc_ladder_pass(path, betas, 500, rungs=knots, generator=torch.Generator().manual_seed(5), resample_ess=0.0,
                          replicates=10)  # fmt: skip
    assert torch.equal(plain.log_weights, smc.log_weights)
    assert torch.equal(plain.forward, smc.forward) and torch.equal(plain.reverse, smc.reverse)
    assert smc.resamplings == [0] * len(knots)
    for layer_a, layer_b in zip(plain.final_state.layers, smc.final_state.layers):
        assert (layer_a is None and layer_b is None) or torch.equal(layer_a, layer_b)


def test_resampling_changes_the_chains_and_keeps_the_groups_apart():
    """A threshold of 1 resamples every group at every sub-step: each chain's ancestor is in its own group."""
    walk = random_walk(SIZES["rbm-6-4"], weight_step=0.8, seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    betas = path.schedule(2)
    chains, groups = 40, 4
    picked = []
    original = path.select_chains

    def spy(state, index):
        picked.append(index.clone())
        return original(state, index)

    path.select_chains = spy
    result = smc_ladder_pass(
        path, betas, chains, rungs=path.knot_indices(betas), generator=torch.Generator().manual_seed(1),
        resample_ess=1.0, replicates=groups,
    )  # fmt: skip
    assert len(picked) == betas.numel() - 2  # every sub-step but the last
    for index in picked:
        assert torch.equal(index // (chains // groups), torch.arange(chains) // (chains // groups))
    assert result.resamplings[-1] == groups * len(picked)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"resample_ess": 0.5, "replicates": 3}, "must be a multiple of replicates"),
        ({"resample_ess": 1.5, "replicates": 2}, "resample_ess must be a fraction"),
        ({"resample_ess": 0.5, "replicates": 2, "sweeps": -1}, "sweeps must be an integer"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    walk = random_walk(SIZES["rbm-6-4"], seed=1)
    path = trajectory_path(walk)
    betas = path.schedule(1)
    with pytest.raises(ValueError, match=message):
        smc_ladder_pass(path, betas, 10, rungs=[1], generator=torch.Generator().manual_seed(0), **kwargs)


def test_evaluate_trajectory_with_smc_against_exact_values():
    """The protocol with resampling: log Z at every checkpoint within 4 of its replicates' standard errors of exact,
    resamplings reported, the plain pass's numbers at resample_ess = 0."""
    walk = random_walk((6, 4), checkpoints=4, weight_step=0.8, seed=1)
    g = torch.Generator().manual_seed(0)
    test = (torch.rand(50, 6, generator=g, dtype=torch.float64) < 0.5).double()
    common = dict(steps=5, ais_chains=2000, raise_examples=10, raise_chains=4, raise_checkpoints=1, init="uniform")
    report = evaluate_trajectory(walk, test, resample_ess=0.5, replicates=20, **common)
    assert report.settings["resample_ess"] == 0.5 and report.settings["replicates"] == 20
    assert report.final.resamplings > 0
    for c, model in zip(report.checkpoints, walk):
        truth = exact.log_partition(model)
        assert abs(c.log_z - truth) < 4 * c.log_z_stderr + 1e-3, (c.log_z, truth, c.log_z_stderr)
        assert c.ess <= 2000
    plain = evaluate_trajectory(walk, test, **common)
    direct = ladder_pass(
        trajectory_path(walk), trajectory_path(walk).schedule(5), 2000,
        rungs=trajectory_path(walk).knot_indices(trajectory_path(walk).schedule(5)),
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert [c.resamplings for c in plain.checkpoints] == [None] * 4
    assert [c.log_z for c in plain.checkpoints] == [direct.summary(p).estimate.item() for p in (1, 2, 3, 4)]


def test_folding_the_largest_weight_instead_of_the_mean_is_detected(monkeypatch):
    """Power check: a resampling step that folds the group's largest weight into its Z-hat, not the mean, is
    rejected by the same test (observed: z of 121 to 271)."""
    from raise_eval.estimators import smc

    monkeypatch.setattr(smc.ReplicateGroups, "_log_mean", lambda self, log_w: log_w.view(self.count, self.size).amax(1))
    walk = random_walk(SIZES["rbm-6-4"], weight_step=0.8, seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    betas = path.schedule(2)
    result = smc_ladder_pass(
        path, betas, GROUPS * PER_GROUP, rungs=path.knot_indices(betas), generator=torch.Generator().manual_seed(62),
        resample_ess=0.5, replicates=GROUPS,
    )  # fmt: skip
    truth = torch.tensor([exact.log_partition(m) for m in walk], dtype=torch.float64)
    z, _ = unbiasedness_z(result.replicate_log_z[path.checkpoint_points[-1]], truth[-1])
    assert float(z.abs()) > 4, z
