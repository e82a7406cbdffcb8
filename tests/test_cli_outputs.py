"""Issue 24, items 1-3 on the command line: an output path that is not a regular file is refused before any work
(exit 2, one line naming the option), never replaced; the null device is no output; a result that cannot be written
is kept in the temporary folder and said so in one line (exit 1), a failed resume save is warned of once and the
run goes on; nothing partial is left behind."""

import errno
import importlib
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from raise_eval.io import writing
import torch
from raise_eval.models import VAE, VAEConfig
from raise_eval.models.io.checkpoints import save_checkpoint

from raise_eval.cli import main

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
FAST = ["--steps", "30", "--ais-chains", "200", "--raise-examples", "20", "--raise-chains", "4", "--no-progress"]
BDMC_FAST = ["--examples", "2", "--chains", "2", "--steps", "5", "--pilot-chains", "2", "--no-progress"]


@pytest.fixture
def no_work(monkeypatch):
    """Fails a command that reaches an estimator (evaluate's stages, the certified run, bdmc)."""

    def refuse(*args, **kwargs):
        raise AssertionError("an estimator ran before the refusal")

    for module in ("raise_eval.evaluation.run", "raise_eval.certification.run", "raise_eval.cli.evaluate"):
        monkeypatch.setattr(importlib.import_module(module), "run_evaluation", refuse)
    monkeypatch.setattr(importlib.import_module("raise_eval.cli.bdmc"), "evaluate_bdmc", refuse)


@pytest.fixture(scope="module")
def vae_checkpoint(tmp_path_factory):
    torch.manual_seed(0)  # parameter initialization only
    path = tmp_path_factory.mktemp("vae") / "vae.pt"
    save_checkpoint(path, VAE(VAEConfig(data_dim=12, latent_dim=2, hidden=[8])))
    return path


def _hostile_paths(tmp_path) -> dict:
    os.mkfifo(tmp_path / "pipe")
    os.mkfifo(tmp_path / "pipe.png")
    (tmp_path / "loopA.png").symlink_to(tmp_path / "loopB.png")
    (tmp_path / "loopB.png").symlink_to(tmp_path / "loopA.png")
    return {
        "pipe": tmp_path / "pipe",
        "pipepng": tmp_path / "pipe.png",
        "loop": tmp_path / "loopA.png",
        "long": tmp_path / ("a" * 300 + ".json"),
    }


CASES = [
    (["evaluate", "--json", "{pipe}"], "--json {pipe} is a named pipe (FIFO)"),
    (["evaluate", "--resume-file", "{pipe}"], "--resume-file {pipe} is a named pipe (FIFO)"),
    (["evaluate", "--until-gap", "5", "--plot", "{pipepng}"], "--plot {pipepng} is a named pipe (FIFO)"),
    (["evaluate", "--json", "{loop}"], "--json {loop} is a symbolic link loop"),
    (["evaluate", "--resume-file", "{loop}"], "--resume-file {loop} is a symbolic link loop"),
    (["evaluate", "--until-gap", "5", "--plot", "{loop}"], "--plot {loop} is a symbolic link loop"),
    (["evaluate", "--json", "{long}"], "bytes per name; choose a shorter name"),
    (["evaluate", "--resume-file", "{long}"], "bytes per name; choose a shorter name"),
    (["bdmc", "--json", "{pipe}"], "--json {pipe} is a named pipe (FIFO)"),
    (["bdmc", "--json", "{loop}"], "--json {loop} is a symbolic link loop"),
    (["bdmc", "--plot", "{pipepng}"], "--plot {pipepng} is a named pipe (FIFO)"),
]


@pytest.mark.parametrize("args, message", CASES)
def test_paths_that_are_not_regular_files_are_refused_before_any_work(
    tmp_path, capsys, no_work, vae_checkpoint, args, message
):
    paths = {k: str(v) for k, v in _hostile_paths(tmp_path).items()}
    before = {p.name: (stat.S_IFMT(os.lstat(p).st_mode), os.lstat(p).st_ino) for p in tmp_path.iterdir()}
    command, *options = args
    checkpoint = str(DEFAULT if command == "evaluate" else vae_checkpoint)
    argv = [command, checkpoint, *(FAST if command == "evaluate" else BDMC_FAST), *[a.format(**paths) for a in options]]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert message.format(**paths) in err and "nothing was computed" in err and len(err.strip().splitlines()) == 1
    after = {p.name: (stat.S_IFMT(os.lstat(p).st_mode), os.lstat(p).st_ino) for p in tmp_path.iterdir()}
    assert after == before  # nothing replaced, nothing created


