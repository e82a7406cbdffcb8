"""--resume-file: an interrupted run continued from its file equals an uninterrupted run; other settings refused."""

import json
from pathlib import Path

import pytest
import torch
from raise_eval.models.io.checkpoints import load_checkpoint

from raise_eval import sharding
from raise_eval.cli import main
from raise_eval.datasets import load_dataset
from raise_eval.evaluate import EvaluationInterrupted, evaluate

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
RUN = dict(steps=20, ais_chains=40, raise_examples=10, raise_chains=4, exact="never", shard_size=10)


@pytest.fixture(scope="module")
def digits():
    ckpt = load_checkpoint(DEFAULT)
    return ckpt.model, load_dataset("digits", "test"), ckpt.train_pixel_means


def _interrupt_after(monkeypatch, name: str, calls: int) -> list:
    """Make sharding.<name> raise KeyboardInterrupt (as Ctrl-C would) on its call number `calls` + 1."""
    real, seen = getattr(sharding, name), []

    def counted(*args, **kwargs):
        if len(seen) == calls:
            raise KeyboardInterrupt
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sharding, name, counted)
    return seen


def _same(a, b) -> None:
    assert torch.equal(a.ais.log_weights, b.ais.log_weights)
    assert torch.equal(a.raise_.log_weights, b.raise_.log_weights)
    assert (a.ais_mean, a.raise_mean, a.raise_stderr) == (b.ais_mean, b.raise_mean, b.raise_stderr)


@pytest.mark.parametrize("stage, name, calls", [("AIS", "ais", 2), ("RAISE", "raise_log_likelihood", 1)])
def test_resumed_run_equals_uninterrupted(digits, tmp_path, monkeypatch, stage, name, calls):
    model, test, means = digits
    file = tmp_path / "run.pt"
    whole = evaluate(model, test, train_pixel_means=means, **RUN)
    with monkeypatch.context() as m:
        _interrupt_after(m, name, calls)
        with pytest.raises(EvaluationInterrupted) as stop:
            evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    assert stop.value.report.interrupted == stage
    kept = torch.load(file, weights_only=True)["shards"]
    assert len(kept[name.split("_")[0]]) == calls  # the shards that finished before Ctrl-C
    ran = _interrupt_after(monkeypatch, name, 10**6)  # count the shards run now
    resumed = evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    # 40 AIS chains in shards of 10; 10 RAISE vectors in shards of 10 // 4 = 2 vectors
    total = len(sharding.shard_bounds(40, 10)) if name == "ais" else len(sharding.shard_bounds(10, 2))
    assert len(ran) == total - calls  # finished shards were not run again
    _same(resumed, whole)
    again = evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))  # everything in the file
    _same(again, whole)


def test_other_settings_are_refused_by_name(digits, tmp_path):
    model, test, means = digits
    file = tmp_path / "run.pt"
    evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    with pytest.raises(ValueError, match=r"seed: 0 in the file, 1 now"):
        evaluate(model, test, train_pixel_means=means, **RUN, seed=1, resume_file=str(file))
    with pytest.raises(ValueError, match=r"start_biases: '\w+' in the file, '\w+' now"):
        evaluate(model, test, init="uniform", **RUN, resume_file=str(file))
    with pytest.raises(ValueError, match=r"shard_size: 10 in the file, 20 now"):
        evaluate(model, test, train_pixel_means=means, **{**RUN, "shard_size": 20}, resume_file=str(file))
    (tmp_path / "junk.pt").write_text("not a resume file")
    with pytest.raises(ValueError, match="is not a raise-eval resume file"):
        evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(tmp_path / "junk.pt"))


def test_cli_resume(tmp_path, capsys):
    file = tmp_path / "run.pt"
    args = ["evaluate", str(DEFAULT), "--steps", "20", "--ais-chains", "40", "--raise-examples", "10"]
    args += ["--raise-chains", "4", "--shard-size", "10", "--no-progress", "--resume-file", str(file)]
    assert main([*args, "--json", str(tmp_path / "one.json")]) == 0
    assert main([*args, "--json", str(tmp_path / "two.json")]) == 0  # every shard read back from the file
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    assert one["log_z"] == two["log_z"] and one["log_likelihood"] == two["log_likelihood"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main([*args, "--seed", "3"])
    assert stop.value.code == 2
    assert "seed: 0 in the file, 3 now" in capsys.readouterr().err
