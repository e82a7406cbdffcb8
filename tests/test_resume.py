"""--resume-file: an interrupted run continued from its file equals an uninterrupted run, whether it stopped
between shards or inside one (Ctrl-C, a crash); other settings refused."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from raise_eval.models.io.checkpoints import load_checkpoint

from raise_eval import DBM, DBN, BoltzmannPath, sharding
from raise_eval.cli import main
from raise_eval.io.datasets import load_dataset
from raise_eval import evaluate
from raise_eval.evaluation import EvaluationInterrupted

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
RUN = dict(steps=20, ais_chains=40, raise_examples=10, raise_chains=4, exact="never", shard_size=10)


@pytest.fixture(scope="module")
def digits():
    ckpt = load_checkpoint(DEFAULT)
    return ckpt.model, load_dataset("digits", "test"), ckpt.train_pixel_means


def _interrupt_after(monkeypatch, name: str, calls: int) -> list:
    """Make sharding.<name> raise KeyboardInterrupt (as Ctrl-C would) on its call number `calls` + 1."""
    real, seen = getattr(sharding, name), []

    def counted(*args, **kwargs):
        if len(seen) == calls:
            raise KeyboardInterrupt
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sharding, name, counted)
    return seen


def _same(a, b) -> None:
    assert torch.equal(a.ais.log_weights, b.ais.log_weights)
    assert torch.equal(a.raise_.log_weights, b.raise_.log_weights)
    assert (a.ais_mean, a.raise_mean, a.raise_stderr) == (b.ais_mean, b.raise_mean, b.raise_stderr)


@pytest.mark.parametrize("stage, name, calls", [("AIS", "ais", 2), ("RAISE", "raise_log_likelihood", 1)])
def test_resumed_run_equals_uninterrupted(digits, tmp_path, monkeypatch, stage, name, calls):
    model, test, means = digits
    file = tmp_path / "run.pt"
    whole = evaluate(model, test, train_pixel_means=means, **RUN)
    with monkeypatch.context() as m:
        _interrupt_after(m, name, calls)
        with pytest.raises(EvaluationInterrupted) as stop:
            evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    assert stop.value.report.interrupted == stage
    kept = torch.load(file, weights_only=True)["shards"]
    assert len(kept[name.split("_")[0]]) == calls  # the shards that finished before Ctrl-C
    ran = _interrupt_after(monkeypatch, name, 10**6)  # count the shards run now
    resumed = evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    # 40 AIS chains in shards of 10; 10 RAISE vectors in shards of 10 // 4 = 2 vectors
    total = len(sharding.shard_bounds(40, 10)) if name == "ais" else len(sharding.shard_bounds(10, 2))
    assert len(ran) == total - calls  # finished shards were not run again
    _same(resumed, whole)
    again = evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))  # everything in the file
    _same(again, whole)


def test_other_settings_are_refused_by_name(digits, tmp_path):
    model, test, means = digits
    file = tmp_path / "run.pt"
    evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    with pytest.raises(ValueError, match=r"seed: 0 in the file, 1 now"):
        evaluate(model, test, train_pixel_means=means, **RUN, seed=1, resume_file=str(file))
    with pytest.raises(ValueError, match=r"the start distribution differs \(another init") as e:
        evaluate(model, test, init="uniform", **RUN, resume_file=str(file))
    assert not re.search(r"[0-9a-f]{16}", str(e.value))  # what changed, not two digests
    with pytest.raises(ValueError, match=r"shard_size: 10 in the file, 20 now"):
        evaluate(model, test, train_pixel_means=means, **{**RUN, "shard_size": 20}, resume_file=str(file))
    (tmp_path / "junk.pt").write_text("not a resume file")
    with pytest.raises(ValueError, match="is not a raise-eval resume file"):
        evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(tmp_path / "junk.pt"))


def test_a_dbn_resumed_with_the_other_start_is_refused(tmp_path):
    """A DBN's resume file records how RAISE started (heated or unrolled): continuing it with the other start would
    mix the two estimators under one label, so it is refused by name."""
    from raise_eval.models import DBN

    g = torch.Generator().manual_seed(4)
    model = DBN.random([12, 6, 5, 4], weight_std=0.5, generator=g)
    test = (torch.rand(30, 12, generator=g) < 0.3).float()
    run = dict(RUN, init="uniform")
    file = tmp_path / "dbn.pt"
    evaluate(model, test, **run, dbn_start="unrolled", resume_file=str(file))
    with pytest.raises(ValueError, match=r"dbn_start: 'unrolled' in the file, 'heated' now"):
        evaluate(model, test, **run, resume_file=str(file))
    again = evaluate(model, test, **run, dbn_start="unrolled", resume_file=str(file))
    assert again.raise_.start == "unrolled"


def test_a_changed_model_or_test_set_is_said_in_words_not_digests(digits, tmp_path):
    """Issue 24: the file keeps digests of the parameters and the test vectors; a mismatch names what they are."""
    model, test, means = digits
    file = tmp_path / "run.pt"
    evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    other = type(model)(model.W + 0.01, model.vbias, model.hbias)  # the same shapes, other weights
    with pytest.raises(ValueError) as e:
        evaluate(other, test, train_pixel_means=means, **RUN, resume_file=str(file))
    message = str(e.value)
    assert "the model's parameters differ (another checkpoint, or other weights of the same shapes)" in message
    assert "parameters:" not in message and not re.search(r"[0-9a-f]{16}", message)
    with pytest.raises(ValueError, match=r"the test vectors differ \(another data"):
        evaluate(model, test[:-1], train_pixel_means=means, **RUN, resume_file=str(file))


def _edited(tmp_path, digits, edit) -> Path:
    """A finished run's resume file, then `edit(data)` applied to it by hand."""
    model, test, means = digits
    file = tmp_path / "run.pt"
    evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    data = torch.load(file, weights_only=True)
    edit(data)
    torch.save(data, file)
    return file


