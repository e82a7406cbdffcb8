"""The DBN and DBM training scripts refuse, before reading any data, outputs that would cost someone their files and
settings that cannot train (a new user's findings: the committed checkpoints and the data itself were overwritten)."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import PROJECT_ROOT
from tests.scripts.test_reproduce_raise_tables import load_script


def _refused(capsys, script: str, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        load_script(script).main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("script", ["train_dbn", "train_dbm"])
def test_an_existing_checkpoint_needs_overwrite(script, tmp_path, capsys):
    out = tmp_path / "model.pt"
    shutil.copy(PROJECT_ROOT / "checkpoints" / "dbn_mnist_20-500.pt", out)
    before = out.read_bytes()
    err = _refused(capsys, script, ["--out", str(out), "--data-root", str(tmp_path / "nowhere")])
    assert f"--out {out} exists (" in err
    assert "; name another file, or pass --overwrite to replace it (nothing was computed)" in err
    assert out.read_bytes() == before


@pytest.mark.parametrize("script", ["train_dbn", "train_dbm"])
def test_a_data_file_is_never_an_output(script, tmp_path, capsys):
    data = tmp_path / "binarized_mnist" / "binarized_mnist_test.amat"
    data.parent.mkdir()
    data.write_text("0 1\n")
    err = _refused(capsys, script, ["--out", str(data), "--data-root", str(tmp_path), "--overwrite"])
    assert "is a binarized_mnist data file" in err and "an input of this run" in err
    assert data.read_text() == "0 1\n"


def test_the_monitors_files_need_overwrite_too(tmp_path, capsys):
    (tmp_path / "m_sandwich.csv").write_text("precious\n")
    err = _refused(capsys, "train_dbn", ["--out", str(tmp_path / "m.pt"), "--monitor-every", "1"])
    assert "_sandwich.csv exists (" in err and "or pass --overwrite to replace it" in err
    assert (tmp_path / "m_sandwich.csv").read_text() == "precious\n"


@pytest.mark.parametrize("script", ["train_dbn", "train_dbm"])
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epochs", "0"], "argument --epochs: must be a whole number of at least 1, got '0'"),
        (["--batch-size", "-1"], "argument --batch-size: must be a whole number of at least 1"),
        (["--learning-rate", "nan"], "argument --learning-rate: must be a finite number above 0, got 'nan'"),
        (["--gibbs-steps", "0"], "argument --gibbs-steps: must be a whole number of at least 1"),
        (["--train-size", "-5"], "argument --train-size: must be a whole number of at least 1"),
        (["--hidden", "20"], "--hidden: a DB"),
        (["--monitor-steps", "0"], "argument --monitor-steps: must be a whole number of at least 1"),
    ],
)
def test_settings_that_cannot_train_are_refused(script, argv, message, tmp_path, capsys):
    assert message in _refused(capsys, script, argv + ["--out", str(tmp_path / "m.pt")])


def test_a_folder_is_not_a_checkpoint(tmp_path, capsys):
    assert f"--out {tmp_path} is a folder; give a file name (nothing was computed)" in _refused(
        capsys, "train_dbn", ["--out", str(tmp_path)]
    )
