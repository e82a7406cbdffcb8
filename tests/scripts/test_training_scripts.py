"""The training scripts at toy scale on the shared data: a checkpoint with its training configuration and pixel
means, and the training-loop hook's sandwich over epochs (history, PNG, metadata), also when a budget stops early."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from raise_eval import load_checkpoint
from tests.scripts.test_reproduce_raise_tables import load_script

pytest.importorskip("matplotlib")

MONITOR = ["--monitor-every", "2", "--monitor-test-size", "40", "--monitor-steps", "5", "--monitor-ais-chains", "4"]
MONITOR += ["--monitor-raise-examples", "3", "--monitor-raise-chains", "2", "--no-progress", "--threads", "1"]


@pytest.mark.slow  # 37 s (two exact enumerations of a 784-20 RBM); the budget-cut test below runs the script and hook
def test_paper_rbm_script_with_the_hook(shared_data, tmp_path, capsys):
    script = load_script("train_rbm_paper")
    script.main(
        ["mnistCD1-20", "--epochs", "3", "--train-size", "300", "--data-root", str(shared_data)]
        + ["--out-dir", str(tmp_path), *MONITOR]
    )
    ckpt = load_checkpoint(tmp_path / "rbm_mnistCD1-20.pt")
    meta = ckpt.metadata
    assert meta["name"] == "mnistCD1-20" and meta["dataset"] == "binarized_mnist"
    assert meta["training"]["method"] == "cd" and meta["training"]["epochs"] == 3
    assert meta["training"]["train_size"] == 300 and meta["training_seconds"] > 0
    assert ckpt.train_pixel_means is not None and ckpt.train_pixel_means.shape == (784,)
    # every=2 from epoch 0: epochs 0 and 2, the last one being the final model's evaluation.
    history = meta["monitor_history"]
    assert [r["epoch"] for r in history] == [0, 2]
    assert all(r["exact"] is not None for r in history)  # 20 hidden units: enumerated
    rows = list(csv.DictReader(open(tmp_path / "rbm_mnistCD1-20_sandwich.csv")))
    assert [int(r["epoch"]) for r in rows] == [0, 2]
    assert float(rows[-1]["raise"]) == pytest.approx(history[-1]["raise"])
    assert (tmp_path / "rbm_mnistCD1-20_sandwich.png").read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    assert "[monitor] epoch 2 (from 0): test_ll/ais" in out and "test_ll/exact" in out


def test_a_budget_cut_still_evaluates_the_saved_model(shared_data, tmp_path):
    script = load_script("train_rbm_paper")
    # A budget of zero stops training after the first minibatch: epoch 0 is the last and is evaluated.
    script.main(
        ["mnistPCD-20", "--epochs", "5", "--train-size", "300", "--max-minutes", "0", "--data-root", str(shared_data)]
        + ["--out-dir", str(tmp_path), *MONITOR[:1], "3", *MONITOR[2:], "--monitor-exact", "never"]
    )
    history = load_checkpoint(tmp_path / "rbm_mnistPCD-20.pt").metadata["monitor_history"]
    assert [r["epoch"] for r in history] == [0]


def test_dbn_script_monitors_the_top_rbm_epochs(shared_data, tmp_path):
    script = load_script("train_dbn")
    out = tmp_path / "dbn.pt"
    script.main(
        ["--hidden", "8", "6", "--epochs", "2", "--train-size", "200", "--data-root", str(shared_data)]
        + ["--out", str(out), *MONITOR[:1], "1", *MONITOR[2:]]
    )
    ckpt = load_checkpoint(out)
    assert ckpt.metadata["dataset"] == "binarized_mnist" and ckpt.train_pixel_means.shape == (784,)
    assert [r["epoch"] for r in ckpt.metadata["monitor_history"]] == [0, 1]
    assert torch.isfinite(torch.tensor([r["raise"] for r in ckpt.metadata["monitor_history"]])).all()


def test_dbn_script_says_which_layers_the_budget_stopped(shared_data, tmp_path, capsys):
    """A tiny --max-minutes stops each layer after its first epoch: the output names the layers it stopped and the
    run's own time (the budget is split before training, so the run can end well inside it)."""
    script = load_script("train_dbn")
    out = tmp_path / "dbn.pt"
    script.main(
        ["--hidden", "8", "6", "--epochs", "3", "--train-size", "200", "--data-root", str(shared_data)]
        + ["--max-minutes", "0.00001", "--out", str(out), "--no-progress"]
    )
    printed = capsys.readouterr().out
    assert "1/3 epochs" in printed and "(stopped by its share of the wall-clock budget)" in printed
    assert "(split between the layers by their timed epochs) stopped layers 1 and 2 before their planned" in printed
    layers = load_checkpoint(out).metadata["training_report"]["layers"]
    assert [r["epochs_completed"] for r in layers] == [1, 1] and all(r["stopped_by_budget"] for r in layers)
    assert all(r["timed_epoch_seconds"] > 0 for r in layers)


