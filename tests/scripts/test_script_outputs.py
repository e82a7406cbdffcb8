"""Every script that writes a file goes through raise-eval's output checks and writer (a new user's finding: issue 45,
bug 7). Before any work each refuses an existing output without --overwrite, its own inputs, a folder, a named pipe
and a missing data root, in one line; and a write that fails (a full disk) leaves no file, empty or partial."""

from __future__ import annotations

import errno
import gzip
import os
import shutil

import pytest
import torch

import raise_eval.io.writing as writing
from raise_eval import RBM, load_checkpoint
from tests.conftest import PROJECT_ROOT
from tests.scripts.test_reproduce_raise_tables import load_script

CHECKPOINT = PROJECT_ROOT / "checkpoints" / "rbm_digits_64-16.pt"
AMAT_ROWS = {"train": 100, "test": 12}  # a whole batch of the VAE scripts


@pytest.fixture(autouse=True)
def scripts_on_path(monkeypatch):
    """As `python scripts/NAME.py` runs them: train_units imports unit_data."""
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "scripts"))


@pytest.fixture
def data_root(tmp_path):
    """A small data root with every file the scripts read: binarized MNIST, the MNIST idx files (present only), and a
    PF00014 alignment of 30 distinct sequences."""
    root = tmp_path / "data"
    g = torch.Generator().manual_seed(0)
    (root / "binarized_mnist").mkdir(parents=True)
    for split in ("train", "test"):
        rows = (torch.rand(AMAT_ROWS[split], 784, generator=g) < 0.3).int().tolist()
        text = "".join(" ".join(map(str, row)) + "\n" for row in rows)
        (root / "binarized_mnist" / f"binarized_mnist_{split}.amat").write_text(text)
    (root / "MNIST" / "raw").mkdir(parents=True)
    for name in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
        (root / "MNIST" / "raw" / name).write_bytes(b"")
    (root / "protein").mkdir()
    letters = "-ACDEFGHIKLMNPQRSTVWY"
    codes = torch.randint(0, 21, (30, 53), generator=g).tolist()
    fasta = "".join(f">s{i}\n{''.join(letters[c] for c in row)}\n" for i, row in enumerate(codes))
    with gzip.open(root / "protein" / "PF00014_mgap6.fasta.gz", "wt") as f:
        f.write(fasta)
    return root


# (script, its arguments before --out, the option that names the output)
SCRIPTS = [
    ("unit_data", ["pf00014"], "--out"),
    ("unit_data", ["mnist-continuous"], "--out"),
    ("train_rbm_digits", [], "--out"),
    ("train_units", ["potts"], "--out"),
    ("train_units", ["spin"], "--out"),
    ("train_vae_mnist", [], "--out"),
    ("train_vae_plain", [], "--out"),
]
IDS = [f"{script}-{'-'.join(args) or 'default'}" for script, args, _ in SCRIPTS]
# train_rbm_digits reads the embedded digits, no data root
DATA_ROOT_SCRIPTS = [s for s in SCRIPTS if s[0] != "train_rbm_digits"]
DATA_ROOT_IDS = [i for s, i in zip(SCRIPTS, IDS) if s[0] != "train_rbm_digits"]


def _argv(script, args, option, out, data_root):
    root = [] if script == "train_rbm_digits" else ["--data-root", str(data_root)]
    return [*args, option, str(out), *root]


def _refused(capsys, script: str, argv: list[str]) -> str:
    """The script's one-line refusal (exit 2, argparse's)."""
    module = load_script(script)
    with pytest.raises(SystemExit) as exit_:
        module.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and err.rstrip().endswith("(nothing was computed)")
    return err


