"""AIS and RAISE along a training trajectory, against exact enumeration, at K = 1, 2, 3 sub-steps per link.

Short trajectories of tiny RBMs and DBMs (tests/trajectories.py: three checkpoints drifting from a training run's
start, an independent base prepended). Unbiasedness is checked in probability space (tests/statistics.py: |mean(exp(
log w - log truth)) - 1| < 4 SE, false-alarm rate about 6e-5 per z-score; this file makes about 130 z-scores, so
about 1% under fresh seeds; the seeds are fixed, so each run is deterministic):

- AIS: one pass (`ladder_pass`, read at the knots) gives weights unbiased for Z of every checkpoint on the way;
- RAISE: weights unbiased for p_ann(v), the visible marginal of the forward chain through the trajectory's kernels,
  computed exactly from transition matrices (`exact.annealing_model_marginal_along`); heating for DBMs; also for a
  checkpoint on the way (`path.truncated`);
- the power check: the RAISE paper's index slip (the operator of p_k where that of p_{k+1} belongs) is rejected by
  the same test.
"""

from __future__ import annotations

import pytest
import torch

from raise_eval import exact, raise_log_likelihood
from raise_eval.estimators.ladder import ladder_pass
from raise_eval.paths.trajectory import trajectory_path
from tests.statistics import assert_unbiased, unbiasedness_z
from tests.trajectories import random_walk, start_biases

CHAINS = 100_000
SIZES = {"rbm": (8, 6), "dbm-2-hidden": (5, 4, 3), "dbm-3-hidden": (4, 3, 3, 2)}


@pytest.fixture(scope="module", params=list(SIZES), ids=list(SIZES))
def walk(request):
    return random_walk(SIZES[request.param], seed=1)


def _test_vectors(n_visible):
    v = exact.binary_configurations(n_visible)
    return v[[0, 5, 2**n_visible - 3, 2**n_visible - 1]]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_ais_along_the_trajectory_is_unbiased_at_every_checkpoint(walk, k):
    path = trajectory_path(walk, start_biases(walk[0]))
    betas = path.schedule(k)
    knots = path.knot_indices(betas)
    result = ladder_pass(path, betas, CHAINS, rungs=knots, generator=torch.Generator().manual_seed(10 + k))
    assert result.rungs == knots and result.log_weights.shape == (4, CHAINS)
    assert torch.allclose(result.log_weights[0], torch.tensor(path.log_partition_initial, dtype=torch.float64))
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(result.log_weights[point], exact.log_partition(model))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_raise_along_the_trajectory_is_unbiased_for_p_ann(walk, k):
    path = trajectory_path(walk, start_biases(walk[0]))
    betas = path.schedule(k)
    v = _test_vectors(walk[0].n_visible)
    p_ann = exact.annealing_model_marginal_along([path.at(b) for b in betas.tolist()])
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(20 + k))
    assert result.start == ("exact posterior" if walk[0].num_layers == 2 else "heating")
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_raise_of_a_checkpoint_on_the_way(walk):
    """RAISE of the second checkpoint: the path truncated there, its own annealing model."""
    path = trajectory_path(walk, start_biases(walk[0])).truncated(2)
    betas = path.schedule(2)
    v = _test_vectors(walk[0].n_visible)
    p_ann = exact.annealing_model_marginal_along([path.at(b) for b in betas.tolist()])
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(30))
    assert_unbiased(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_a_prepended_uniform_start_and_uneven_links(walk):
    """A uniform start (training's own start not known) and more sub-steps on the first link than on the others."""
    path = trajectory_path(walk)
    betas = path.schedule(1, first_link_steps=3)
    result = ladder_pass(
        path, betas, CHAINS, rungs=path.knot_indices(betas), generator=torch.Generator().manual_seed(40)
    )
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(result.log_weights[point], exact.log_partition(model))


@pytest.mark.parametrize("k", [2, 3])
def test_the_papers_index_slip_is_detected_along_the_trajectory(k):
    """Power check: the reverse pass drawing x_k with the operator of p_k (Alg. 2 as printed) is rejected: |z| > 4
    for at least one test vector (observed: z of 138 to 151 for every vector at K = 2 and 3 sub-steps)."""
    walk = random_walk(SIZES["rbm"], seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    betas = path.schedule(k)
    reverse = betas.flip(0).tolist()
    next_beta = dict(zip(reverse[:-1], reverse[1:]))

    def slipped(state, beta, generator):
        return path.transition(state, next_beta[beta], generator)

    v = _test_vectors(8)
    p_ann = exact.annealing_model_marginal_along([path.at(b) for b in betas.tolist()])
    result = raise_log_likelihood(
        path, v, betas, CHAINS, generator=torch.Generator().manual_seed(50 + k), kernel=slipped
    )
    z, _ = unbiasedness_z(result.log_weights, torch.log(p_ann[exact.configuration_index(v)]))
    assert float(z.abs().max()) > 4, z


def test_control_variate_along_the_trajectory():
    """The control variate takes RAISE's result along the trajectory unchanged: exact log f(v) of the final model."""
    walk = random_walk(SIZES["rbm"], seed=1)
    path = trajectory_path(walk, start_biases(walk[0]))
    v = _test_vectors(8)
    r = raise_log_likelihood(path, v, path.schedule(2), 16, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(r.log_unnormalized, walk[-1].log_unnormalized_prob(v))
    cv = r.control_variate_mean(r.log_unnormalized)
    assert cv.mean == pytest.approx(r.mean)