@pytest.mark.parametrize("script_name", ["train_dbn", "train_dbm", "train_rbm_paper"])
@pytest.mark.parametrize("minutes", ["-1", "nan", "inf", "ten"])
def test_training_scripts_refuse_a_budget_that_is_not_a_duration(script_name, minutes, tmp_path, capsys):
    """Before any data is read: a negative, NaN or infinite --max-minutes trained one epoch per layer or none."""
    script = load_script(script_name)
    with pytest.raises(SystemExit) as refused:
        script.main(["--max-minutes", minutes, "--out", str(tmp_path / "x.pt")])
    assert refused.value.code == 2
    assert f"--max-minutes: must be a finite number of minutes, 0 or more, got {minutes!r}" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize("fraction", ["-0.1", "1.5", "nan", "half"])
def test_dbm_script_refuses_a_pretraining_share_outside_0_to_1(fraction, tmp_path, capsys):
    """Before any data is read, as the flag (the library names the field, pretrain_budget_fraction)."""
    script = load_script("train_dbm")
    with pytest.raises(SystemExit) as refused:
        script.main(["--pretrain-budget-fraction", fraction, "--out", str(tmp_path / "x.pt")])
    assert refused.value.code == 2
    assert f"--pretrain-budget-fraction: must be a number between 0 and 1, got {fraction!r}" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_dbm_script_certifiable_recipe(shared_data, tmp_path, capsys):
    """The recipe sets centering and the chains; an explicit option overrides it; the checkpoint records both."""
    script = load_script("train_dbm")
    out = tmp_path / "dbm.pt"
    script.main(
        ["--recipe", "certifiable", "--hidden", "6", "5", "--chains", "7", "--pretrain-epochs", "1", "--epochs", "1"]
        + ["--train-size", "200", "--data-root", str(shared_data), "--out", str(out), "--no-progress"]
    )
    training = load_checkpoint(out).metadata["training"]
    assert training["recipe"] == "certifiable" and training["centering"] is True
    assert training["num_chains"] == 7 and training["hidden"] == [6, 5]
    script.main(
        ["--recipe", "certifiable", "--no-centering", "--hidden", "6", "5", "--pretrain-epochs", "1", "--epochs", "1"]
        + ["--train-size", "200", "--data-root", str(shared_data), "--out", str(out), "--no-progress", "--overwrite"]
    )
    training = load_checkpoint(out).metadata["training"]
    assert training["centering"] is False and training["num_chains"] == 300


def test_paper_rbm_script_saves_its_trajectory_for_the_trajectory_command(shared_data, tmp_path, capsys):
    """--save-trajectory: step_<updates>.pt every N updates (the first and last too) and the manifest, which
    `raise-eval trajectory` reads in order, with the data named by the checkpoints' metadata."""
    import json

    from raise_eval.cli import main

    script = load_script("train_rbm_paper")
    folder = tmp_path / "run"
    script.main(
        ["mnistCD1-20", "--epochs", "2", "--train-size", "300", "--data-root", str(shared_data), "--threads", "1"]
        + ["--out-dir", str(tmp_path), "--no-progress", "--save-trajectory", str(folder), "--trajectory-every", "4"]
    )
    manifest = json.loads((folder / "trajectory.json").read_text())
    assert [c["step"] for c in manifest["checkpoints"]] == [0, 4, 6]  # 3 updates per epoch, 2 epochs
    assert load_checkpoint(folder / "step_0000004.pt").metadata["step"] == 4
    assert "saved 3 checkpoints of the trajectory" in capsys.readouterr().out
    code = main(["trajectory", str(folder), "--data-root", str(shared_data), "--test-subset", "50", "--steps", "3",
                 "--ais-chains", "20", "--raise-examples", "4", "--raise-chains", "2", "--bootstrap", "10",
                 "--exact", "never", "--no-progress", "--threads", "1"])  # fmt: skip
    table = capsys.readouterr().out
    assert code in (0, 3) and "3 checkpoints of a 784-20 RBM" in table and "binarized_mnist test" in table


