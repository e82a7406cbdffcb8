"""AIS, RAISE and BAR along the training trajectory of fully visible models (`FullyVisibleTrajectoryPath`): three
enumerable checkpoints (categorical 3 sites x 3 states, spin 4 sites), a base fitted to training data prepended, at
K = 1, 2, 3 sub-steps per link. Unbiasedness in probability space (tests/statistics.py: |mean(exp(log w - log
truth)) - 1| < 4 SE; false alarm about 6e-5 per z-score; the seeds are fixed, so each run is deterministic): log Z
at every checkpoint by enumeration, and p_ann(v) from the palindromic scan's transition matrices at the path's
betas (its models at each beta, `path.at`)."""

from __future__ import annotations

import pytest
import torch
from raise_eval.models.fully_visible import FullyVisibleModel

from raise_eval import exact, raise_log_likelihood
from raise_eval.estimators.ladder import ladder_pass
from raise_eval.exact import fully_visible as exact_fv
from raise_eval.paths.fully_visible import data_base_fields
from raise_eval.paths.fully_visible_trajectory import FullyVisibleTrajectoryPath
from raise_eval.paths.trajectory import trajectory_path
from tests.fully_visible_models import random_model
from tests.statistics import assert_unbiased, unbiasedness_z

CHAINS = 40_000
KINDS = {"categorical": ("categorical", 3, 3, 0.5), "spin": ("spin", 4, 2, 0.25)}  # sites, size, q, step


def fully_visible_walk(sites: str, size: int, q: int, seed: int = 3, step: float = 0.5) -> list[FullyVisibleModel]:
    """Three checkpoints: a random model, then two random steps of its fields and couplings."""
    models = [random_model(sites, size, q, seed=seed, scale=0.6)]
    for i in range(2):
        drift = random_model(sites, size, q, seed=seed + 10 + i, scale=step)
        last = models[-1]
        models.append(FullyVisibleModel(last.fields + step * drift.fields, last.couplings + drift.couplings, sites))
    return models


@pytest.fixture(scope="module", params=list(KINDS), ids=list(KINDS))
def walk(request):
    sites, size, q, step = KINDS[request.param]
    models = fully_visible_walk(sites, size, q, step=step)
    train = models[0].sites_from_codes(torch.randint(0, q, (40, size), generator=torch.Generator().manual_seed(5)))
    return models, data_base_fields(models[0], train, pseudocount=0.05)


def p_ann_along(path, betas) -> torch.Tensor:
    """p_ann over every configuration's codes (index `site_configuration_index`): the start exactly, then one
    palindromic scan at each of betas[1:]."""
    start = path.at(0.0)
    codes = exact_fv.site_configurations(start.n_visible, start.num_states)
    p = torch.softmax(start.log_unnormalized_codes(codes).double(), dim=0)
    for beta in betas.tolist()[1:]:
        p = p @ exact_fv.scan_transition_matrix(path.at(beta))
    return p


def test_the_path_passes_through_the_checkpoints_and_is_linear_between_them(walk):
    models, base = walk
    path = trajectory_path(models, [base])
    assert isinstance(path, FullyVisibleTrajectoryPath) and path.checkpoint_points == [1, 2, 3]
    codes = exact_fv.site_configurations(models[0].n_visible, models[0].num_states)
    for point, model in zip(path.checkpoint_points, models):
        torch.testing.assert_close(path.log_density(codes, path.knots[point]), model.log_unnormalized_codes(codes))
    beta = (path.knots[1] + 2 * path.knots[2]) / 3  # two thirds of the way from checkpoint 0 to checkpoint 1
    between = (models[0].log_unnormalized_codes(codes) + 2 * models[1].log_unnormalized_codes(codes)) / 3
    torch.testing.assert_close(path.log_density(codes, beta), between)
    torch.testing.assert_close(path.at(beta).log_unnormalized_codes(codes), between)
    ratio = path.log_density_ratio(codes, path.knots[1], beta)
    torch.testing.assert_close(ratio, between - models[0].log_unnormalized_codes(codes))
    assert path.log_partition_initial == pytest.approx(float(torch.logsumexp(path.at(0.0).fields, -1).sum()))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_ais_along_the_trajectory_is_unbiased_at_every_checkpoint(walk, k):
    models, base = walk
    path = trajectory_path(models, [base])
    betas = path.schedule(k)
    result = ladder_pass(path, betas, CHAINS, rungs=path.knot_indices(betas),
                         generator=torch.Generator().manual_seed(60 + k))  # fmt: skip
    assert torch.allclose(result.log_weights[0], torch.tensor(path.log_partition_initial, dtype=torch.float64))
    for point, model in zip(path.checkpoint_points, models):
        assert_unbiased(result.log_weights[point], exact.log_partition(model))