def _set_nan(data):
    data["shards"]["ais"][1]["log_weights"][3] = float("nan")


def _shorten(data):
    data["shards"]["ais"][2]["log_weights"] = data["shards"]["ais"][2]["log_weights"][:5].clone()


def _extra_shard(data):
    data["shards"]["raise"][9] = data["shards"]["raise"][0]


def _nan_log_f(data):
    data["shards"]["raise"][0]["log_unnormalized"][0] = float("inf")


@pytest.mark.parametrize(
    "edit, message",
    [
        (_set_nan, "AIS shard 1 has 1 NaN or infinite log-weight"),
        (_shorten, "AIS shard 2 holds log-weights shaped (5,); the run's settings give 10 chains"),
        (_extra_shard, "RAISE shard 9 is beyond the run, which has 5 RAISE shards"),
        (_nan_log_f, "RAISE shard 0 has NaN or infinite log f(v) values"),
    ],
)
def test_a_hand_edited_resume_file_is_refused_naming_the_file_and_the_shard(
    digits, tmp_path, monkeypatch, edit, message
):
    model, test, means = digits
    file = _edited(tmp_path, digits, edit)
    for name in ("ais", "raise_log_likelihood"):
        _interrupt_after(monkeypatch, name, 0)  # no estimator may run: the refusal comes first
    with pytest.raises(ValueError) as e:
        evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    text = str(e.value)
    assert text.startswith(f"resume_file {file} does not hold what the run that wrote it saves (")
    assert message in text and text.endswith("it was edited or damaged; delete it to start over")


