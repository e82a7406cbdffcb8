"""Issue 24's bad inputs that the command and the API must answer in one line, before any work, and the runs that
must keep what they finished: numbers too large for a float, models with gradients, what the API is handed, the
table's columns, options that nothing would use, SIGTERM, and BDMC's examples (prefix-stable, or the user's own)."""

import importlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from raise_eval import certify, evaluate, load_checkpoint, load_dataset
from raise_eval.cli import main
from raise_eval.models import RBM, VAE, VAEConfig

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
SMALL = dict(steps=10, ais_chains=20, raise_examples=5, raise_chains=2, init="uniform")


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    return err


@pytest.fixture
def no_estimator_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an estimator ran before the refusal")

    for module in ("raise_eval.evaluation.run", "raise_eval.certification.run", "raise_eval.cli.evaluate"):
        monkeypatch.setattr(importlib.import_module(module), "run_evaluation", refuse)
    monkeypatch.setattr(importlib.import_module("raise_eval.cli.evaluate"), "estimate_cost", refuse)
    monkeypatch.setattr(importlib.import_module("raise_eval.cli.bdmc"), "evaluate_bdmc", refuse)


# ------------------------------------------------------------------ 4. numbers too large for a float
@pytest.mark.parametrize(
    "extra, option",
    [
        (["--steps", "1e400"], "--steps"),
        (["--ais-chains", "1e400"], "--ais-chains"),
        (["--raise-chains", "1e400"], "--raise-chains"),
        (["--until-gap", "1", "--max-steps", "1e400"], "--max-steps"),
        (["--schedule", "adaptive", "--pilot-grid", "1e400"], "--pilot-grid"),
        (["--test-subset", "1e400"], "--test-subset"),
    ],
)
def test_counts_beyond_any_run_are_refused_in_one_line(capsys, no_estimator_runs, extra, option):
    """Before: an OverflowError traceback from the planner (int too large to convert to float)."""
    err = _error(capsys, ["evaluate", str(DEFAULT), "--no-progress", *extra])
    assert f"{option} must be an integer of at most 9,223,372,036,854,775,807" in err and "got 1.000e+400" in err


def test_bdmc_reads_counts_as_evaluate_does(tmp_path, capsys, no_estimator_runs):
    """One rule for both commands: bdmc took `--steps 1e4` for an invalid int where evaluate accepted it."""
    vae = tmp_path / "vae.pt"
    from raise_eval import save_checkpoint

    save_checkpoint(vae, VAE(VAEConfig(data_dim=6, latent_dim=2, hidden=[4])))
    with pytest.raises(AssertionError, match="an estimator ran"):  # accepted: the run would start
        main(["bdmc", str(vae), "--steps", "1e2", "1e3", "--examples", "2e1", "--no-progress"])
    err = _error(capsys, ["bdmc", str(vae), "--examples", "1e400"])
    assert "--examples must be an integer of at most" in err


# ------------------------------------------------------------------ 6. models with gradients
def test_a_model_of_parameters_and_a_test_tensor_that_requires_grad():
    """Before: 'functions with out=... arguments don't support automatic differentiation' from evaluate and
    certify; evaluation never needs gradients. The numbers are those of the same model without them."""
    ckpt = load_checkpoint(DEFAULT)
    plain = ckpt.model
    params = RBM(*(torch.nn.Parameter(t.clone()) for t in (plain.W, plain.vbias, plain.hbias)))
    test = load_dataset("digits", "test")
    expected = evaluate(plain, test, **SMALL)
    with_grad = evaluate(params, test.clone().requires_grad_(True), **SMALL)
    assert with_grad.ais_mean == expected.ais_mean and with_grad.raise_mean == expected.raise_mean
    cert = certify(params, test, tolerance=10.0, max_steps=20, **SMALL)
    assert cert.history[0].ais_mean == expected.ais_mean


# ------------------------------------------------------------------ 8. what the API is handed
@pytest.mark.parametrize(
    "model, data, says",
    [
        ("checkpoint", None, "test_data is None"),
        ("linear", "digits", "model must be an RBM, DBM, DBN or FullyVisibleModel from raise_eval.models"),
        ("array", "digits", "got ndarray"),
        ("checkpoint", "ragged", "test_data must be binary vectors shaped (N, n_visible)"),
    ],
)
def test_the_api_says_what_it_was_handed(model, data, says):
    """Before: AttributeError ('numpy.ndarray' object has no attribute 'layer_sizes', 'NoneType' ... 'dim')."""
    models = {"checkpoint": load_checkpoint(DEFAULT).model, "linear": torch.nn.Linear(64, 4), "array": np.zeros(3)}
    datas = {None: None, "digits": load_dataset("digits", "test"), "ragged": [[0, 1], [1]]}
    with pytest.raises(TypeError, match=says.replace("(", r"\(").replace(")", r"\)")):
        evaluate(models[model], datas[data], **SMALL)


