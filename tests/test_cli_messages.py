"""Issue 24, item 8: a refused checkpoint or data file is named as what it is, by the command line (exit 2, one
line naming the file and, where there is one, the key; before any estimator runs)."""

import importlib
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from raise_eval.models.io.checkpoints import load_checkpoint, save_npz

from raise_eval.cli import main
from raise_eval import evaluate

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
FAST = ["--steps", "30", "--ais-chains", "200", "--raise-examples", "20", "--raise-chains", "4", "--no-progress"]


@pytest.fixture
def no_estimator_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an estimator ran before the refusal")

    for module in ("raise_eval.evaluation.run", "raise_eval.certification.run", "raise_eval.cli.evaluate"):
        monkeypatch.setattr(importlib.import_module(module), "run_evaluation", refuse)


def _files(d: Path) -> None:
    ckpt = load_checkpoint(DEFAULT)
    m = ckpt.model
    W, b, c = m.W.numpy(), m.vbias.numpy(), m.hbias.numpy()
    np.savez(d / "complex.npz", W=W.astype(np.complex64) + 1j, vbias=b, hbias=c)
    payload = torch.load(DEFAULT, weights_only=True)
    payload["train_pixel_means"] = torch.full((64,), float("nan"))
    torch.save(payload, d / "nanmeans.pt")
    with open(d / "pickle.pt", "wb") as f:
        pickle.dump({"W": W, "vbias": b, "hbias": c}, f)
    save_npz(d / "m.npz", m)
    (d / "m.npz").rename(d / "npz.pt")
    x = np.load(ROOT / "raise_eval" / "data" / "digits.npz")["images"][:50].astype(np.uint8)
    np.save(d / "x.npy", x)
    data = (d / "x.npy").read_bytes()
    (d / "cut.npy").write_bytes(data[: len(data) // 2])
    (d / "zero.pt").symlink_to("/dev/zero")
    (d / "loopA.pt").symlink_to(d / "loopB.pt")
    (d / "loopB.pt").symlink_to(d / "loopA.pt")
    (d / "afile").write_text("x")
    shutil.copy(ROOT / "checkpoints" / "rbm_mnistCD1-20.pt", d / "mnist.pt")


CASES = [
    (["{d}/complex.npz", "--data", "digits"], "{d}/complex.npz: W has dtype torch.complex64; expected real numbers"),
    (["{d}/nanmeans.pt"], "{d}/nanmeans.pt: train_pixel_means have 64 NaN entries"),
    (["{d}/pickle.pt", "--data", "digits"], "{d}/pickle.pt is a plain Python pickle"),
    (["{d}/npz.pt", "--data", "digits"], "{d}/npz.pt is a NumPy .npz archive of"),
    ([str(DEFAULT), "--data", "{d}/cut.npy"], "{d}/cut.npy cannot be read: it is truncated or damaged"),
    (["{d}/zero.pt", "--data", "digits"], "checkpoint {d}/zero.pt is a symbolic link to /dev/zero, a character device"),
    (["{d}/loopA.pt", "--data", "digits"], "checkpoint {d}/loopA.pt is a symbolic link loop"),
    (["{d}/mnist.pt", "--data", "mnist", "--data-root", "{d}/afile"], "data root {d}/afile is a file, not a folder"),
]


@pytest.mark.parametrize("args, message", CASES)
def test_a_refused_file_is_named_as_what_it_is(tmp_path, capsys, no_estimator_runs, args, message):
    _files(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", *[a.format(d=tmp_path) for a in args], *FAST])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert message.format(d=tmp_path) in err and len(err.strip().splitlines()) == 1, err
    for wrong in ("base bias", "weights_only=False", "an empty file", "does not exist", "Traceback"):
        assert wrong not in err


def test_nan_training_means_given_to_evaluate_are_named(no_estimator_runs):
    ckpt = load_checkpoint(DEFAULT)
    test = torch.zeros(4, 64)
    with pytest.raises(ValueError, match=r"train_pixel_means must be 64 values in \[0, 1\]"):
        evaluate(ckpt.model, test, train_pixel_means=torch.full((64,), float("nan")), steps=10)


def test_braces_in_a_file_name_are_kept_in_the_message(tmp_path, capsys, no_estimator_runs):
    """A path's `{word}` is the user's text, not a setting's placeholder: the message names the file as given
    (a new user's run folders were called runs/{date}/...). A declared field in braces still renders as its flag."""
    out = tmp_path / "runs{run}" / "missing" / "x.json"
    with pytest.raises(SystemExit) as e:
        main(["evaluate", str(DEFAULT), "--data", "digits", "--json", str(out), *FAST])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--json {out}:" in err and "runs{run}" in err


def test_a_declared_field_in_braces_still_renders_as_its_name_or_flag():
    from raise_eval.settings import render_names

    assert render_names("{steps} and {no_such_word}") == "steps and {no_such_word}"
    assert render_names("{steps} and {no_such_word}", {"steps": "--steps"}) == "--steps and {no_such_word}"
