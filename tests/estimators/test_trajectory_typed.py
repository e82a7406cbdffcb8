"""AIS and SMC along training trajectories of machines of typed layers (Potts, Gaussian and spin units in RBMs and
a DBM), against exact enumeration (`raise_eval.exact`, which integrates Gaussian units), at K = 1, 2, 3 sub-steps
per link.

Short trajectories (tests/trajectories.py `typed_walk`: three checkpoints drifting from weights of 0.01, a uniform
independent start prepended). Unbiasedness in probability space (tests/statistics.py: |mean(exp(log w - log Z)) -
1| < 4 SE, false alarm about 6e-5 per z-score; this file makes 63, so about 0.4% under fresh seeds; the seeds are
fixed, so each run is deterministic).
"""

from __future__ import annotations

import pytest
import torch

from raise_eval import exact
from raise_eval.estimators.ladder import ladder_pass
from raise_eval.estimators.smc import smc_ladder_pass
from raise_eval.paths.trajectory import trajectory_path
from tests.statistics import assert_unbiased, unbiasedness_z
from tests.trajectories import typed_walk

CHAINS = 100_000
KINDS = {
    "potts-binary": ("categorical", "bernoulli"),
    "gaussian-binary": ("gaussian", "bernoulli"),
    "spin-binary": ("spin", "bernoulli"),
    "binary-potts": ("bernoulli", "categorical"),
    "gaussian-spin": ("gaussian", "spin"),
    "dbm-spin-potts-binary": ("spin", "categorical", "bernoulli"),
}


@pytest.fixture(scope="module", params=list(KINDS), ids=list(KINDS))
def walk(request):
    return typed_walk(KINDS[request.param], seed=1)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_ais_along_a_typed_trajectory_is_unbiased_at_every_checkpoint(walk, k):
    path = trajectory_path(walk)
    betas = path.schedule(k)
    result = ladder_pass(path, betas, CHAINS, rungs=path.knot_indices(betas),
                         generator=torch.Generator().manual_seed(80 + k))  # fmt: skip
    assert torch.allclose(result.log_weights[0], torch.tensor(path.log_partition_initial, dtype=torch.float64))
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(result.log_weights[point], exact.log_partition(model))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_smc_along_a_potts_trajectory_is_unbiased(k):
    """SMC (20,000 replicate groups of 10 chains, each an independent run) along a Potts RBM's trajectory, with
    resampling (asserted)."""
    walk = typed_walk(KINDS["potts-binary"], weight_step=0.8, seed=1)
    path = trajectory_path(walk)
    betas = path.schedule(k)
    result = smc_ladder_pass(
        path, betas, 200_000, rungs=path.knot_indices(betas), generator=torch.Generator().manual_seed(90 + k),
        resample_ess=0.5, replicates=20_000,
    )  # fmt: skip
    assert result.resamplings[-1] > 0, result.resamplings
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(result.replicate_log_z[point], exact.log_partition(model))


def test_a_wrong_typed_weight_update_is_detected(monkeypatch):
    """Power check: leaving out the even layers' potential terms of the weight update (the Potts visible layer's
    fields then never change along the path) is rejected by the same test (observed: z of -64)."""
    from raise_eval.paths.trajectory_layers import TypedLayers

    monkeypatch.setattr(TypedLayers, "potential_step", lambda self, l, b0, b1, x, batch: torch.zeros(batch,
                        dtype=torch.float64))  # fmt: skip
    walk = typed_walk(KINDS["potts-binary"], seed=1)
    path = trajectory_path(walk)
    betas = path.schedule(2)
    result = ladder_pass(
        path, betas, CHAINS, rungs=path.knot_indices(betas), generator=torch.Generator().manual_seed(82)
    )
    z, _ = unbiasedness_z(result.log_weights[path.checkpoint_points[-1]], exact.log_partition(walk[-1]))
    assert float(z.abs()) > 4, z