def test_cli_resume(tmp_path, capsys):
    file = tmp_path / "run.pt"
    args = ["evaluate", str(DEFAULT), "--steps", "20", "--ais-chains", "40", "--raise-examples", "10"]
    args += ["--raise-chains", "4", "--shard-size", "10", "--no-progress", "--resume-file", str(file)]
    assert main([*args, "--json", str(tmp_path / "one.json")]) == 0
    assert main([*args, "--json", str(tmp_path / "two.json")]) == 0  # every shard read back from the file
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    assert one["log_z"] == two["log_z"] and one["log_likelihood"] == two["log_likelihood"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main([*args, "--seed", "3"])
    assert stop.value.code == 2
    assert "seed: 0 in the file, 3 now" in capsys.readouterr().err


# ---------------------------------------------------------------- inside a shard: the annealing state is saved

STEPS = 12
ONE_SHARD = dict(steps=STEPS, ais_chains=30, raise_examples=6, raise_chains=5, exact="never", init="uniform")


def _tiny(kind: str):
    """(model, test vectors) of a small RBM, DBM or DBN (uniform start: no training means needed)."""
    g = torch.Generator().manual_seed(7)
    if kind == "RBM":
        model, test = load_checkpoint(DEFAULT).model, load_dataset("digits", "test")[:40]
    elif kind == "DBM":
        model = DBM.random([12, 8, 6], weight_std=0.5, bias_std=0.3, generator=g)
    else:
        model = DBN.random([12, 8, 6], weight_std=0.5, bias_std=0.3, generator=g)
    if kind != "RBM":
        test = (torch.rand(40, 12, generator=g) < 0.4).float()
    return model, test


def _stop_at_transition(monkeypatch, number: int, how: str) -> list:
    """Count BoltzmannPath.transition_ calls (one per annealing step, whatever the phase); at call `number` (from
    0) press Ctrl-C for real (SIGINT to this process, the step goes on) or crash before the step ('crash')."""
    real, calls = BoltzmannPath.transition_, []

    def counted(self, state, beta, generator):
        if len(calls) == number:
            if how == "crash":
                calls.append("crash")
                raise RuntimeError("simulated crash")
            signal.raise_signal(signal.SIGINT)
        calls.append(beta)
        return real(self, state, beta, generator)

    monkeypatch.setattr(BoltzmannPath, "transition_", counted)
    return calls


# (model, phase interrupted, transition_ call to stop at): AIS runs STEPS steps, then (DBM) heating STEPS, then
# the reverse pass STEPS; a DBN's reverse pass follows its AIS.
CASES = [
    ("RBM", "AIS", 5),
    ("RBM", "RAISE", STEPS + 3),
    ("DBM", "heating", STEPS + 4),
    ("DBM", "RAISE", 2 * STEPS + 7),
    ("DBN", "RAISE", STEPS + 1),
]


@pytest.mark.parametrize("kind, phase, number", CASES, ids=[f"{k}-{p}" for k, p, _ in CASES])
@pytest.mark.parametrize("how", ["ctrl-c", "crash"])
def test_a_shard_continues_from_its_saved_step(tmp_path, monkeypatch, kind, phase, number, how, ctrl_c_raises):
    """One shard per stage, saved after every step (interval 0): Ctrl-C lets the step finish, saves it and stops;
    a crash loses only the step it interrupted. Either way the continued run redoes no saved step and gives the
    bits of an uninterrupted run."""
    model, test = _tiny(kind)
    whole = evaluate(model, test, **ONE_SHARD)
    file = tmp_path / "run.pt"
    with monkeypatch.context() as m:
        calls = _stop_at_transition(m, number, how)
        with pytest.raises(EvaluationInterrupted if how == "ctrl-c" else RuntimeError):
            evaluate(model, test, **ONE_SHARD, resume_file=str(file), resume_interval=0.0)
    assert len(calls) == number + 1
    saved = torch.load(file, weights_only=True)["running"]
    phase_start = {"AIS": 0, "heating": STEPS, "RAISE": STEPS if kind != "DBM" else 2 * STEPS}[phase]
    steps_done = number + 1 if how == "ctrl-c" else number  # Ctrl-C finishes its step; a crash loses it
    assert (saved["phase"], saved["step"]) == (phase, steps_done - phase_start)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler was put back
    with monkeypatch.context() as m:
        rerun = _stop_at_transition(m, -1, how)  # count only
        resumed = evaluate(model, test, **ONE_SHARD, resume_file=str(file), resume_interval=0.0)
    total = 2 * STEPS + (STEPS if kind == "DBM" else 0)
    assert len(rerun) == total - steps_done  # saved steps were not run again
    _same(resumed, whole)
    assert "running" not in torch.load(file, weights_only=True)  # every shard finished
    continued = f"shard 0 continued from step {steps_done - phase_start} ({phase})"
    assert any(continued in note for note in resumed.notes), resumed.notes


def test_state_is_saved_every_interval_only(tmp_path, monkeypatch):
    """With the default interval (60 s) a short shard is never saved mid-way: the file holds finished shards."""
    model, test = _tiny("RBM")
    saves = []
    real = sharding.ais

    def spy(*args, **kwargs):
        store = kwargs["checkpoint"].store
        write = store.write
        monkeypatch.setattr(store, "write", lambda running=None: saves.append(running is not None) or write(running))
        return real(*args, **kwargs)

    monkeypatch.setattr(sharding, "ais", spy)
    evaluate(model, test, **ONE_SHARD, resume_file=str(tmp_path / "run.pt"))
    assert saves and not any(saves)


def test_cli_ctrl_c_saves_and_the_same_command_continues(tmp_path, ctrl_c_raises):
    """End to end with a real Ctrl-C: the command saves the annealing state, exits 130 and says how to continue;
    run again, it finishes with the numbers of an uninterrupted run."""
    args = [sys.executable, "-m", "raise_eval.cli", "evaluate", str(DEFAULT), "--steps", "3000", "--ais-chains"]
    args += ["200", "--raise-examples", "10", "--raise-chains", "5", "--threads", "1", "--no-progress"]
    subprocess.run([*args, "--json", str(tmp_path / "whole.json")], cwd=ROOT, check=True, timeout=300)
    file = tmp_path / "run.pt"
    resumable = [*args, "--resume-file", str(file), "--resume-interval", "0", "--json", str(tmp_path / "part.json")]
    proc = subprocess.Popen(resumable, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not file.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)  # the file appears with the first saved step of AIS
    assert proc.poll() is None, "the run finished before it could be interrupted"
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "run the same command to continue" in out
    assert "running" in torch.load(file, weights_only=True)
    resumable[-1] = str(tmp_path / "resumed.json")
    subprocess.run(resumable, cwd=ROOT, check=True, timeout=300, capture_output=True)
    whole, resumed = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("whole", "resumed"))
    assert resumed["log_z"] == whole["log_z"] and resumed["log_likelihood"] == whole["log_likelihood"]