@pytest.mark.parametrize("script, args, option", SCRIPTS, ids=IDS)
def test_an_existing_file_is_replaced_only_with_overwrite(script, args, option, data_root, tmp_path, capsys):
    out = tmp_path / ("digits.npy" if "mnist-continuous" in args else "digits.pt")
    shutil.copy(CHECKPOINT, out)
    err = _refused(capsys, script, _argv(script, args, option, out, data_root))
    assert f"{option} {out} exists (" in err and "pass --overwrite to replace it" in err
    assert out.read_bytes() == CHECKPOINT.read_bytes()


@pytest.mark.parametrize("script, args, option", SCRIPTS, ids=IDS)
def test_folders_and_named_pipes_are_refused_before_any_work(script, args, option, data_root, tmp_path, capsys):
    folder = tmp_path / "folder.npy"
    folder.mkdir()
    err = _refused(capsys, script, _argv(script, args, option, folder, data_root))
    assert f"{option} {folder} is a folder; give a file name" in err
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "pipe.npy"
        os.mkfifo(fifo)
        err = _refused(capsys, script, _argv(script, args, option, fifo, data_root))
        assert f"{option} {fifo} is a named pipe (FIFO)" in err


@pytest.mark.parametrize("script, args, option", DATA_ROOT_SCRIPTS, ids=DATA_ROOT_IDS)
def test_a_data_file_is_never_an_output(script, args, option, data_root, capsys):
    inputs = {
        "pf00014": data_root / "protein" / "PF00014_mgap6.fasta.gz",
        "potts": data_root / "protein" / "PF00014_mgap6.fasta.gz",
        "mnist-continuous": data_root / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz",
    }
    data = next((inputs[a] for a in args if a in inputs), data_root / "binarized_mnist" / "binarized_mnist_test.amat")
    before = data.read_bytes()
    err = _refused(capsys, script, [*_argv(script, args, option, data, data_root), "--overwrite"])
    assert "an input of this run: writing it would destroy it" in err
    assert data.read_bytes() == before


@pytest.mark.parametrize("script, args, option", DATA_ROOT_SCRIPTS, ids=DATA_ROOT_IDS)
def test_a_missing_data_root_is_refused_in_one_line(script, args, option, tmp_path, capsys):
    out = tmp_path / "out.npy"
    err = _refused(capsys, script, _argv(script, args, option, out, tmp_path / "nowhere"))
    assert "nowhere" in err and ("does not exist" in err or "not found" in err)
    assert not out.exists()


def test_a_missing_data_file_is_refused_in_one_line(data_root, tmp_path, capsys):
    (data_root / "protein" / "PF00014_mgap6.fasta.gz").unlink()
    err = _refused(capsys, "unit_data", ["pf00014", "--out", str(tmp_path / "x.fasta"), "--data-root", str(data_root)])
    assert "the PF00014 alignment" in err and "does not exist" in err and "--data-root" in err


def test_unit_data_writes_the_split(data_root, tmp_path, capsys):
    out = tmp_path / "test.fasta"
    load_script("unit_data").main(["pf00014", "--out", str(out), "--data-root", str(data_root)])
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.read_text().count(">pf00014_test_") == 3  # 10% of 30 distinct sequences


def _full_disk(monkeypatch, folder):
    """Make raise-eval's writer fail in `folder` as a full disk does, after part of the file was written (elsewhere,
    as in the temporary folder where a failed result is kept, it writes)."""
    write = writing._write_content

    def write_part_then_fail(path, content):
        if os.path.dirname(os.path.abspath(path)) != str(folder):
            return write(path, content)
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writing, "_write_content", write_part_then_fail)


def _tiny_rbm(*args, **kwargs):
    return RBM(torch.zeros(64, 16), torch.zeros(64), torch.zeros(16))


def _run_on_a_full_disk(module, argv, out, monkeypatch, capsys) -> str:
    _full_disk(monkeypatch, out.parent)
    with pytest.raises(SystemExit) as exit_:
        module.main(argv)
    message = str(exit_.value.code)
    assert message.startswith("error: could not write ") and "[ENOSPC]" in message and "\n" not in message
    assert not out.exists()
    assert os.listdir(out.parent) == [], "a temporary file was left behind"
    return message


