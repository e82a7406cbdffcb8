"""scripts/diagnose_trajectory_error.py on a small run: its errors are against the exact values it is given, its
exact log Z along beta is the temperature path's (checked by enumerating the visible states here), and bad
arguments are refused before any work."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from raise_eval.models.io.checkpoints import save_checkpoint

from raise_eval import exact
from tests.conftest import PROJECT_ROOT
from tests.scripts.test_reproduce_raise_tables import load_script
from tests.trajectories import random_walk


@pytest.fixture(autouse=True)
def scripts_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "scripts"))


@pytest.fixture
def run(tmp_path):
    """A folder of three 8-6 RBM checkpoints saved with their training pixel means, test data, and exact.json."""
    folder = tmp_path / "run"
    folder.mkdir()
    means = torch.linspace(0.2, 0.7, 8)
    models = random_walk((8, 6), checkpoints=3, seed=3)
    for step, model in zip([0, 10, 20], models):
        save_checkpoint(folder / f"step_{step}.pt", model.to(dtype=torch.float32), train_pixel_means=means)
    data = tmp_path / "test.npy"
    np.save(data, (np.random.default_rng(0).random((20, 8)) < 0.5).astype(np.float32))
    truth = [float(exact.log_partition(m.to(dtype=torch.float32).to(dtype=torch.float64))) for m in models]
    (tmp_path / "exact.json").write_text(json.dumps({"log_z": truth}))
    return folder, data, tmp_path / "exact.json", means, models


def _main(run, out, *args):
    folder, data, exact_json, _, _ = run
    load_script("diagnose_trajectory_error").main(
        [str(folder), "--exact", str(exact_json), "--out", str(out), "--data", str(data), *args]
    )
    return json.loads(next(out.glob("*.json")).read_text())


def _log_z_temperature(model, means, beta: float) -> float:
    """log Z at beta on the path from the base rates (visible biases logit(means), hidden 0, no weights) to `model`,
    by enumerating the 2^8 visible states."""
    W, b, c = (t.to(torch.float64) for t in (model.weights[0], model.biases[0], model.biases[1]))
    m = means.to(torch.float64)
    base = torch.log(m) - torch.log1p(-m)
    v = torch.tensor(list(itertools.product([0.0, 1.0], repeat=8)), dtype=torch.float64)
    bias = (1 - beta) * base + beta * b
    log_f = v @ bias + torch.nn.functional.softplus(beta * (c + v @ W)).sum(1)
    return float(torch.logsumexp(log_f, 0))


def test_chains_errors_are_against_exact_and_small_on_a_small_model(run, tmp_path):
    out = _main(run, tmp_path / "out", "--part", "chains", "--checkpoints", "1", "2", "--chains", "200",
                "--seeds", "2", "--steps", "50")  # fmt: skip
    for key in ("1/200", "2/200"):
        assert len(out[key]["errors"]) == 2 and all(abs(e) < 0.2 for e in out[key]["errors"])


def test_along_beta_the_exact_values_are_the_temperature_paths(run, tmp_path):
    _, _, _, means, models = run
    out = _main(run, tmp_path / "out", "--part", "along", "--checkpoints", "2", "--chains", "200", "--steps", "40",
                "--betas", "0.5", "0.8")  # fmt: skip
    rungs = out["along"]["rungs"]
    assert [r["beta"] for r in rungs] == pytest.approx([0.0, 0.5, 0.8, 1.0])
    for rung in rungs:
        model = models[2].to(dtype=torch.float32).to(dtype=torch.float64)
        assert rung["exact"] == pytest.approx(_log_z_temperature(model, means, rung["beta"]), abs=1e-6)
        assert abs(rung["error"]) < 0.2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--chains", "15"], "--chains must be multiples of the 10 replicate groups"),
        (["--checkpoints", "3"], "--checkpoints are indices 0 .. 2"),
        (["--betas", "1.0"], "--betas inside (0, 1)"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(run, tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        _main(run, tmp_path / "out", "--part", "chains", *args)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.glob("out/*.json"))