def test_numpy_arrays_and_lists_are_test_data():
    model = load_checkpoint(DEFAULT).model
    test = load_dataset("digits", "test")
    expected = evaluate(model, test, **SMALL).ais_mean
    assert evaluate(model, test.numpy(), **SMALL).ais_mean == expected
    assert evaluate(model, test.tolist(), **SMALL).ais_mean == expected


def test_a_table_from_python_names_its_data():
    """Before: 'data: (360 vectors)', an empty name."""
    report = evaluate(load_checkpoint(DEFAULT).model, load_dataset("digits", "test"), **SMALL)
    assert "data: 360 vectors (test vectors given in Python);" in report.format_table()


def test_columns_never_run_together():
    """Before: -363372.526511945.5748 for a log-likelihood and its standard error too wide for their columns."""
    from raise_eval.render.text import _n

    assert _n(-18.0718, 12, 4) == "    -18.0718"  # the usual width: unchanged
    assert f"{_n(-363372.5265123, 12, 4)}{_n(11945.5748, 10, 4)}" == " -363372.5265 11945.5748"


def test_the_bdmc_table_header_keeps_its_columns_apart():
    """Before: 'estimatevs midpoint'."""
    from raise_eval.render.text import bdmc_table

    report = _bdmc_report(gap=3.0, stderr=0.1)
    assert "estimate vs midpoint" in bdmc_table(report)


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--log-f", "mean-field"], "--log-f sets how a DBM's or DBN's log f(v) is estimated; an RBM's is exact"),
        (["--log-f-samples", "50"], "--log-f-samples sets how a DBM's"),
        (["--log-f-check", "10"], "--log-f-check sets how a DBM's"),
        (["--init", "uniform", "--train-data", "x.npy"], "--train-data gives the data base rates, which --init uniform"),
    ],
)
def test_options_that_nothing_would_use_are_refused(capsys, no_estimator_runs, extra, says):
    """Before: exit 0, the option silently ignored (bdmc refuses its ignored options; evaluate now does too)."""
    assert says in _error(capsys, ["evaluate", str(DEFAULT), "--no-progress", *extra])