def test_unit_data_leaves_nothing_on_a_full_disk(data_root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out" / "test.fasta"
    out.parent.mkdir()
    module = load_script("unit_data")
    message = _run_on_a_full_disk(module, ["pf00014", "--out", str(out), "--data-root", str(data_root)], out,
                                  monkeypatch, capsys)  # fmt: skip
    assert f"no file was left at {out}" in message


def test_train_rbm_digits_leaves_nothing_on_a_full_disk(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out" / "model.pt"
    out.parent.mkdir()
    module = load_script("train_rbm_digits")
    monkeypatch.setattr(module, "train_rbm", _tiny_rbm)
    message = _run_on_a_full_disk(module, ["--out", str(out)], out, monkeypatch, capsys)
    kept = message.split("is kept in ")[1]  # the trained model is not lost
    try:
        assert load_checkpoint(kept).model.n_hidden == 16
    finally:
        os.remove(kept)


def test_train_rbm_paper_checks_every_output_before_training(data_root, tmp_path, capsys):
    (tmp_path / "rbm_mnistPCD-20.pt").write_bytes(CHECKPOINT.read_bytes())
    argv = ["mnistCD1-20", "mnistPCD-20", "--out-dir", str(tmp_path), "--data-root", str(data_root)]
    err = _refused(capsys, "train_rbm_paper", argv)
    assert f"--out-dir {tmp_path / 'rbm_mnistPCD-20.pt'} exists (" in err
    assert not (tmp_path / "rbm_mnistCD1-20.pt").exists()
    assert "does not exist" in _refused(capsys, "train_rbm_paper", [*argv[:4], "--data-root", str(tmp_path / "no")])


def test_train_vae_plain_leaves_nothing_on_a_full_disk(data_root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out" / "vae.pt"
    out.parent.mkdir()
    module = load_script("train_vae_plain")
    argv = ["--epochs", "1", "--out", str(out), "--data-root", str(data_root)]
    message = _run_on_a_full_disk(module, argv, out, monkeypatch, capsys)
    os.remove(message.split("is kept in ")[1])  # the trained model, kept in the temporary folder


def _rbm_784(*args, **kwargs):
    return RBM(torch.zeros(784, 4), torch.zeros(784), torch.zeros(4))


@pytest.mark.parametrize(
    "script, argv",
    [
        ("train_rbm_paper", ["mnistCD1-20", "--no-progress"]),
        ("train_units", ["potts", "--epochs", "1", "--no-progress"]),
        ("train_vae_mnist", ["--epochs", "1"]),
    ],
)
def test_training_scripts_leave_nothing_on_a_full_disk(script, argv, data_root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out" / "rbm_mnistCD1-20.pt"
    out.parent.mkdir()
    module = load_script(script)
    if script == "train_rbm_paper":
        monkeypatch.setattr(module, "train_rbm", _rbm_784)
        argv = [*argv, "--out-dir", str(out.parent)]
    else:
        argv = [*argv, "--out", str(out)]
    if script == "train_units":  # a small model: its exact log Z at once
        config = module.MixedRBMTrainingConfig(n_hidden=4, epochs=1, method="cd", gibbs_steps=1)
        monkeypatch.setitem(module.KINDS["potts"], "config", config)
    message = _run_on_a_full_disk(module, [*argv, "--data-root", str(data_root)], out, monkeypatch, capsys)
    kept = message.split("is kept in ")[1]
    try:
        load_checkpoint(kept)  # the trained model was kept
    finally:
        os.remove(kept)


# The benchmarks' JSON files: (script, its arguments before the option, the option)
JSON_SCRIPTS = [
    ("benchmark_cost_estimate", [], "--json"),
    ("benchmark_trajectory_monitor", [], "--out"),
    ("compare_dbn_starts", [str(PROJECT_ROOT / "checkpoints" / "dbn_mnist_20-500.pt")], "--json"),
    ("measure_log_f", [str(PROJECT_ROOT / "checkpoints" / "dbn_mnist_20-500.pt")], "--json"),
]


@pytest.mark.parametrize("script, args, option", JSON_SCRIPTS, ids=[s[0] for s in JSON_SCRIPTS])
def test_the_benchmarks_check_their_json_file_first(script, args, option, tmp_path, capsys):
    existing = tmp_path / "notes.json"
    existing.write_text("precious\n")
    err = _refused(capsys, script, [*args, option, str(existing)])
    assert f"{option} {existing} exists (" in err and "pass --overwrite to replace it" in err
    assert existing.read_text() == "precious\n"
    assert f"{option} {tmp_path} is a folder" in _refused(capsys, script, [*args, option, str(tmp_path)])
    if args:
        err = _refused(capsys, script, [*args, option, args[0], "--overwrite"])
        assert "is the checkpoint" in err and "an input of this run" in err


def test_an_empty_name_or_a_file_for_a_folder_is_refused_first(data_root, tmp_path, capsys):
    argv = ["pf00014", "--data-root", str(data_root), "--out"]
    assert "--out is empty; name a file" in _refused(capsys, "unit_data", [*argv, ""])
    (tmp_path / "afile").write_text("x")
    err = _refused(capsys, "unit_data", [*argv, str(tmp_path / "afile" / "x.fasta")])
    assert f"{tmp_path / 'afile'} is a file, or lies under one, not a folder" in err


def test_the_comparison_scripts_check_their_folders_files_first(tmp_path, capsys):
    """compare_schedules and compare_trajectory write several files into --out: each is checked before any work."""
    (tmp_path / "table.md").write_text("notes of mine\n")
    argv = ["--checkpoint", str(CHECKPOINT), "--data", "digits", "--out", str(tmp_path)]
    err = _refused(capsys, "compare_schedules", argv)
    assert f"--out {tmp_path / 'table.md'} exists (" in err and "pass --overwrite" in err
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(CHECKPOINT, run / "step_0000001.pt")
    err = _refused(capsys, "compare_trajectory", [str(run), "--out", str(tmp_path)])
    assert f"--out {tmp_path / 'table.md'} exists (" in err
    (tmp_path / "table.md").unlink()
    (run / "table.md").mkdir()
    err = _refused(capsys, "compare_trajectory", [str(run), "--out", str(run)])
    assert f"--out {run / 'table.md'} is a folder" in err
    assert (tmp_path / "table.md").exists() is False


def test_reproduce_raise_tables_leaves_no_temporary_file_on_a_full_disk(tmp_path, monkeypatch):
    """Its results and cached runs were written through a '.tmp' file of its own, left behind by a failed write."""
    out = tmp_path / "runs" / "result.json"
    out.parent.mkdir()
    _full_disk(monkeypatch, out.parent)
    with pytest.raises(SystemExit) as exit_:
        load_script("reproduce_raise_tables").write_atomic(out, '{"x": 1}')
    assert str(exit_.value.code).startswith(f"error: could not write {out} (")
    assert os.listdir(out.parent) == []


def test_a_trajectory_manifest_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from raise_eval.io.outputs import OutputWriteError
    from raise_eval.io.trajectory_files import write_manifest

    _full_disk(monkeypatch, tmp_path)
    with pytest.raises(OutputWriteError, match=r"could not write .*trajectory.json .*\[ENOSPC\]"):
        write_manifest(tmp_path, [("step_0000000.pt", 0)])
    assert os.listdir(tmp_path) == []


def test_save_trajectory_in_a_file_is_one_line(tmp_path):
    import _common

    (tmp_path / "afile").write_text("x")
    with pytest.raises(SystemExit, match="error: --save-trajectory .*afile/run: cannot create the folder"):
        _common.TrajectorySaver(tmp_path / "afile" / "run", {}, None)
