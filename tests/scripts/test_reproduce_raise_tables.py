"""scripts/reproduce_raise_tables.py end to end at toy scale: tiny RBM, DBM and DBN checkpoints on the embedded
digits, a few annealing steps, every output written, the numbers equal to a direct `evaluate` run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest
import torch

from raise_eval import DBM, DBN, RBM, evaluate, save_checkpoint
from raise_eval.io.datasets import load_dataset
from tests.conftest import PROJECT_ROOT

pytest.importorskip("matplotlib")


def load_script(name: str):
    path = PROJECT_ROOT / "scripts" / f"{name}.py"
    sys.path.insert(0, str(path.parent))  # the scripts import their shared helpers as `_common`
    try:
        spec = importlib.util.spec_from_file_location(f"scripts_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


@pytest.fixture(scope="module")
def toy_spec(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    train = load_dataset("digits", "train")
    g = torch.Generator().manual_seed(0)
    models = {
        "toy RBM": (RBM.random(64, 8, weight_std=0.3, generator=g), 1),
        "toy DBM": (DBM.random([64, 6, 4], weight_std=0.3, generator=g), 2),
        "toy DBN": (DBN.random([64, 6, 4], weight_std=0.3, generator=g), 2),
    }
    spec = []
    for name, (model, table) in models.items():
        path = root / f"{name.replace(' ', '_')}.pt"
        save_checkpoint(path, model, train_pixel_means=train.mean(0))
        paper = {"uniform": [-30.0, -29.0], "base-rates": [-29.5, -29.4]}
        if name == "toy RBM":
            paper["exact"] = -29.2
        if name == "toy DBN":
            paper["base-rates"] = None  # as in the paper: no data-base-rate start for DBNs
        spec.append({"name": name, "table": table, "checkpoint": str(path), "dataset": "digits", "paper": paper})
    spec_path = root / "spec.json"
    spec_path.write_text(json.dumps(spec))
    return spec_path, models


ARGS = ["--steps", "2", "5", "--ais-chains", "4", "--raise-examples", "3", "--raise-chains", "2"]
ARGS += ["--log-f-samples", "4", "--no-progress", "--threads", "1"]


def test_end_to_end_at_toy_scale(toy_spec, tmp_path, capsys):
    spec_path, models = toy_spec
    script = load_script("reproduce_raise_tables")
    out = tmp_path / "out"
    script.main(["--spec", str(spec_path), "--out", str(out), *ARGS])
    doc = json.loads((out / "results.json").read_text())
    runs = doc["runs"]
    # RBM and DBM: 2 starts x 2 K; DBN: uniform only.
    assert sorted((r["name"], r["init"], r["steps"]) for r in runs) == sorted(
        [(n, i, k) for n in ("toy RBM", "toy DBM") for i in ("uniform", "base-rates") for k in (2, 5)]
        + [("toy DBN", "uniform", k) for k in (2, 5)]
    )
    rbm = [r for r in runs if r["name"] == "toy RBM"]
    assert all(r["exact"] is not None for r in rbm)  # 8 hidden units: enumerated
    for name in ("figure3_rbms.png", "figure_deep.png", "tables.md"):
        assert (out / name).stat().st_size > 0
    assert (out / "figure3_rbms.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "tables.md").read_text()
    assert "| toy RBM |" in table and "| toy DBM |" in table and "| toy DBN |" in table
    assert "(-30.00)" in table  # the paper's numbers beside ours
    assert "## The paper's findings, here" in table

    # The script's numbers are those of a direct evaluate run with the same settings and seed.
    model, _ = models["toy DBM"]
    test = load_dataset("digits", "test")
    report = evaluate(
        model,
        test,
        init="base-rates",
        train_pixel_means=load_dataset("digits", "train").mean(0),
        steps=5,
        ais_chains=4,
        raise_examples=3,
        raise_chains=2,
        log_f_samples=4,
        seed=0,
    )
    run = next(r for r in runs if r["name"] == "toy DBM" and r["init"] == "base-rates" and r["steps"] == 5)
    assert run["ais"] == report.ais_mean
    assert run["raise"] == report.raise_mean

    # A second run reuses the finished runs (same settings) and writes the same results.
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    script.main(["--spec", str(spec_path), "--out", str(out), *ARGS])
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == stamps
    assert json.loads((out / "results.json").read_text())["runs"] == runs


def test_unknown_model_name_is_refused(toy_spec, tmp_path, capsys):
    spec_path, _ = toy_spec
    script = load_script("reproduce_raise_tables")
    with pytest.raises(SystemExit):
        script.main(["--spec", str(spec_path), "--out", str(tmp_path), "--only", "no such model", *ARGS])
    assert "unknown model(s) ['no such model']" in capsys.readouterr().err


def test_missing_checkpoints_are_skipped_with_a_reason(tmp_path, capsys):
    spec = [{"name": "gone", "table": 1, "checkpoint": str(tmp_path / "gone.pt"), "dataset": "digits", "paper": {}}]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    script = load_script("reproduce_raise_tables")
    script.main(["--spec", str(tmp_path / "spec.json"), "--out", str(tmp_path / "out"), *ARGS])
    captured = capsys.readouterr()
    assert "skipping gone" in captured.out + captured.err


def test_default_output_is_a_scratch_folder_that_git_ignores():
    script = load_script("reproduce_raise_tables")
    assert script.DEFAULT_OUT == "runs/raise_tables"
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", script.DEFAULT_OUT + "/tables.md"], cwd=PROJECT_ROOT, capture_output=True
    )
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.returncode == 0, "runs/ must be in .gitignore: the default output must never show up as a change"


def test_committed_results_are_refused_before_any_work(toy_spec, tmp_path, capsys):
    """A folder whose outputs git tracks is refused (exit 2, nothing written) unless --overwrite-committed."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    spec_path, _ = toy_spec
    script = load_script("reproduce_raise_tables")
    out = tmp_path / "repo" / "tables"
    out.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=out.parent, check=True)
    (out / "tables.md").write_text("committed\n")
    (out / "figure3_rbms.png").write_text("committed\n")  # present but untracked: not reported
    subprocess.run(["git", "add", "tables.md"], cwd=out, check=True)
    assert script.committed_outputs(out) == ["tables.md"]
    with pytest.raises(SystemExit) as stop:
        script.main(["--spec", str(spec_path), "--out", str(out), *ARGS])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "holds committed results (tables.md)" in err and "--overwrite-committed" in err
    assert (out / "tables.md").read_text() == "committed\n" and not (out / "runs").exists()

    script.main(["--spec", str(spec_path), "--out", str(out), "--overwrite-committed", *ARGS])
    assert (out / "tables.md").read_text().startswith("# RAISE paper")


def test_the_projects_results_folder_counts_as_committed_without_git():
    script = load_script("reproduce_raise_tables")
    committed = script.committed_outputs(PROJECT_ROOT / "results" / "raise_tables")
    assert "tables.md" in committed and "results.json" in committed
