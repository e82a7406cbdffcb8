"""`evaluate_trajectory` on a fully visible model's training run (three enumerable Potts checkpoints): every
checkpoint's log Z and test log-likelihood against enumeration, within 4 of the estimators' own standard errors
(false alarm about 6e-5 per comparison; seeds fixed), the base fitted to the training data's site frequencies, and
what it refuses."""

from __future__ import annotations

import pytest
import torch

from raise_eval import exact
from raise_eval.paths.fully_visible import site_frequencies
from raise_eval.trajectory import evaluate_trajectory
from tests.estimators.test_fully_visible_trajectory import fully_visible_walk


def _samples(model, n, seed):
    """n exact samples (site codes) of a fully visible model."""
    codes = exact.fully_visible.site_configurations(model.n_visible, model.num_states)
    g = torch.Generator().manual_seed(seed)
    log_f = model.log_unnormalized_codes(codes)
    return codes[torch.multinomial(torch.exp(log_f - log_f.max()), n, replacement=True, generator=g)]


def test_every_checkpoint_of_a_potts_run_against_exact_values():
    walk = fully_visible_walk("categorical", 3, 3, step=0.3)
    test, train = _samples(walk[-1], 200, 1), _samples(walk[-1], 300, 2)
    report = evaluate_trajectory(
        walk, test, steps=20, ais_chains=4000, raise_examples=40, raise_chains=40, raise_checkpoints=3,
        train_pixel_means=site_frequencies(walk[0], train), training_steps=[1, 5, 20], progress=False,
    )  # fmt: skip
    assert report.settings["family"] == "fully-visible" and report.settings["start"] == "prepended"
    for c, model in zip(report.checkpoints, walk):
        truth_z = exact.log_partition(model)
        truth_ll = float((model.log_unnormalized(test).double() - truth_z).mean())
        assert c.log_z_exact == pytest.approx(truth_z, abs=1e-9) and c.exact_mean == pytest.approx(truth_ll, abs=1e-9)
        assert abs(c.log_z - truth_z) < 4 * c.log_z_stderr, (c.log_z, truth_z, c.log_z_stderr)
        assert abs(c.log_z_bar - truth_z) < 4 * c.log_z_bar_stderr, (c.log_z_bar, truth_z, c.log_z_bar_stderr)
        assert abs(c.raise_mean - truth_ll) < 4 * c.raise_stderr, (c.raise_mean, truth_ll, c.raise_stderr)
    assert report.verdict in ("closed", "open")


def test_base_rates_need_site_frequencies():
    walk = fully_visible_walk("categorical", 3, 3)
    test = torch.zeros(4, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="needs the training data's site frequencies"):
        evaluate_trajectory(walk, test, steps=2, ais_chains=10, progress=False)
    with pytest.raises(ValueError, match=r"site frequencies must be shaped \(L, q\) = \(3, 3\)"):
        evaluate_trajectory(walk, test, steps=2, ais_chains=10, train_pixel_means=torch.full((3,), 0.5), progress=False)
    with pytest.raises(ValueError, match="test data must hold integer codes 0..2"):
        evaluate_trajectory(walk, test + 3, steps=2, ais_chains=10, init="uniform", progress=False)