@pytest.mark.parametrize("k", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_raise_along_the_trajectory_is_unbiased_for_p_ann(walk, k):
    """K = 2 and 3 (marked slow: 3 to 6 s each on a shared core) check the sub-steps inside a link as well."""
    models, base = walk
    path = trajectory_path(models, [base])
    betas = path.schedule(k)
    codes = exact_fv.site_configurations(models[0].n_visible, models[0].num_states)
    # the most probable configuration, the second and one at the upper quartile of log f: RAISE's weights on rare
    # ones vary too much for a test at this many chains
    order = models[-1].log_unnormalized_codes(codes).argsort()
    v = models[-1].sites_from_codes(codes[order[[-1, -2, 3 * codes.shape[0] // 4]]])
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(70 + k))
    assert result.start == "test vector"
    p_ann = p_ann_along(path, betas)
    assert float(p_ann.sum()) == pytest.approx(1.0, abs=1e-12)
    index = exact_fv.site_configuration_index(models[-1].codes(v), models[-1].num_states)
    assert_unbiased(result.log_weights, torch.log(p_ann[index]))


def test_raise_of_a_checkpoint_on_the_way_and_an_independent_first_checkpoint(walk):
    """RAISE of the second checkpoint on the path truncated there; and a run whose first checkpoint has no
    couplings starts at it (nothing prepended)."""
    models, base = walk
    path = trajectory_path(models, [base]).truncated(2)
    betas = path.schedule(2)
    v = models[1].sites_from_codes(torch.zeros(2, models[1].n_visible, dtype=torch.int64))
    result = raise_log_likelihood(path, v, betas, CHAINS, generator=torch.Generator().manual_seed(80))
    index = exact_fv.site_configuration_index(models[1].codes(v), models[1].num_states)
    assert_unbiased(result.log_weights, torch.log(p_ann_along(path, betas)[index]))
    start = FullyVisibleModel(base, torch.zeros_like(models[0].couplings), models[0].sites)
    own = trajectory_path([start, *models])
    assert own.checkpoint_points == [0, 1, 2, 3] and own.num_links == 3


def test_a_wrong_weight_update_is_detected(walk, monkeypatch):
    """Power check: a weight update on the geometric path's terms (the step times log f of the far point only,
    missing the near point's share) is rejected by the same test."""
    models, base = walk
    path = trajectory_path(models, [base])

    def wrong(state, beta_from, beta_to):
        link, _ = path._locate(min(beta_from, beta_to))
        return (path._u(link, beta_to) - path._u(link, beta_from)) * path._point_log_f(link + 1, state)

    monkeypatch.setattr(path, "log_density_ratio", wrong)
    betas = path.schedule(2)
    generator = torch.Generator().manual_seed(90)
    result = ladder_pass(path, betas, CHAINS, rungs=path.knot_indices(betas), generator=generator)
    z, _ = unbiasedness_z(result.log_weights[-1], exact.log_partition(models[-1]))
    assert float(z.abs()) > 4, z


def test_refused_starts_and_points():
    models = fully_visible_walk("categorical", 3, 3)
    path = FullyVisibleTrajectoryPath(models)  # the first checkpoint has couplings: no start to sample
    with pytest.raises(ValueError, match="needs an independent start"):
        path.sample_initial(2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="base fields have shape"):
        trajectory_path(models, [torch.zeros(3, 2, dtype=torch.float64)])
    with pytest.raises(ValueError, match="at least two points"):
        FullyVisibleTrajectoryPath(models[:1])
