"""Output files: an input of the run, a duplicate, or a file raise-eval did not write is refused; raise-eval's own
files (marked JSON documents, marked plots, resume files) are recognized, and JSON is replaced atomically.

Issue 24: a path that is not a regular file (a pipe, a device, a socket, a folder, a link loop, a name too long) is
refused before any work, never replaced; the null device is no output; every write is whole or not at all, its
temporary name within NAME_MAX, and a failed one keeps the result in the temporary folder and says where."""

import errno
import json
import os
import signal
import socket
import stat
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from raise_eval.io import outputs
from raise_eval.settings import SettingsError
from raise_eval.io.outputs import (
    Output,
    OutputError,
    OutputWarning,
    OutputWriteError,
    check_output_path,
    check_outputs,
    is_null_device,
    plot_metadata,
    same_file,
    written_by_raise_eval,
)
from raise_eval.io import writing
from raise_eval.io.writing import save_figure, write_file
from raise_eval.io.results import dump_json


def test_same_file_sees_links_and_other_spellings(tmp_path):
    target = tmp_path / "model.pt"
    target.write_bytes(b"weights")
    (tmp_path / "soft.pt").symlink_to(target)
    os.link(target, tmp_path / "hard.pt")
    (tmp_path / "sub").mkdir()
    assert same_file(tmp_path / "soft.pt", target) and same_file(tmp_path / "hard.pt", target)
    assert same_file(tmp_path / "sub" / ".." / "model.pt", target)
    assert same_file(tmp_path / "new.json", tmp_path / "sub" / ".." / "new.json")  # neither exists
    assert not same_file(tmp_path / "new.json", target)


def test_an_input_is_never_an_output_even_with_overwrite(tmp_path):
    checkpoint = tmp_path / "mine.pt"
    checkpoint.write_bytes(b"weights")
    for kind, option in (("json", "--json"), ("plot", "--plot"), ("resume", "--resume-file")):
        with pytest.raises(OutputError) as e:
            check_outputs([Output(option, str(checkpoint), kind)], [("the checkpoint", checkpoint)], overwrite=True)
        assert f"{option} {checkpoint} is the checkpoint" in str(e.value) and "name another file" in str(e.value)
    assert checkpoint.read_bytes() == b"weights"


def test_two_outputs_on_one_file_are_refused(tmp_path):
    out = str(tmp_path / "r.json")
    with pytest.raises(OutputError, match="--json and --resume-file both name"):
        check_outputs([Output("--json", out, "json"), Output("--resume-file", out, "resume")])


def test_a_file_raise_eval_did_not_write_needs_overwrite(tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}')
    with pytest.raises(OutputError) as e:
        check_outputs([Output("--json", str(notes), "json")])
    message = str(e.value)
    assert f"--json {notes} exists and was not written by raise-eval" in message and "--overwrite" in message
    check_outputs([Output("--json", str(notes), "json")], overwrite=True)  # the user said so
    check_outputs([Output("--json", str(tmp_path / "absent.json"), "json")])  # nothing there: nothing lost


