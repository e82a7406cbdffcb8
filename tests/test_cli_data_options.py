"""`raise-eval evaluate`'s data options: --pixel-order reaches the data, and bad data options stop before any work."""

import json
from pathlib import Path

import numpy as np
import pytest
from raise_eval.models.io.checkpoints import load_checkpoint

from raise_eval.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
FAST = ["--steps", "30", "--ais-chains", "200", "--raise-examples", "20", "--raise-chains", "4", "--no-progress"]


def test_help_says_when_to_use_fortran():
    text = build_parser()._subparsers._group_actions[0].choices["evaluate"].format_help()
    for words in ["--pixel-order {row-major,fortran}", "omniglot", "Grosse & Salakhutdinov", "valid (binarized_mnist)"]:
        assert words in " ".join(text.split())


def test_pixel_order_reaches_the_test_and_training_data(tmp_path):
    # An .npz copy of the digits RBM has no train_pixel_means: the base rates come from the training split, loaded
    # in the same order. The RBM was trained row-major: its exact log-likelihood is lower on transposed images.
    rbm = load_checkpoint(DEFAULT).model
    npz = tmp_path / "rbm.npz"
    np.savez(npz, W=rbm.W.numpy(), vbias=rbm.vbias.numpy(), hbias=rbm.hbias.numpy())
    exact = {}
    for order in ("row-major", "fortran"):
        out = tmp_path / f"{order}.json"
        argv = ["evaluate", str(npz), "--data", "digits", "--pixel-order", order, *FAST, "--json", str(out)]
        assert main([*argv, "--threads", "1"]) == 0
        settings = json.loads(out.read_text())["settings"]
        assert settings["pixel_order"] == order and settings["base_rates_from"] == "the digits training split"
        exact[order] = json.loads(out.read_text())["log_likelihood"]["exact"]
    assert exact["fortran"] < exact["row-major"] - 1.0


@pytest.mark.parametrize(
    "options, message",
    [
        (["--data", "omniglot", "--split", "valid"], "--data omniglot: dataset 'omniglot' has splits train, test"),
        (["--data", "cifar"], "unknown dataset 'cifar'; named datasets are digits, mnist, mnist14, binarized_mnist"),
        (["--data", "test.npy", "--pixel-order", "fortran"], "the vectors of test.npy are used as stored"),
    ],
)
def test_bad_data_options_stop_before_the_checkpoint_is_read(capsys, options, message):
    with pytest.raises(SystemExit):
        main(["evaluate", "no-such-checkpoint.pt", *options, "--no-progress"])
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_bad_pixel_order_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", str(DEFAULT), "--pixel-order", "column-major"])
    assert "--pixel-order must be one of row-major, fortran, got 'column-major'" in capsys.readouterr().err


@pytest.mark.parametrize("dataset,fix", [("greal.npy", "to evaluate on that file, pass --data greal.npy"),
                                         ("my_own_data", "pass --data NAME or --data FILE")])  # fmt: skip
def test_a_checkpoints_metadata_never_names_a_file_to_read(tmp_path, capsys, monkeypatch, dataset, fix):
    """Issue 45, bug 5: metadata={'dataset': 'greal.npy'} made evaluate read that file from the working folder."""
    import torch
    from raise_eval.models import RBM
    from raise_eval.models.io.checkpoints import save_checkpoint

    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "greal.npy", np.zeros((4, 6), dtype=np.float32))
    save_checkpoint(tmp_path / "m.pt", RBM.random(6, 2, generator=torch.Generator().manual_seed(0)),
                    metadata={"dataset": dataset})  # fmt: skip
    opened = []
    real_load = np.load
    monkeypatch.setattr(np, "load", lambda f, *a, **k: opened.append(str(f)) or real_load(f, *a, **k))
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "m.pt"), "--init", "uniform", *FAST, "--threads", "1"])
    err = capsys.readouterr().err
    assert f"m.pt's metadata names the dataset {dataset!r}, which is not a dataset raise-eval knows" in err
    assert "never a file to read" in err and fix in err
    assert not any("greal" in f for f in opened)
