"""Parallel tempering along tiny enumerable training trajectories: log Z at every checkpoint against exact
enumeration, swap acceptance, bit-identical reruns, and a wrong exchange rule caught.

BAR from tempering's samples is consistent, not unbiased, and the samples are correlated; the standard error is the
replicate groups' spread (10 groups). The comparisons are at 4 standard errors with fixed seeds, so each run is
deterministic.
"""

from __future__ import annotations

import pytest
import torch

from raise_eval import exact
from raise_eval.estimators.tempering import knot_rungs, ladder_with_rungs_between, parallel_tempering
from raise_eval.paths.trajectory import trajectory_path
from tests.trajectories import random_walk, start_biases


def _path(weight_step=0.4, seed=0):
    walk = random_walk((8, 4), checkpoints=4, weight_step=weight_step, seed=seed)
    return walk, trajectory_path(walk, start_biases(walk[0]))


def _knot_errors(walk, path, result):
    rungs = knot_rungs(result.betas, [path.knots[p] for p in path.checkpoint_points])
    truth = torch.tensor([float(exact.log_partition(m)) for m in walk], dtype=torch.float64)
    return result.log_z[rungs] - truth, result.log_z_stderr[rungs]


@pytest.mark.parametrize("seed", [0, 1])
def test_log_z_at_every_checkpoint_matches_exact(seed):
    walk, path = _path(seed=seed)
    betas = ladder_with_rungs_between(path.knots, 1)
    result = parallel_tempering(path, betas, 200, 600, torch.Generator().manual_seed(seed), burn_in=100, replicates=10)
    errors, stderr = _knot_errors(walk, path, result)
    assert bool((stderr > 0).all())
    assert bool((errors.abs() <= 4 * stderr).all()), (errors, stderr)
    assert result.log_z[0] == path.log_partition_initial
    assert bool(((result.swap_acceptance >= 0) & (result.swap_acceptance <= 1)).all())
    assert result.swap_acceptance.shape == (len(betas) - 1,)


def test_same_seed_same_bits():
    _, path = _path()
    betas = ladder_with_rungs_between(path.knots, 1)
    runs = [
        parallel_tempering(path, betas, 20, 30, torch.Generator().manual_seed(3), burn_in=5, replicates=2)
        for _ in range(2)
    ]
    for field in ("log_z", "log_z_stderr", "replicate_log_z", "swap_acceptance", "link_delta"):
        assert torch.equal(getattr(runs[0], field), getattr(runs[1], field)), field
    other = parallel_tempering(path, betas, 20, 30, torch.Generator().manual_seed(4), burn_in=5, replicates=2)
    assert not torch.equal(other.log_z, runs[0].log_z)


def test_a_wrong_exchange_rule_is_caught():
    """The exchange with its log acceptance ratio's sign flipped leaves the rungs' distributions wrong: on a
    trajectory whose checkpoints are far apart (large weight steps), BAR on its samples misses exact log Z at some
    checkpoint by more than 4 standard errors, where the right rule (same seed) is within them."""
    walk, path = _path(weight_step=1.5, seed=2)
    betas = ladder_with_rungs_between(path.knots, 1)
    settings = dict(burn_in=100, replicates=10)
    right = parallel_tempering(path, betas, 200, 600, torch.Generator().manual_seed(0), **settings)
    wrong = parallel_tempering(path, betas, 200, 600, torch.Generator().manual_seed(0), swap_sign=-1.0, **settings)
    errors, stderr = _knot_errors(walk, path, right)
    assert bool((errors.abs() <= 4 * stderr).all()), (errors, stderr)
    errors, stderr = _knot_errors(walk, path, wrong)
    assert bool((errors.abs() > 4 * stderr).any()), (errors, stderr)


def test_bad_ladders_are_refused():
    _, path = _path()
    with pytest.raises(ValueError, match="from beta = 0 to 1"):
        parallel_tempering(path, [0.0, 0.5], 20, 10, torch.Generator().manual_seed(0), replicates=2)
    with pytest.raises(ValueError, match="increase strictly"):
        parallel_tempering(path, [0.0, 0.5, 0.5, 1.0], 20, 10, torch.Generator().manual_seed(0), replicates=2)
    with pytest.raises(ValueError, match="multiple of replicates"):
        parallel_tempering(path, [0.0, 1.0], 21, 10, torch.Generator().manual_seed(0), replicates=2)
