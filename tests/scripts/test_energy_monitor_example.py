"""scripts/examples/energy_monitor.py (issue 43, the training hook on an EBM): a few batches of short-run Langevin
training, the monitor's records against the grid's exact value, the history written, and existing outputs refused
before any work without --overwrite."""

from __future__ import annotations

import csv
import importlib.util
import math

import pytest
import torch

from tests.conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "examples" / "energy_monitor.py"


def _script():
    spec = importlib.util.spec_from_file_location("scripts_examples_energy_monitor", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_grid_s_log_z_is_a_known_one():
    """On E = 0 the box's area: log 64; on E = |x|^2 / 2 (nearly all its mass inside the box) log 2 pi."""
    script = _script()

    class Flat(torch.nn.Module):
        def forward(self, x):
            return torch.zeros(x.shape[0])

    class Quadratic(torch.nn.Module):
        def forward(self, x):
            return 0.5 * x.square().sum(-1)

    assert script.grid_log_z(Flat(), 101) == pytest.approx(math.log((2 * script.BOX) ** 2), abs=1e-9)
    inside = math.erf(script.BOX / math.sqrt(2)) ** 2  # the standard normal's mass in the box
    assert script.grid_log_z(Quadratic()) == pytest.approx(math.log(2 * math.pi * inside), abs=1e-4)


@pytest.mark.slow  # about 6 s: the monitor itself is tested fast in tests/test_energy_monitor.py
def test_a_short_run_writes_the_records_against_the_truth(tmp_path, capsys):
    script = _script()
    args = ["--out", str(tmp_path), "--epochs", "2", "--every", "1", "--batches", "1", "--steps", "10",
            "--test-size", "6", "--grid-points", "101"]  # fmt: skip
    assert script.main(args) == 0
    out = capsys.readouterr().out
    assert "epoch 0: AIS" in out and "epoch 1: AIS" in out and "last evaluation's verdict" in out
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert [r["epoch"] for r in rows] == ["0", "1"] and all(r["exact"] and r["log_z_exact"] for r in rows)
    before = (tmp_path / "history.csv").read_bytes()
    with pytest.raises(SystemExit):  # the history exists: refused before any work
        script.main(args)
    assert "pass --overwrite to replace it (nothing was computed)" in capsys.readouterr().err
    assert (tmp_path / "history.csv").read_bytes() == before
