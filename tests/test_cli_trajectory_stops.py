"""`raise-eval trajectory DIR` on a folder with broken links, a manifest that lists a folder or is binary, and a run
stopped by Ctrl-C or SIGTERM part-way (a new user's findings, issue 45): each refused in one line naming the file,
and a stopped run keeps what finished, as evaluate and bdmc do."""

from __future__ import annotations

import json
import os

import pytest

import raise_eval.trajectory.run as trajectory_run
from raise_eval.cli import main
from raise_eval.io.trajectory_files import MANIFEST, list_trajectory, write_manifest
from tests.test_cli_trajectory import FAST, run_folder  # noqa: F401 - the fixture

needs_links = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links here")


def _refused(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@needs_links
def test_a_dangling_link_in_the_folder_is_refused_naming_it(run_folder, capsys):  # noqa: F811
    folder, data = run_folder
    link = folder / "rbm_step5000.pt"
    os.symlink(folder / "gone.pt", link)
    err = _refused(capsys, ["trajectory", str(folder), "--data", str(data), *FAST])
    assert f"{link} is a broken symbolic link" in err and "remove the link or point it at the checkpoint" in err


@needs_links
def test_a_looping_link_in_the_folder_is_refused_naming_it(run_folder, capsys):  # noqa: F811
    folder, _ = run_folder
    os.symlink(folder / "b_step7.pt", folder / "a_step6.pt")
    os.symlink(folder / "a_step6.pt", folder / "b_step7.pt")
    with pytest.raises(ValueError, match=r"a_step6.pt is a symbolic link loop \("):
        list_trajectory(folder)


@needs_links
def test_a_dangling_manifest_link_is_refused_not_ignored(run_folder):  # noqa: F811
    folder, _ = run_folder
    os.symlink(folder / "gone.json", folder / MANIFEST)
    with pytest.raises(ValueError, match=f"{MANIFEST} is a broken symbolic link"):
        list_trajectory(folder)


def test_a_manifest_entry_that_is_a_folder_is_called_a_folder(run_folder, capsys):  # noqa: F811
    folder, data = run_folder
    (folder / "sub.pt").mkdir()
    write_manifest(folder, [("rbm_step20.pt", 20), ("sub.pt", 300)])
    err = _refused(capsys, ["trajectory", str(folder), "--data", str(data), *FAST])
    assert f"checkpoint 1, {folder / 'sub.pt'}, is a folder" in err and "does not exist" not in err


def test_a_binary_manifest_is_refused_naming_it(run_folder, capsys):  # noqa: F811
    folder, data = run_folder
    (folder / MANIFEST).write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe" + bytes(range(256)))
    err = _refused(capsys, ["trajectory", str(folder), "--data", str(data), *FAST])
    assert f"{folder / MANIFEST} is not a JSON manifest: it is not UTF-8 text" in err
    assert "UnicodeDecodeError" not in err


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_during_the_ais_pass_keeps_the_settings_and_marks_the_json(run_folder, tmp_path, capsys, monkeypatch):  # noqa: F811
    folder, data = run_folder
    monkeypatch.setattr(trajectory_run, "ladder_pass", _interrupt)
    out = tmp_path / "t.json"
    code = main(["trajectory", str(folder), "--data", str(data), *FAST, "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 130
    assert "3 checkpoints of a 8-6 RBM" in captured.out
    assert "interrupted during the AIS pass along the trajectory: no estimate finished" in captured.out
    assert f"wrote {out} (marked incomplete" in captured.out
    assert "raise-eval: interrupted during the AIS pass along the trajectory" in captured.err
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "the AIS pass along the trajectory"
    assert doc["checkpoints"] == [] and doc["verdict"] == "open"


def test_ctrl_c_during_raise_keeps_every_checkpoints_log_z(run_folder, tmp_path, capsys, monkeypatch):  # noqa: F811
    folder, data = run_folder
    monkeypatch.setattr(trajectory_run, "raise_log_likelihood", _interrupt)
    out = tmp_path / "t.json"
    code = main(["trajectory", str(folder), "--data", str(data), *FAST, "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 130 and "raise-eval: interrupted during RAISE" in captured.err
    assert "the table holds the checkpoints whose estimates finished" in captured.out
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "RAISE"
    assert [c["step"] for c in doc["checkpoints"]] == [20, 300, 1000]
    assert all(c["log_z"] is not None and c["raise_mean"] is None for c in doc["checkpoints"])
    assert "raise_seconds" not in doc["timing"] and "ais_seconds" in doc["timing"]


def test_a_finished_run_is_marked_complete(run_folder, tmp_path, capsys):  # noqa: F811
    folder, data = run_folder
    out = tmp_path / "t.json"
    assert main(["trajectory", str(folder), "--data", str(data), *FAST, "--json", str(out)]) in (0, 3)
    doc = json.loads(out.read_text())
    assert doc["complete"] is True and doc["interrupted_during"] is None