def test_files_of_another_number_of_processes_are_refused(digits, tmp_path):
    """One process writes FILE, N processes FILE.rank<r>-of-<N>: neither continues the other's run."""
    model, test, means = digits
    file = tmp_path / "run.pt"
    (tmp_path / "run.pt.rank0-of-2").write_bytes(b"")
    with pytest.raises(ValueError, match=r"another number of processes \(run.pt.rank0-of-2 exist; this run has 1\)"):
        evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))


def test_an_adaptive_schedule_must_match_the_files(digits, tmp_path):
    """The pilot runs again on resume; betas other than those the file's run used (another thread count or torch
    could give them) are refused rather than continued on."""
    model, test, means = digits
    file = tmp_path / "run.pt"
    adaptive = dict(RUN, schedule="adaptive", pilot_chains=20, pilot_grid=20)
    evaluate(model, test, train_pixel_means=means, **adaptive, resume_file=str(file))
    data = torch.load(file, weights_only=True)
    assert data["schedule_digest"]
    evaluate(model, test, train_pixel_means=means, **adaptive, resume_file=str(file))  # same betas: accepted
    data["schedule_digest"], data["context"]["threads"] = "0" * 16, 64
    torch.save(data, file)
    with pytest.raises(ValueError, match=r"other betas .*threads 64 when the file was written, 1 now"):
        evaluate(model, test, train_pixel_means=means, **adaptive, resume_file=str(file))