def test_a_null_device_as_json_is_no_output_and_is_left_a_device(tmp_path, capsys):
    """A device node of /dev/null's kind, made in tmp_path (a regression would replace it, not the machine's)."""
    null = tmp_path / "null.json"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.stat(os.devnull).st_rdev)
    except (PermissionError, OSError):
        pytest.skip("making a device node needs root")
    assert main(["evaluate", str(DEFAULT), *FAST, "--json", str(null)]) == 0
    out, err = capsys.readouterr()
    assert "AIS (optimistic)" in out and "wrote" not in out
    assert f"--json {null} is the null device: nothing will be written" in err
    assert stat.S_ISCHR(os.lstat(null).st_mode) and [p.name for p in tmp_path.iterdir()] == ["null.json"]


def _full_disk(monkeypatch, keep: Path):
    keep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(keep))
    calls = []

    def write_all(f, data):  # the file at the path fills the disk half-way; the copy kept elsewhere fits
        calls.append(1)
        if len(calls) == 1:
            f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        f.write(data)

    monkeypatch.setattr(writing, "_write_all", write_all)


@pytest.mark.parametrize("command", ["evaluate", "bdmc"])
def test_a_json_that_cannot_be_written_is_kept_and_said_in_one_line(
    tmp_path, capsys, monkeypatch, vae_checkpoint, command
):
    _full_disk(monkeypatch, tmp_path / "keep")
    out = tmp_path / "r.json"
    checkpoint, fast = (DEFAULT, FAST) if command == "evaluate" else (vae_checkpoint, BDMC_FAST)
    assert main([command, str(checkpoint), *fast, "--json", str(out)]) == 1
    stdout, err = capsys.readouterr()
    (kept,) = (tmp_path / "keep").iterdir()
    assert "total wall time" in stdout  # the table came first
    assert err.strip() == (
        f"raise-eval: error: could not write {out} (No space left on device [ENOSPC]); no file was left at {out}; "
        f"the JSON is kept in {kept}"
    )
    assert json.loads(kept.read_text())["tool"] == "raise-eval"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]  # no partial JSON, no temporary file


def test_a_failed_resume_save_is_warned_once_and_the_run_finishes(tmp_path, capsys, monkeypatch):
    def full_disk(obj, f, *args, **kwargs):  # torch.save on a full disk: part of a zip, then a RuntimeError
        with open(f, "wb") as out:
            out.write(b"PK\x03\x04")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1472 vs 1366")

    monkeypatch.setattr(torch, "save", full_disk)
    resume = tmp_path / "run.pt"
    assert main(["evaluate", str(DEFAULT), *FAST, "--resume-file", str(resume)]) == 0
    out, err = capsys.readouterr()
    assert "AIS (optimistic)" in out and "RAISE (conservative)" in out
    warned = [line for line in err.splitlines() if line.startswith("raise-eval: warning:")]
    assert len(warned) == 1 and f"could not write {resume}" in warned[0] and "The run goes on" in warned[0]
    assert list(tmp_path.iterdir()) == []  # no 0-byte or partial resume file, no temporary file


@pytest.mark.parametrize("option", ["--json", "--plot", "--resume-file"])
def test_a_dash_is_refused_not_written_as_a_file_named_dash(tmp_path, capsys, monkeypatch, option):
    """Issue 45: `--json -` wrote a file named '-' (the convention is standard output, which carries the table)."""
    monkeypatch.chdir(tmp_path)
    extra = ["--until-gap", "0.5"] if option == "--plot" else []
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", str(DEFAULT), *FAST, "--threads", "1", *extra, option, "-"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"{option} -: raise-eval writes its outputs to files, not to standard output" in err
    assert "./- for a file named '-'" in err and not (tmp_path / "-").exists()
