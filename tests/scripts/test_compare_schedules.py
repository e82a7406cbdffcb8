"""scripts/compare_schedules.py at toy scale: every schedule at every K, the equal-time runs, the numbers equal to a
direct `evaluate` run, the outputs written and redrawn from the JSON."""

from __future__ import annotations

import json

import pytest

from raise_eval import evaluate, load_checkpoint
from raise_eval.io.datasets import load_dataset
from tests.conftest import PROJECT_ROOT
from tests.scripts.test_reproduce_raise_tables import load_script

pytest.importorskip("matplotlib")
DIGITS = PROJECT_ROOT / "checkpoints" / "rbm_digits_64-16.pt"


def test_toy_comparison(tmp_path, capsys):
    script = load_script("compare_schedules")
    out = tmp_path / "out"
    args = ["--checkpoint", str(DIGITS), "--data", "digits", "--steps", "3", "8", "--ais-chains", "50"]
    args += ["--raise-examples", "5", "--raise-chains", "3", "--threads", "1", "--out", str(out)]
    script.main(args)
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == 10  # per K: adaptive, and each fixed schedule at equal K and at equal time
    for k in (3, 8):
        same_k = {r["schedule"]: r for r in rows if r["comparison"] == "equal K" and r["steps"] == k}
        assert set(same_k) == {"adaptive", "linear", "salakhutdinov"}
        assert same_k["adaptive"]["pilot_seconds"] > 0
        timed = [r for r in rows if r["comparison"] == f"equal time (adaptive K={k})"]
        assert sorted(r["schedule"] for r in timed) == ["linear", "salakhutdinov"]
        assert all(r["steps"] >= 1 for r in timed)
    assert (out / "table.md").exists() and (out / "gap_vs_time.png").stat().st_size > 0
    assert "| equal K | adaptive | 3 |" in capsys.readouterr().out

    # The linear row at K = 8 is a plain evaluate run with the same settings.
    ckpt = load_checkpoint(DIGITS)
    report = evaluate(
        ckpt.model,
        load_dataset("digits", "test"),
        train_pixel_means=ckpt.train_pixel_means,
        steps=8,
        ais_chains=50,
        raise_examples=5,
        raise_chains=3,
        exact="never",
    )
    row = next(r for r in rows if r["comparison"] == "equal K" and r["steps"] == 8 and r["schedule"] == "linear")
    assert (row["ais"], row["raise"], row["gap"]) == (report.ais_mean, report.raise_mean, report.gap)

    (out / "gap_vs_time.png").unlink()
    script.main(["--from-json", str(out / "results.json"), "--out", str(out)])
    assert (out / "gap_vs_time.png").stat().st_size > 0


def test_a_missing_checkpoint_is_named(tmp_path, capsys):
    script = load_script("compare_schedules")
    with pytest.raises(SystemExit) as stop:
        script.main(["--checkpoint", str(tmp_path / "nope.pt")])
    assert stop.value.code == 2 and "nope.pt does not exist" in capsys.readouterr().err
