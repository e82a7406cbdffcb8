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
    assert "--steps must be at least 1" in _error(capsys, ["evaluate", str(DEFAULT), *FAST, "--steps", "0"])


def test_file_data_with_training_data(tmp_path, capsys):
    from raise_eval.datasets import load_dataset

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
    while "RAISE" not in "".join(chars) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert "RAISE" in "".join(chars), f"RAISE never started: {''.join(chars)}"
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
        (["--ais-chains", "1"], "--ais-chains must be at least 2 (a standard error needs two)"),
        (["--raise-examples", "1"], "--raise-examples must be at least 2"),
        (["--device", "meta"], "raise-eval runs on cpu or cuda, not meta"),
        (["--cv-alpha", "nan"], "--cv-alpha takes a finite number or 'optimal'"),
        (["--raise-chains", "-1"], "--raise-chains must be at least 1"),
        (["--device", "foo"], "--device 'foo' is not a torch device"),
        (["--threads", "0"], "--threads must be at least 1"),
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
    import raise_eval.cli as cli

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cli.tempfile, "NamedTemporaryFile", refuse)
    for option in ("--json", "--resume-file"):
        with pytest.raises(SystemExit) as stop:
            main(["evaluate", str(DEFAULT), option, str(tmp_path / "out")])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"{option} {tmp_path / 'out'}: cannot write in the folder {tmp_path} (Permission denied)" in err


def test_resume_interval_needs_a_resume_file(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", str(DEFAULT), "--resume-interval", "5"])
    assert stop.value.code == 2 and "give --resume-file too" in capsys.readouterr().err
