"""`raise-eval evaluate`: the table, the JSON keys, reproducibility and clear errors."""

import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from raise_eval.models import RBM
from raise_eval.models.io.checkpoints import save_checkpoint

from raise_eval.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
FAST = ["--steps", "30", "--ais-chains", "200", "--raise-examples", "20", "--raise-chains", "4", "--no-progress"]


def _get(d, dotted):
    for key in dotted.split("."):
        d = d[key]
    return d


def test_help_documents_every_option():
    text = build_parser()._subparsers._group_actions[0].choices["evaluate"].format_help()
    for option in [
        "--data",
        "--split",
        "--data-root",
        "--train-data",
        "--init",
        "--schedule",
        "--steps",
        "--ais-chains",
        "--raise-examples",
        "--raise-chains",
        "--device",
        "--dtype",
        "--seed",
        "--exact",
        "--json",
        "--no-progress",
    ]:
        assert option in text


def test_embedded_default_table_and_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["evaluate", str(DEFAULT), *FAST, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    for row in ["AIS (optimistic)", "RAISE (conservative)", "gap (AIS - RAISE)", "exact", "log Z"]:
        assert row in table
    doc = json.loads(out.read_text())
    for key in [
        "log_z.ais.estimate",
        "log_z.ais.stderr",
        "log_z.exact",
        "log_likelihood.ais.mean",
        "log_likelihood.raise.mean",
        "log_likelihood.raise.stderr",
        "log_likelihood.exact",
        "log_likelihood.gap",
        "settings",
        "timing.seconds",
    ]:
        _get(doc, key)
    assert doc["settings"]["data"] == "digits" and doc["settings"]["steps"] == 30
    assert math.isclose(
        doc["log_likelihood"]["gap"], doc["log_likelihood"]["ais"]["mean"] - doc["log_likelihood"]["raise"]["mean"]
    )
    assert abs(doc["log_z"]["ais"]["estimate"] - doc["log_z"]["exact"]) < 1.0


def test_same_seed_same_numbers(tmp_path):
    docs = []
    for name in ("a", "b"):
        main(["evaluate", str(DEFAULT), *FAST, "--seed", "7", "--json", str(tmp_path / name)])
        doc = json.loads((tmp_path / name).read_text())
        docs.append((doc["log_z"], doc["log_likelihood"]))
    assert docs[0] == docs[1]


def test_large_models_report_null_exact_values(tmp_path):
    path = tmp_path / "big.pt"
    save_checkpoint(path, RBM.random(30, 30, weight_std=0.1, generator=torch.Generator().manual_seed(0)))
    data = tmp_path / "d.npy"
    np.save(data, (np.random.default_rng(0).random((10, 30)) < 0.5).astype(np.uint8))
    out = tmp_path / "r.json"
    main(["evaluate", str(path), "--data", str(data), "--init", "uniform", *FAST, "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["log_z"]["exact"] is None and doc["log_likelihood"]["exact"] is None
    assert doc["settings"]["split"] == "file"


def _error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_clear_errors(tmp_path, capsys):
    nonbinary = tmp_path / "x.npy"
    np.save(nonbinary, np.full((4, 64), 0.5, dtype=np.float32))
    assert "must be binary" in _error(capsys, ["evaluate", str(DEFAULT), "--data", str(nonbinary), *FAST])
    wrong = tmp_path / "w.npy"
    np.save(wrong, np.zeros((4, 10), dtype=np.uint8))
    assert "64 visible units but test data has 10 columns" in _error(
        capsys, ["evaluate", str(DEFAULT), "--data", str(wrong), *FAST]
    )
    nodata = tmp_path / "plain.pt"
    save_checkpoint(nodata, RBM.random(64, 4, generator=torch.Generator().manual_seed(0)))
    assert "pass --data" in _error(capsys, ["evaluate", str(nodata), *FAST])
    ok = tmp_path / "ok.npy"
    np.save(ok, np.zeros((4, 64), dtype=np.uint8))
    assert "--train-data" in _error(capsys, ["evaluate", str(nodata), "--data", str(ok), *FAST])
    extra = tmp_path / "extra.npz"
    np.savez(extra, W=np.zeros((64, 4)), vbias=np.zeros(64), hbias=np.zeros(4), momentum=np.zeros(4))
    assert main(["evaluate", str(extra), "--data", "digits", *FAST]) == 0
    assert "note: ignored variables of the checkpoint: momentum" in capsys.readouterr().out
    nan = tmp_path / "nan.npz"
    np.savez(nan, W=np.full((64, 4), np.nan), vbias=np.zeros(64), hbias=np.zeros(4))
    assert "NaN" in _error(capsys, ["evaluate", str(nan), "--data", "digits", *FAST])


def test_exact_always_refuses_hopeless_enumerations(tmp_path, capsys):
    path = tmp_path / "wide.pt"
    save_checkpoint(path, RBM.random(40, 40, weight_std=0.01, generator=torch.Generator().manual_seed(0)))
    data = tmp_path / "d.npy"
    np.save(data, np.zeros((3, 40), dtype=np.uint8))
    err = _error(capsys, ["evaluate", str(path), "--data", str(data), "--init", "uniform", "--exact", "always", *FAST])
    assert "2^40 states is out of reach" in err


def test_bad_step_count_is_an_error(capsys):
    assert "--steps must be an integer of at least 1, got 0" in _error(capsys, ["evaluate", str(DEFAULT), *FAST, "--steps", "0"])


def test_file_data_with_training_data(tmp_path, capsys):
    from raise_eval.io.datasets import load_dataset

    test, train = tmp_path / "test.npy", tmp_path / "train.npz"
    np.save(test, load_dataset("digits", "test").numpy()[:50])
    np.savez(train, data=load_dataset("digits", "train").numpy())
    assert main(["evaluate", str(DEFAULT), "--data", str(test), "--train-data", str(train), *FAST]) == 0
    assert "50 vectors" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised where CUDA is absent")
def test_cuda_request_without_cuda(capsys):
    assert "cuda" in _error(capsys, ["evaluate", str(DEFAULT), *FAST, "--device", "cuda"])


def test_console_script_is_installed():
    exe = shutil.which("raise-eval")
    if exe is None:
        pytest.skip("the raise-eval console script is not on PATH (install the package: pip install -e .)")
    result = subprocess.run([exe, "evaluate", "--help"], capture_output=True, text=True, check=True)
    assert "RAISE" in result.stdout


def test_ctrl_c_during_raise_keeps_the_ais_result(tmp_path, ctrl_c_raises):
    """SIGINT while RAISE runs: exit 130, no traceback, the AIS rows printed and a JSON marked incomplete."""
    import signal
    import sys
    import time

    out = tmp_path / "partial.json"
    cmd = [sys.executable, "-m", "raise_eval.cli", "evaluate", str(DEFAULT), "--steps", "3000", "--ais-chains", "50"]
    cmd += ["--raise-examples", "360", "--raise-chains", "500", "--json", str(out), "--threads", "1"]
    import threading

    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    chars: list = []
    reader = threading.Thread(target=lambda: chars.extend(iter(lambda: proc.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.time() + 120
    # "RAISE:" is its progress bar (the cost estimate printed before the run names RAISE too)
    while "RAISE:" not in "".join(chars) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert "RAISE:" in "".join(chars), f"RAISE never started: {''.join(chars)}"
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    stdout = proc.stdout.read()
    reader.join(timeout=10)
    stderr = "".join(chars)
    assert proc.returncode == 130
    assert "Traceback" not in stderr and "interrupted during RAISE" in stderr
    assert "AIS (optimistic)" in stdout and "(not run)" in stdout and "marked incomplete" in stdout
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "RAISE"
    assert doc["log_z"]["ais"]["estimate"] is not None and doc["log_likelihood"]["raise"] is None


def test_output_path_is_checked_before_any_work(tmp_path, capsys):
    import time

    start = time.perf_counter()
    with pytest.raises(SystemExit) as e:
        main(["evaluate", str(DEFAULT), "--json", str(tmp_path / "missing" / "r.json"), "--no-progress"])
    assert e.value.code == 2 and time.perf_counter() - start < 5
    assert "the folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ais-chains", "1"], "--ais-chains must be an integer of at least 2 (a standard error needs two), got 1"),
        (["--raise-examples", "1"], "--raise-examples must be an integer of at least 2"),
        (["--device", "meta"], "raise-eval runs on cpu or cuda, not meta"),
        (["--cv-alpha", "nan"], "--cv-alpha must be a finite number or 'optimal', got nan"),
        (["--raise-chains", "-1"], "--raise-chains must be an integer of at least 1, got -1"),
        (["--device", "foo"], "--device 'foo' is not a torch device"),
        (["--threads", "0"], "--threads must be 'auto' or a positive integer"),
    ],
)
def test_errors_name_the_option(args, message, capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", str(DEFAULT), *args, "--no-progress"])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.pt", b"", "is an empty file (0 bytes); expected a file written by torch.save"),
        ("text.npz", b"W,vbias\n1,2\n", "is a text file of 12 bytes starting 'W,vbias'; expected a NumPy .npz"),
        ("cut.pt", None, "truncated or corrupt; expected a file written by torch.save"),
    ],
)
def test_bad_checkpoint_files_get_one_line(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_bytes(DEFAULT.read_bytes()[:3000] if content is None else content)
    with pytest.raises(SystemExit):
        main(["evaluate", str(path), "--no-progress"])
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_folder_or_a_pickled_module_is_not_a_checkpoint(tmp_path, capsys):
    folder = tmp_path / "model.pt"
    folder.mkdir()
    with pytest.raises(SystemExit):
        main(["evaluate", str(folder), "--no-progress"])
    assert "is a folder; give the checkpoint file" in capsys.readouterr().err
    pickled = tmp_path / "module.pt"
    torch.save(torch.nn.Linear(2, 2), pickled)
    with pytest.raises(SystemExit):
        main(["evaluate", str(pickled), "--no-progress"])
    err = capsys.readouterr().err
    assert "it pickles a torch.nn.modules.linear.Linear object" in err and len(err.strip().splitlines()) == 1


def test_base_rate_source_and_torch_version_are_recorded(tmp_path):
    out = tmp_path / "r.json"
    assert main(["evaluate", str(DEFAULT), *FAST, "--json", str(out)]) == 0
    settings = json.loads(out.read_text())["settings"]
    assert settings["base_rates_from"] == "the checkpoint's train_pixel_means"
    assert settings["torch"] == torch.__version__


def test_text_file_as_npy_data(tmp_path, capsys):
    path = tmp_path / "test.npy"
    path.write_text("0 1 0 1\n")
    with pytest.raises(SystemExit):
        main(["evaluate", str(DEFAULT), "--data", str(path), "--no-progress"])
    assert "is a text file of 8 bytes starting '0 1 0 1'; expected a NumPy .npy file" in capsys.readouterr().err


def test_threads_are_recorded(tmp_path):
    out = tmp_path / "r.json"
    assert main(["evaluate", str(DEFAULT), *FAST, "--threads", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["settings"]["threads"] == 1


def test_a_folder_that_cannot_be_written_is_refused_before_work(tmp_path, monkeypatch, capsys):
    """Where os.access says yes but writing fails (e.g. /proc, a read-only mount seen by root), a probe file finds
    out before any work, for --json and --resume-file alike."""
    import raise_eval.io.outputs as outputs

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(outputs, "_create_temporary", refuse)  # the probe creates the write's temporary file
    for option in ("--json", "--resume-file"):
        with pytest.raises(SystemExit) as stop:
            main(["evaluate", str(DEFAULT), option, str(tmp_path / "out")])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"{option} {tmp_path / 'out'}: cannot write in the folder {tmp_path} (Permission denied [EACCES])" in err


def test_resume_interval_needs_a_resume_file(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", str(DEFAULT), "--resume-interval", "5"])
    assert stop.value.code == 2 and "give --resume-file too" in capsys.readouterr().err


# ------------------------------------------------------------ issue 17: no lost work, and the small things
@pytest.fixture
def no_estimator_runs(monkeypatch):
    """Fails a command that reaches an estimator: a refusal must come before any work (the evaluation's stages and
    the certified run both go through run_evaluation)."""
    import importlib

    def refuse(*args, **kwargs):
        raise AssertionError("an estimator ran before the refusal")

    monkeypatch.setattr(importlib.import_module("raise_eval.evaluation.run"), "run_evaluation", refuse)
    monkeypatch.setattr(importlib.import_module("raise_eval.certification.run"), "run_evaluation", refuse)
    monkeypatch.setattr(importlib.import_module("raise_eval.cli.evaluate"), "run_evaluation", refuse)  # its own name


def _lost_work_files(tmp_path):
    ckpt, data, train = tmp_path / "mine.pt", tmp_path / "test.npy", tmp_path / "train.npy"
    shutil.copy(DEFAULT, ckpt)
    digits = np.load(ROOT / "raise_eval" / "data" / "digits.npz")
    np.save(data, digits["images"][:20].astype(np.uint8))
    np.save(train, digits["images"][20:60].astype(np.uint8))
    (tmp_path / "notes.json").write_text("my notes\n")
    (tmp_path / "r.png").write_text("my figure\n")
    return ckpt


@pytest.mark.parametrize(
    "args, message",
    [
        (["--json", "{d}/mine.pt"], "--json {d}/mine.pt is the checkpoint"),
        (["--json", "{d}/./link.pt"], "--json {d}/./link.pt is the checkpoint"),  # a symbolic link to it
        (["--data", "{d}/test.npy", "--json", "{d}/test.npy"], "--json {d}/test.npy is the --data file"),
        (["--train-data", "{d}/train.npy", "--json", "{d}/train.npy"], "is the --train-data file"),
        (["--resume-file", "{d}/mine.pt"], "--resume-file {d}/mine.pt is the checkpoint"),
        (["--json", "{d}/notes.json"], "--json {d}/notes.json exists and was not written by raise-eval"),
        (["--resume-file", "{d}/notes.json"], "--resume-file {d}/notes.json exists and is not a raise-eval resume"),
        (["--json", "{d}/x.json", "--resume-file", "{d}/x.json"], "--json and --resume-file both name"),
        (["--until-gap", "1", "--json", "{d}/r.json"], "--json's plot (name it with --plot) {d}/r.png exists"),
        (["--until-gap", "1", "--plot", "{d}/r.png"], "--plot {d}/r.png exists and was not written by raise-eval"),
        (["--until-gap", "1", "--plot", "{d}/s.png", "--json", "{d}/s.png"], "--json and --plot both name"),
    ],
)
def test_outputs_that_would_lose_work_are_refused_before_any_work(tmp_path, capsys, no_estimator_runs, args, message):
    ckpt = _lost_work_files(tmp_path)
    (tmp_path / "link.pt").symlink_to(ckpt)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    args = [a.format(d=tmp_path) for a in args]
    err = _error(capsys, ["evaluate", str(ckpt), *FAST, *args])
    assert message.format(d=tmp_path) in err and len(err.strip().splitlines()) == 1
    assert "nothing was computed" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written, nothing lost


def test_overwrite_replaces_a_foreign_file_but_never_an_input(tmp_path, capsys):
    ckpt = _lost_work_files(tmp_path)
    notes = tmp_path / "notes.json"
    assert main(["evaluate", str(ckpt), *FAST, "--json", str(notes), "--overwrite"]) == 0
    assert json.loads(notes.read_text())["tool"] == "raise-eval"
    assert "is the checkpoint" in _error(capsys, ["evaluate", str(ckpt), *FAST, "--json", str(ckpt), "--overwrite"])
    assert ckpt.read_bytes() == DEFAULT.read_bytes()


def test_a_run_replaces_its_own_results_without_asking(tmp_path):
    out = tmp_path / "r.json"
    for _ in range(2):
        assert main(["evaluate", str(DEFAULT), *FAST, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["tool"] == "raise-eval" and doc["raise_eval_version"] and doc["complete"] is True


def test_a_named_datasets_files_are_inputs(tmp_path, capsys, no_estimator_runs):
    from raise_eval.io.datasets import dataset_files

    embedded = dataset_files("digits", "test")[0]
    err = _error(capsys, ["evaluate", str(DEFAULT), *FAST, "--json", str(embedded), "--overwrite"])
    assert f"--json {embedded} is a file of the digits dataset" in err


def test_version(capsys):
    from raise_eval import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith(f"raise-eval {__version__} (torch ")


def test_python_m_raise_eval_is_the_command():
    import sys

    from raise_eval import __version__

    result = subprocess.run([sys.executable, "-m", "raise_eval", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.startswith(f"raise-eval {__version__}")
    result = subprocess.run([sys.executable, "-m", "raise_eval", "evaluate", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "usage: raise-eval evaluate" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-memory", "-1GB"], "--max-memory: '-1GB' is not a positive size"),
        (["--max-memory=-1GB"], "--max-memory: '-1GB' is not a positive size"),
        (["--until-gap", "1", "--time-budget", "-5m"], "--time-budget: '-5m': the duration must be a finite positive"),
        (["--steps", "-1e3"], "--steps must be an integer of at least 1, got -1000"),  # counts may be written 1e3
    ],
)
def test_values_that_start_with_a_dash_get_a_message_about_the_value(capsys, no_estimator_runs, args, message):
    err = _error(capsys, ["evaluate", str(DEFAULT), *FAST, *args])
    assert message in err and "expected one argument" not in err


def test_a_dash_after_double_dash_stays_positional():
    from raise_eval.cli.options import attach_dash_values as _attach_dash_values

    parser = build_parser()
    assert _attach_dash_values(parser, ["evaluate", "--seed", "-3", "--", "--max-memory", "-1GB"]) == [
        "evaluate", "--seed=-3", "--", "--max-memory", "-1GB",
    ]  # fmt: skip
    assert _attach_dash_values(parser, ["evaluate", "--no-progress", "-1"]) == ["evaluate", "--no-progress", "-1"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: np.savez(p), "is an empty .npz archive (it holds no arrays); save the vectors in it"),
        (
            lambda p: np.save(p, np.array([[0, 1], [1, None]], dtype=object), allow_pickle=True),
            "holds a NumPy object array (dtype=object",
        ),
    ],
    ids=["empty-npz", "object-npy"],
)
def test_unreadable_data_files_get_one_line_naming_the_file(tmp_path, capsys, no_estimator_runs, make, message):
    path = tmp_path / ("data.npz" if "npz" in message else "data.npy")
    make(str(path))
    err = _error(capsys, ["evaluate", str(DEFAULT), "--data", str(path), *FAST])
    assert f"{path} {message}" in err and len(err.strip().splitlines()) == 1 and "text file" not in err


def test_a_one_vector_test_set_is_warned_about(tmp_path, capsys):
    data, out = tmp_path / "one.npy", tmp_path / "r.json"
    np.save(data, np.load(ROOT / "raise_eval" / "data" / "digits.npz")["images"][:1].astype(np.uint8))
    assert main(["evaluate", str(DEFAULT), "--data", str(data), *FAST, "--json", str(out)]) == 0
    assert "warning [one-test-vector]: the test data holds a single vector" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert "one-test-vector" in [w["code"] for w in doc["warnings"]]
    assert doc["log_likelihood"]["raise"]["stderr"] is None  # NaN: the reason for the warning


@pytest.mark.parametrize("seed", [str(2**64 - 1), str(-(2**63) - 1)])
def test_a_seed_torch_cannot_take_is_refused_before_any_work(capsys, no_estimator_runs, seed):
    """seed + 1 (RAISE's stream) of 2^64 - 1 overflows torch's generator: that used to fail after AIS had run."""
    assert f"--seed must be an integer from -{2**63} to {2**64 - 8}" in _error(
        capsys, ["evaluate", str(DEFAULT), *FAST, "--seed", seed]
    )