def test_sigterm_keeps_the_table_and_a_partial_json(tmp_path):
    """Before: SIGTERM left no table and no JSON (SIGINT did both)."""
    out = tmp_path / "partial.json"
    cmd = [sys.executable, "-m", "raise_eval", "evaluate", str(DEFAULT), "--steps", "100000", "--threads", "1",
           "--json", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    buffer = ""
    while "AIS:" not in buffer and time.time() < deadline and proc.poll() is None:
        buffer += proc.stderr.read(1)  # the AIS progress bar
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert "interrupted during AIS" in stdout and "marked incomplete" in stdout
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "AIS"


# ------------------------------------------------------------------ 10. BDMC's examples
def _vae():
    torch.manual_seed(0)
    return VAE(VAEConfig(data_dim=8, latent_dim=2, hidden=[6]))


def test_the_first_examples_do_not_depend_on_how_many_follow():
    """Before: sample_joint(20) was not the first 20 rows of sample_joint(50), so runs with different --examples
    used different examples."""
    from raise_eval.bidirectional.run import simulate_examples

    model = _vae()
    z20, x20 = simulate_examples(model, 20, seed=3, device=torch.device("cpu"))
    z50, x50 = simulate_examples(model, 50, seed=3, device=torch.device("cpu"))
    assert torch.equal(z20, z50[:20]) and torch.equal(x20, x50[:20])
    z_other, _ = simulate_examples(model, 20, seed=4, device=torch.device("cpu"))
    assert not torch.equal(z20, z_other)


def test_your_own_simulated_examples(tmp_path, capsys):
    """`raise-eval bdmc --simulated FILE.npz` (z, x): the sandwich runs on them; a file without z and x, or with
    the wrong widths, is refused in one line."""
    from raise_eval import evaluate_bdmc, save_checkpoint
    from raise_eval.bidirectional.run import simulate_examples

    model = _vae()
    z, x = simulate_examples(model, 6, seed=11, device=torch.device("cpu"))
    np.savez(tmp_path / "sim.npz", z=z.numpy(), x=x.numpy())
    save_checkpoint(tmp_path / "vae.pt", model)
    fast = ["--examples", "6", "--chains", "2", "--steps", "5", "--iwae", "1", "--elbo-samples", "2",
            "--pilot-chains", "2", "--no-progress", "--threads", "1"]  # fmt: skip
    out = tmp_path / "b.json"
    assert main(["bdmc", str(tmp_path / "vae.pt"), "--simulated", str(tmp_path / "sim.npz"), *fast,
                 "--json", str(out)]) == 0  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["settings"]["examples"] == "given (z, x)" and doc["settings"]["simulated_file"].endswith("sim.npz")
    api = evaluate_bdmc(model, simulated=(z, x), num_examples=6, chains=2, steps=(5,), iwae_samples=(1,),
                        elbo_samples=2, pilot_chains=2)  # fmt: skip
    assert api.sandwich[5].summary()["lower"]["mean"] == doc["simulated"]["bdmc"]["5"]["lower"]["mean"]
    np.savez(tmp_path / "bad.npz", latents=z.numpy())
    err = _error(capsys, ["bdmc", str(tmp_path / "vae.pt"), "--simulated", str(tmp_path / "bad.npz"), *fast])
    assert "--simulated" in err and "it needs z (N, latent_dim) and x (N, data_dim)" in err
    with pytest.raises(ValueError, match="model's latent_dim is 2"):
        evaluate_bdmc(model, simulated=(torch.zeros(6, 3), x), num_examples=6, steps=(5,))


def test_the_real_data_subset_is_recorded(tmp_path):
    """Before: the --real-data subset's indices were not in the JSON."""
    from raise_eval import evaluate_bdmc

    model = _vae()
    real = (torch.rand(30, 8, generator=torch.Generator().manual_seed(0)) < 0.5).float()
    report = evaluate_bdmc(model, real_data=real, real_examples=7, num_examples=3, chains=2, steps=(5,),
                           iwae_samples=(1,), elbo_samples=2, pilot_chains=2)  # fmt: skip
    indices = report.settings["real_data_indices"]
    assert len(indices) == 7 == report.settings["real_examples"] and len(set(indices)) == 7
    assert indices == torch.randperm(30, generator=torch.Generator().manual_seed(0))[:7].tolist()


def _bdmc_report(gap: float, stderr: float):
    from types import SimpleNamespace

    from raise_eval.bidirectional import BDMCReport

    n = 400
    spread = stderr * n**0.5  # per-example gaps whose mean is `gap` and whose standard error is about `stderr`
    per = gap + spread * torch.linspace(-1.7, 1.7, n, dtype=torch.float64)
    lower = -100.0 - per / 2
    upper = -100.0 + per / 2
    from raise_eval.stats import mean_and_stderr

    def summary():
        g = mean_and_stderr(upper - lower)
        return {"gap": {"mean": g[0], "stderr": g[1]}, "lower": {"mean": float(lower.mean())},
                "upper": {"mean": float(upper.mean())}, "jeffreys_bound": {"mean": g[0]}}  # fmt: skip

    result = SimpleNamespace(lower=lower, upper=upper, seconds=1.0, summary=summary, to_dict=summary)
    settings = {"model": "toy", "dtype": "float32", "device": "cpu", "num_examples": n, "seed": 0,
                "kernel": "HMC", "schedule": "sigmoid", "chains": 2, "steps": [100]}  # fmt: skip
    return BDMCReport(settings, sandwich={100: result}, baselines={"ELBO": lower - 5.0})


def test_a_sandwich_that_may_be_open_is_not_called_the_truth():
    """Before: a 0.96 ± 0.26 nat sandwich was labelled '(truth)' (under a nat) though its standard error leaves it
    possibly open."""
    from raise_eval.render.text import bdmc_table

    almost = _bdmc_report(gap=0.96, stderr=0.26)
    assert [w.code for w in almost.warnings] == ["bdmc-open"]
    assert "within two standard errors" in almost.warnings[0].message
    assert "(open)" in bdmc_table(almost) and "(truth)" not in bdmc_table(almost)
    closed = _bdmc_report(gap=0.3, stderr=0.05)
    assert closed.warnings == [] and "(truth)" in bdmc_table(closed)
