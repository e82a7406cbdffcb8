"""Output files: an input of the run, a duplicate, or a file raise-eval did not write is refused; raise-eval's own
files (marked JSON documents, marked plots, resume files) are recognized, and JSON is replaced atomically."""

import json
import os

import pytest
import torch

from raise_eval.io.outputs import Output, OutputError, check_outputs, plot_metadata, same_file, written_by_raise_eval
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

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", fail)
    with pytest.raises(OSError):
        dump_json({"value": 2}, str(out))
    assert out.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


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