def test_format_1_files_and_context_changes(digits, tmp_path):
    """A file of format 1 (finished shards only) is read; a thread count other than the file's is noted."""
    model, test, means = digits
    file = tmp_path / "run.pt"
    whole = evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    data = torch.load(file, weights_only=True)
    data["format"], data["context"]["threads"] = 1, 7
    torch.save(data, file)
    again = evaluate(model, test, train_pixel_means=means, **RUN, resume_file=str(file))
    _same(again, whole)
    assert any("threads 7 when the file was written, 1 now" in n for n in again.notes)


@pytest.mark.parametrize("how", ["ctrl-c", "crash"])
def test_the_log_f_estimates_continue_from_their_saved_chunk(tmp_path, monkeypatch, how, ctrl_c_raises):
    """A DBM's importance-sampled log f(v) runs in fixed chunks with one stream: stopped after chunk 3 of 8 (Ctrl-C
    lets the chunk finish; a crash loses it), the same call continues from the saved chunk with the numbers of an
    uninterrupted run."""
    import raise_eval.estimators.unnormalized as unnormalized

    model, test = _tiny("DBM")
    # importance sampling (the chunks counted here), and no check (made after RAISE, it is not counted here)
    settings = dict(ONE_SHARD, log_f_method="importance", log_f_samples=20, log_f_check=0)
    monkeypatch.setattr(unnormalized, "_CHUNK_ELEMENTS", 20 * 12 * 5)  # 5 test vectors a chunk: 8 chunks
    whole = evaluate(model, test, **settings)
    real, calls = unnormalized._propose_dbm, []

    def stopping(*args):
        if len(calls) == 3:
            if how == "crash":
                raise RuntimeError("simulated crash")
            signal.raise_signal(signal.SIGINT)
        calls.append(1)
        return real(*args)

    file = tmp_path / "run.pt"
    with monkeypatch.context() as m:
        m.setattr(unnormalized, "_propose_dbm", stopping)
        with pytest.raises(EvaluationInterrupted if how == "ctrl-c" else RuntimeError):
            evaluate(model, test, **settings, resume_file=str(file), resume_interval=0.0)
    saved = torch.load(file, weights_only=True)["running"]
    chunks_done = 4 if how == "ctrl-c" else 3
    assert (saved["stage"], saved["phase"], saved["step"]) == ("log_f", "log f(v)", chunks_done)
    assert saved["log_weights"].shape == (2, 5 * chunks_done)
    with monkeypatch.context() as m:
        count = []
        m.setattr(unnormalized, "_propose_dbm", lambda *a: count.append(1) or real(*a))
        resumed = evaluate(model, test, **settings, resume_file=str(file), resume_interval=0.0)
    assert len(count) == 8 - chunks_done
    assert torch.equal(resumed.log_f.log_unnormalized, whole.log_f.log_unnormalized)
    assert torch.equal(resumed.log_f.stderr, whole.log_f.stderr)
    _same(resumed, whole)
    assert any(f"log_f shard 0 continued from chunk {chunks_done}" in note for note in resumed.notes)


def test_a_resume_file_of_0_3_continues(tmp_path, monkeypatch):
    """tests/data/resume_0.3_dbn.pt was written by raise-eval 0.3, interrupted after 2 of 4 AIS shards: its settings
    (the keys of the file's fingerprint) still agree, so the run continues from its shards."""
    import shutil

    g = torch.Generator().manual_seed(4)
    model = DBN.random([12, 6, 5, 4], weight_std=0.5, generator=g)
    test = (torch.rand(30, 12, generator=g) < 0.3).float()
    file = tmp_path / "run.pt"
    shutil.copy(ROOT / "tests" / "data" / "resume_0.3_dbn.pt", file)
    kept = torch.load(file, weights_only=True)["shards"]["ais"]
    ran = _interrupt_after(monkeypatch, "ais", 10**6)
    report = evaluate(model, test, **RUN, init="uniform", threads=1, resume_file=str(file))
    assert len(ran) == 2  # the 2 shards the file does not hold
    assert torch.equal(report.ais.log_weights[:20], torch.cat([kept[0]["log_weights"], kept[1]["log_weights"]]))
    assert any("2 of 4 AIS shards read back" in n for n in report.notes)