def test_dbm_script_saves_the_joint_trainings_trajectory(shared_data, tmp_path):
    import json

    script = load_script("train_dbm")
    folder = tmp_path / "run"
    script.main(
        ["--hidden", "8", "6", "--pretrain-epochs", "1", "--epochs", "2", "--train-size", "200", "--threads", "1"]
        + ["--data-root", str(shared_data), "--out", str(tmp_path / "dbm.pt"), "--no-progress"]
        + ["--save-trajectory", str(folder), "--trajectory-every", "1"]
    )
    manifest = json.loads((folder / "trajectory.json").read_text())
    assert [c["step"] for c in manifest["checkpoints"]] == [0, 1, 2, 3, 4]  # 2 updates per joint epoch
    first, last = load_checkpoint(folder / "step_0000000.pt"), load_checkpoint(folder / "step_0000004.pt")
    final = load_checkpoint(tmp_path / "dbm.pt")
    assert first.model.layer_sizes == (784, 8, 6) and first.metadata["phase"] == "joint training"
    for a, b in zip(last.model.weights, final.model.weights):
        assert torch.equal(a, b)  # the last snapshot is the saved model


def test_typed_rbm_script_saves_its_trajectory_for_the_trajectory_command(shared_data, tmp_path, monkeypatch, capsys):
    """Issue 44: `train_units.py potts --save-trajectory DIR` (there was no such option), then `raise-eval trajectory
    DIR` through the Potts RBM's checkpoints, every one against its exact log Z."""
    import json

    import numpy as np

    from raise_eval.cli import main

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "scripts"))  # train_units imports unit_data
    script = load_script("train_units")
    config = script.MixedRBMTrainingConfig(n_hidden=4, epochs=1, method="cd", gibbs_steps=1)
    monkeypatch.setitem(script.KINDS["potts"], "config", config)
    folder = tmp_path / "run"
    script.main(
        ["potts", "--out", str(tmp_path / "potts.pt"), "--data-root", str(shared_data), "--no-progress"]
        + ["--save-trajectory", str(folder), "--trajectory-every", "40"]
    )
    manifest = json.loads((folder / "trajectory.json").read_text())
    assert [c["step"] for c in manifest["checkpoints"]] == [0, 40, 79]  # 7,984 sequences in batches of 100
    assert "saved 3 checkpoints of the trajectory" in capsys.readouterr().out
    last, final = load_checkpoint(folder / "step_0000079.pt"), load_checkpoint(tmp_path / "potts.pt")
    assert torch.equal(last.model.weights[0], final.model.weights[0])
    assert torch.allclose(last.train_pixel_means, final.train_pixel_means.to(last.train_pixel_means.dtype))
    test = script.load("potts", shared_data)[2][:50]
    np.save(tmp_path / "test.npy", test.reshape(50, 53, 21).argmax(-1).numpy())
    code = main(["trajectory", str(folder), "--data", str(tmp_path / "test.npy"), "--steps", "5", "--ais-chains", "200",
                 "--raise-examples", "4", "--raise-chains", "2", "--bootstrap", "10", "--exact", "always",
                 "--no-progress", "--threads", "1", "--json", str(tmp_path / "run.json")])  # fmt: skip
    assert code in (0, 3)
    checkpoints = json.loads((tmp_path / "run.json").read_text())["checkpoints"]
    assert [c["step"] for c in checkpoints] == [0, 40, 79]
    for c in checkpoints:
        assert abs(c["log_z"] - c["log_z_exact"]) < 4 * c["log_z_stderr"] + 0.05, c