def test_a_foreign_resume_file_is_refused_even_with_overwrite(tmp_path):
    """The run reads its resume file back before replacing it: a foreign one is to be deleted, not overwritten."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(OutputError, match="is not a raise-eval resume file.*delete it"):
        check_outputs([Output("--resume-file", str(notes), "resume")], overwrite=True)


def test_raise_evals_json_is_marked_and_recognized(tmp_path):
    out = tmp_path / "r.json"
    dump_json({"settings": {}, "value": 1.0}, str(out))
    doc = json.loads(out.read_text())
    assert list(doc)[:2] == ["tool", "raise_eval_version"] and doc["tool"] == "raise-eval"
    assert written_by_raise_eval(out, "json")
    # A document of the version before the mark, recognized by its keys.
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"complete": True, "log_z": {}, "log_likelihood": {}, "settings": {}}))
    assert written_by_raise_eval(old, "json")
    for text in ('{"settings": {}}', "[1, 2]", "not json", ""):
        other = tmp_path / "other.json"
        other.write_text(text)
        assert not written_by_raise_eval(other, "json"), text


def test_a_failed_json_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    dump_json({"value": 1}, str(out))
    before = out.read_text()
    keep = tmp_path / "keep"
    keep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(keep))
    writes = []

    def full_disk(f, data):  # half of the first file, then a full disk; the copy kept elsewhere succeeds
        if not writes:
            writes.append(data)
            f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        f.write(data)

    monkeypatch.setattr(writing, "_write_all", full_disk)
    with pytest.raises(OutputWriteError) as e:
        dump_json({"value": 2}, str(out))
    assert out.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["keep", "r.json"]
    (kept,) = keep.iterdir()
    assert e.value.kept == str(kept) and json.loads(kept.read_text())["value"] == 2
    message = str(e.value)
    assert f"could not write {out}" in message and "ENOSPC" in message and "is unchanged" in message
    assert f"the JSON is kept in {kept}" in message and "\n" not in message


@pytest.mark.parametrize("suffix", [".png", ".pdf", ".svg", ".jpg"])
def test_plots_are_marked_and_recognized(tmp_path, suffix):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    ours, theirs = tmp_path / f"ours{suffix}", tmp_path / f"theirs{suffix}"
    fig.savefig(ours, **plot_metadata(ours))
    fig.savefig(theirs)
    plt.close(fig)
    assert written_by_raise_eval(ours, "plot") and not written_by_raise_eval(theirs, "plot")


def test_resume_files_are_recognized(tmp_path):
    from raise_eval.runtime.resume import ResumeFile

    resume = tmp_path / "run.pt"
    ResumeFile(resume, {"seed": 0}).write()
    assert written_by_raise_eval(resume, "resume")
    certified = tmp_path / "cert.json"  # a certified run's resume file (raise_eval.certify)
    certified.write_text(json.dumps({"format": 1, "fingerprint": {}, "history": []}))
    assert written_by_raise_eval(certified, "resume")
    checkpoint = tmp_path / "model.pt"
    torch.save({"W": torch.zeros(2, 2)}, checkpoint)
    assert not written_by_raise_eval(checkpoint, "resume")
    check_outputs([Output("--resume-file", str(resume), "resume")])  # continued, not refused


# ------------------------------------------------------------ issue 24: what a path may be


def _name_max(folder) -> int:
    return os.pathconf(folder, "PC_NAME_MAX")


def _not_regular_files(tmp_path):
    """{description: path} of the kinds of path no output may replace (those this machine lets a test make)."""
    made = {}
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    made["a named pipe (FIFO)"] = fifo
    (tmp_path / "folder.json").mkdir()
    made["is a folder"] = tmp_path / "folder.json"
    (tmp_path / "loopA").symlink_to(tmp_path / "loopB")
    (tmp_path / "loopB").symlink_to(tmp_path / "loopA")
    made["symbolic link loop (" + str(tmp_path / "loopA")] = tmp_path / "loopA"
    sock_path = tmp_path / "s.sock"
    if len(str(sock_path)) < 100:  # AF_UNIX paths are limited to about 107 bytes
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(sock_path))
        made["a socket"] = sock_path
    try:
        os.mknod(tmp_path / "zero.json", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
        made["a character device"] = tmp_path / "zero.json"
    except (PermissionError, OSError):
        pass  # not root: the pipe, folder and loop still stand for it
    return made


def test_a_path_that_is_not_a_regular_file_is_refused_and_left_as_it_was(tmp_path):
    for what, path in _not_regular_files(tmp_path).items():
        before = os.lstat(path)
        with pytest.raises(OutputError) as e:
            check_output_path(path, "--json")
        message = str(e.value)
        assert message.startswith(f"--json {path}") and what in message, message
        assert ("name a regular file" in message or "give a file name" in message or "remove the links" in message)
        assert "nothing was computed" in message and "\n" not in message
        with pytest.raises(OutputError, match="cannot write"):  # the writer refuses it too, never replaces it
            write_file(path, "{}")
        after = os.lstat(path)
        assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino), what


def test_names_longer_than_the_file_system_allows_are_refused_before_any_work(tmp_path):
    limit = _name_max(tmp_path)
    long = tmp_path / ("a" * (limit + 45) + ".json")
    with pytest.raises(OutputError) as e:
        check_output_path(long, "--resume-file")
    message = str(e.value)
    assert message.startswith("--resume-file ") and f"is {limit + 50} bytes long" in message
    assert f"at most {limit} bytes per name; choose a shorter name" in message and len(message) < 300
    with pytest.raises(OutputError, match="a file where a folder should be"):
        (tmp_path / "plain").write_text("x")
        check_output_path(tmp_path / "plain" / "r.json", "--json")


def test_a_legal_name_of_the_largest_size_is_written_and_its_temporary_name_fits(tmp_path):
    limit = _name_max(tmp_path)
    for name in ("b" * (limit - 5) + ".json", "é" * ((limit - 5) // 2) + ".json"):  # one-byte and two-byte letters
        path = tmp_path / name
        assert len(os.fsencode(path.name)) <= limit
        assert len(os.fsencode(outputs._temporary_name(path).name)) <= limit
        assert check_output_path(path, "--json")
        dump_json({"value": 1}, str(path))
        assert json.loads(path.read_text())["value"] == 1
    assert all(not p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary file left


def test_the_null_device_is_no_output(tmp_path):
    if not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        pytest.skip("no null device")
    before = os.stat(os.devnull)
    assert is_null_device(os.devnull) and not check_output_path(os.devnull, "--json")
    link = tmp_path / "null.json"
    link.symlink_to(os.devnull)
    assert not check_output_path(link, "--json")
    assert dump_json({"value": 1}, str(link)) is None and write_file(os.devnull, "x") is None
    check_outputs([Output("--json", os.devnull, "json"), Output("--resume-file", os.devnull, "resume")])
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and link.is_symlink()
    assert not is_null_device(tmp_path) and not is_null_device(tmp_path / "absent")


def test_check_outputs_checks_the_paths_themselves(tmp_path):
    fifo = tmp_path / "run.pt"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match=r"--resume-file .*run.pt is a named pipe"):
        check_outputs([Output("--resume-file", str(fifo), "resume")])
    assert not written_by_raise_eval(fifo, "resume")  # not opened (reading a pipe would block)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert not same_file(tmp_path / "loop", tmp_path / "r.json")  # no RuntimeError from a loop


# ------------------------------------------------------------ issue 24: a failed write loses nothing


def test_when_the_result_cannot_be_kept_either_the_error_carries_it(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "absent"))

    def full_disk(f, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writing, "_write_all", full_disk)
    out = tmp_path / "r.json"
    with pytest.raises(OutputWriteError) as e:
        dump_json({"value": 3}, str(out))
    assert e.value.kept is None and json.loads(e.value.text)["value"] == 3
    assert "keeping the JSON in the temporary folder failed too" in str(e.value)
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary file


def test_a_failed_figure_leaves_no_empty_file_and_is_kept(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    keep = tmp_path / "keep"
    keep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(keep))
    fig = Figure()
    fig.subplots().plot([0, 1], [1, 0])
    real = fig.savefig
    calls = []

    def savefig(path, **kwargs):  # the first write stops part-way on a full disk, as the 1 MB tmpfs did
        calls.append(path)
        if len(calls) == 1:
            with open(path, "wb") as f:
                f.write(b"\x89PNG")
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, **kwargs)

    monkeypatch.setattr(fig, "savefig", savefig)
    out = tmp_path / "r.png"
    with pytest.raises(OutputWriteError) as e:
        save_figure(fig, out)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
    kept = Path(e.value.kept)
    assert kept.parent == keep and kept.read_bytes().startswith(b"\x89PNG") and written_by_raise_eval(kept, "plot")
    assert "the plot is kept in" in str(e.value)
    save_figure(fig, out)  # with room again, the next run writes it; nothing there for it to refuse
    assert written_by_raise_eval(out, "plot")


def test_ctrl_c_during_a_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def interrupted(f, data):
        f.write(data[:3])
        raise KeyboardInterrupt

    monkeypatch.setattr(writing, "_write_all", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_file(tmp_path / "r.json", "{}")
    assert list(tmp_path.iterdir()) == []


def test_the_new_file_gets_the_mode_of_the_one_it_replaces(tmp_path):
    out = tmp_path / "r.json"
    dump_json({"value": 1}, str(out))
    for mode in (0o640, 0o444):  # a read-only file too: the mode is given after the content is written
        os.chmod(out, mode)
        dump_json({"value": mode}, str(out))
        assert stat.S_IMODE(os.stat(out).st_mode) == mode and json.loads(out.read_text())["value"] == mode


# ------------------------------------------------------------ issue 24: resume files


def test_a_resume_file_that_is_a_pipe_is_refused_without_blocking(tmp_path):
    from raise_eval.runtime.resume import ResumeFile

    fifo = tmp_path / "run.pt"
    os.mkfifo(fifo)
    signal.alarm(20)  # a regression would block in torch.load on the pipe
    try:
        with pytest.raises(SettingsError, match="resume_file .* is a named pipe"):
            ResumeFile(fifo, {"seed": 0})
    finally:
        signal.alarm(0)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_failed_resume_save_is_said_once_and_the_run_goes_on(tmp_path, monkeypatch):
    from raise_eval.runtime.resume import ResumeFile

    path = tmp_path / "run.pt"
    store = ResumeFile(path, {"seed": 0})
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):  # what torch.save raises on a full disk, after a partial write
        with open(f, "wb") as out:
            out.write(b"PK\x03\x04")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1472 vs 1366")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.warns(OutputWarning) as record:
        store.put("x", 1)
        store.put("y", 2)  # fails again: not said again
    assert len(record) == 1
    message = str(record[0].message)
    assert message.startswith(f"resume_file: could not write {path}") and "The run goes on" in message
    assert "nothing is saved in" in message and store.save_error is not None
    assert list(tmp_path.iterdir()) == []  # no partial resume file, no temporary file
    monkeypatch.setattr(torch, "save", real_save)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.put("z", 3)  # room again: saved, silently
    assert store.save_error is None and ResumeFile(path, {"seed": 0}).get("y") == 2


def test_a_protected_output_needs_overwrite_whoever_wrote_it(tmp_path):
    """The training scripts' checkpoints: even a file raise-eval wrote is replaced only with overwrite."""
    from raise_eval.io.outputs import Output, OutputError, check_outputs, written_by_raise_eval
    from raise_eval.io.results import dump_json

    ours = tmp_path / "r.json"
    dump_json({"a": 1}, ours)
    assert written_by_raise_eval(ours, "json") and not written_by_raise_eval(ours, "protected")
    with pytest.raises(OutputError, match=r"--out .*r\.json exists \(.*\); name another file, or pass --overwrite"):
        check_outputs([Output("--out", ours, "protected")])
    check_outputs([Output("--out", ours, "protected")], overwrite=True)
