"""`raise-eval bdmc` on a tiny VAE: the table, the JSON document, the plot and the errors."""

import json

import pytest
import torch
from raise_eval.models import VAE, VAEConfig
from raise_eval.models.io.checkpoints import save_checkpoint

from raise_eval.cli import main

FAST = [
    "--examples",
    "6",
    "--chains",
    "2",
    "--steps",
    "5",
    "20",
    "--iwae",
    "1",
    "10",
    "--elbo-samples",
    "5",
    "--leapfrog",
    "3",
    "--pilot-chains",
    "2",
    "--no-progress",
]


@pytest.fixture(scope="module")
def vae_checkpoint(tmp_path_factory):
    torch.manual_seed(0)  # parameter initialization only
    path = tmp_path_factory.mktemp("vae") / "vae.pt"
    save_checkpoint(path, VAE(VAEConfig(data_dim=12, latent_dim=2, hidden=[8])))
    return path


def test_table_and_json(vae_checkpoint, tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["bdmc", str(vae_checkpoint), *FAST, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    for row in ["ELBO (encoder, 5 samples)", "IWAE-10 (encoder)", "K=5", "K=20", "Jeffreys bound"]:
        assert row in table
    doc = json.loads(out.read_text())
    sandwich = doc["simulated"]["bdmc"]["20"]
    assert sandwich["lower"]["mean"] <= sandwich["upper"]["mean"] + 1.0
    assert set(doc["settings"]) >= {"num_examples", "chains", "steps", "schedule", "kernel", "seed"}
    assert doc["timing"]["seconds"] > 0 and doc["hmc_step_sizes"]


def test_aide_and_real_data_and_plot(vae_checkpoint, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    data = tmp_path / "real.npy"
    import numpy as np

    np.save(data, (np.random.default_rng(0).random((10, 12)) < 0.3).astype(np.uint8))
    png = tmp_path / "bounds.png"
    args = [
        "bdmc",
        str(vae_checkpoint),
        *FAST,
        "--real-data",
        str(data),
        "--aide",
        "--aide-examples",
        "3",
        "--aide-ng",
        "2",
        "--aide-nt",
        "2",
        "--plot",
        str(png),
    ]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "AIDE, encoder vs AIS" in table and "on real data" in table
    assert png.stat().st_size > 1000


def test_wrong_model_types_are_refused(vae_checkpoint, capsys):
    with pytest.raises(SystemExit):
        main(["bdmc", "checkpoints/rbm_digits_64-16.pt", *FAST])
    assert "evaluates directed models" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", str(vae_checkpoint), "--data", "digits", "--no-progress"])
    assert "use raise-eval bdmc" in capsys.readouterr().err


FACTORY = """
import torch
from torch import nn
from raise_eval import DecoderModel


def make_model():
    torch.manual_seed(0)  # parameter initialization only
    encoder = nn.Sequential(nn.Linear(12, 8), nn.ELU(), nn.Linear(8, 4))
    decoder = nn.Sequential(nn.Linear(2, 8), nn.ELU(), nn.Linear(8, 24))
    return DecoderModel(decoder, latent_dim=2, likelihood="gaussian", encoder=encoder, encoder_scale="log_var")


def make_broken():
    decoder = nn.Linear(2, 12)
    decoder.load_state_dict({"weight": torch.zeros(3, 3)})  # line 16
    return DecoderModel(decoder, latent_dim=2)
"""


@pytest.fixture()
def factory_file(tmp_path):
    path = tmp_path / "my_vae.py"
    path.write_text(FACTORY)
    return path


def test_model_factory_with_continuous_real_data(factory_file, tmp_path, capsys):
    """--model FILE.py:FACTORY in place of a checkpoint: a Gaussian decoder, real-valued --real-data, JSON."""
    import numpy as np

    data = tmp_path / "real.npy"
    np.save(data, np.random.default_rng(0).normal(size=(10, 12)).astype(np.float32))
    out = tmp_path / "b.json"
    args = ["bdmc", "--model", f"{factory_file}:make_model", *FAST, "--real-data", str(data), "--json", str(out)]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert f"raise-eval bdmc --model {factory_file}:make_model: DecoderModel(2 -> 12, 'gaussian'" in table
    assert "IWAE-10 (encoder)" in table and "on real data" in table and "K=20" in table
    doc = json.loads(out.read_text())
    assert doc["settings"]["model_factory"] == f"{factory_file}:make_model" and doc["settings"]["checkpoint"] is None
    assert doc["settings"]["dtype"] == "float32"


def test_model_factory_moves_to_the_requested_dtype(factory_file, capsys):
    assert main(["bdmc", "--model", f"{factory_file}:make_model", *FAST, "--dtype", "float64"]) == 0
    assert "float64 on cpu" in capsys.readouterr().out


def test_a_factory_that_raises_is_reported_as_the_users_error(factory_file, capsys):
    with pytest.raises(SystemExit) as info:
        main(["bdmc", "--model", f"{factory_file}:make_broken", *FAST])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"make_broken() in {factory_file} raised RuntimeError" in err
    assert f"at {factory_file}, line 16, in make_broken" in err
    assert "Traceback" not in err


def test_real_data_outside_the_likelihood_support_is_refused(tmp_path, capsys):
    import numpy as np

    path = tmp_path / "bernoulli.py"
    path.write_text(
        "from torch import nn\nfrom raise_eval import DecoderModel\n\n"
        "def make_model():\n    return DecoderModel(nn.Linear(2, 12), latent_dim=2)\n"
    )
    data = tmp_path / "grey.npy"
    np.save(data, np.full((5, 12), 0.5, dtype=np.float32))
    with pytest.raises(SystemExit):
        main(["bdmc", "--model", f"{path}:make_model", *FAST, "--real-data", str(data)])
    assert "the 'bernoulli' likelihood needs real data of 0s and 1s" in capsys.readouterr().err


def test_real_data_keeps_its_floating_point_precision():
    """--real-data in float64 is checked as it is (not rounded to float32 on the way); integers become floats."""
    from raise_eval.io.inputs import check_real_data as _check_real_data
    from raise_eval.models import DecoderModel
    from torch import nn

    model = DecoderModel(nn.Linear(2, 3).double(), 2, likelihood="gaussian", scale=1.0)
    data = 1.0 + 1e-12 * torch.arange(6, dtype=torch.float64).reshape(2, 3)  # differences float32 cannot hold
    checked = _check_real_data(model, data)
    assert checked.dtype == torch.float64 and torch.equal(checked, data)
    pixel_model = DecoderModel(nn.Linear(2, 6), 2, likelihood="discretized_logistic")
    pixels = _check_real_data(pixel_model, torch.ones(2, 3).long())
    assert pixels.dtype == torch.float32


def test_exactly_one_of_checkpoint_and_model(vae_checkpoint, factory_file, capsys):
    with pytest.raises(SystemExit):
        main(["bdmc", str(vae_checkpoint), "--model", f"{factory_file}:make_model", *FAST])
    assert "one of the two" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bdmc", *FAST])
    assert "give a CHECKPOINT or --model FILE.py:FACTORY" in capsys.readouterr().err


# ------------------------------------------------------------ issue 17: every option before any work, partial results
@pytest.fixture
def no_bdmc_runs(monkeypatch):
    """Fails a command that reaches the BDMC run: a refusal must come before any work."""
    import raise_eval.cli.bdmc as bdmc_command

    def refuse(*args, **kwargs):
        raise AssertionError("BDMC ran before the refusal")

    monkeypatch.setattr(bdmc_command, "evaluate_bdmc", refuse)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--aide", "--aide-examples", "0"], "--aide-examples must be an integer of at least 1, got 0"),
        (["--aide", "--aide-ng", "0"], "--aide-ng must be an integer of at least 1, got 0"),
        (["--aide", "--aide-nt", "-2"], "--aide-nt must be an integer of at least 1, got -2"),
        (["--aide", "--aide-mg", "0"], "--aide-mg must be an integer of at least 1"),
        (["--aide", "--aide-mt", "0"], "--aide-mt must be an integer of at least 1"),
        (["--aide", "--aide-steps", "0"], "--aide-steps must be an integer of at least 1"),
        (["--aide", "--aide-examples", "7"], "AIDE runs on 7 of the simulated examples (--aide-examples), but only 6"),
        (["--aide-ng", "3", "--aide-mt", "2"], "--aide-ng, --aide-mt belong to AIDE: give --aide too"),
        (["--target-accept", "0"], "--target-accept must be a finite number strictly between 0 and 1 (the BDMC paper's 0.65), got 0.0"),
        (["--target-accept", "1"], "strictly between 0 and 1 (the BDMC paper's 0.65), got 1.0"),
        (["--target-accept", "1.5"], "strictly between 0 and 1 (the BDMC paper's 0.65), got 1.5"),
        (["--target-accept", "nan"], "strictly between 0 and 1 (the BDMC paper's 0.65), got nan"),
        (["--real-examples", "5"], "--real-examples belongs to --real-data: give --real-data NAME|FILE too"),
        (["--data-root", "."], "--data-root belongs to --real-data"),
        (["--real-data", "cifar"], "--real-data cifar: unknown dataset 'cifar'"),
        (["--real-data", "{d}/absent.npy"], "--real-data {d}/absent.npy: no such file"),
        (["--real-data", "digits", "--real-examples", "0"], "--real-examples must be an integer of at least 1, got 0"),
        (["--json", "{ckpt}"], "--json {ckpt} is the checkpoint ({ckpt}), an input of this run"),
        (["--json", "{d}/notes.json"], "--json {d}/notes.json exists and was not written by raise-eval"),
        (["--plot", "{d}/b.png", "--json", "{d}/b.png"], "--json and --plot both name {d}/b.png"),
    ],
)
def test_every_option_is_checked_before_any_work(vae_checkpoint, tmp_path, capsys, no_bdmc_runs, args, message):
    (tmp_path / "notes.json").write_text("my notes\n")
    args = [a.format(d=tmp_path, ckpt=vae_checkpoint) for a in args]
    with pytest.raises(SystemExit) as stop:
        main(["bdmc", str(vae_checkpoint), *FAST, *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message.format(d=tmp_path, ckpt=vae_checkpoint) in err
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "notes.json").read_text() == "my notes\n"


def test_aide_without_an_encoder_is_refused_before_any_work(tmp_path, capsys, no_bdmc_runs):
    path = tmp_path / "decoder_only.py"
    path.write_text(
        "from torch import nn\nfrom raise_eval import DecoderModel\n\n"
        "def make_model():\n    return DecoderModel(nn.Linear(2, 12), latent_dim=2)\n"
    )
    with pytest.raises(SystemExit):
        main(["bdmc", "--model", f"{path}:make_model", *FAST, "--aide"])
    assert "--aide measures the encoder against AIS" in capsys.readouterr().err


def _stop_at(monkeypatch, name, k, error):
    """Make the stage `name` of raise_eval.bidirectional.run (bdmc at K = k, or aide) raise `error`."""
    import raise_eval.bidirectional.run as bdmc_report

    real = getattr(bdmc_report, name)

    def stage(*args, **kwargs):
        if name == "aide" or args[2].numel() - 1 == k:  # bdmc(path, start, betas, ...): K + 1 betas
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(bdmc_report, name, stage)


def test_ctrl_c_keeps_the_finished_stages(vae_checkpoint, tmp_path, capsys, monkeypatch):
    """Ctrl-C during the second K: exit 130, no traceback, the first K's sandwich and the baselines printed and kept
    in a JSON marked incomplete (as evaluate does)."""
    _stop_at(monkeypatch, "bdmc", 20, KeyboardInterrupt())
    out = tmp_path / "b.json"
    assert main(["bdmc", str(vae_checkpoint), *FAST, "--json", str(out)]) == 130
    captured = capsys.readouterr()
    assert "K=5 " in captured.out and "(not run)" in captured.out and "IWAE-10 (encoder)" in captured.out
    assert "stopped during BDMC at K=20 by Ctrl-C" in captured.out and "marked incomplete" in captured.out
    assert "raise-eval: interrupted during BDMC at K=20" in captured.err
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "BDMC at K=20" and doc["error"] is None
    assert list(doc["simulated"]["bdmc"]) == ["5"] and doc["simulated"]["IWAE-10 (encoder)"]["mean"] is not None


def test_an_error_part_way_keeps_the_finished_stages(vae_checkpoint, tmp_path, capsys, monkeypatch):
    _stop_at(monkeypatch, "aide", None, RuntimeError("out of memory"))
    out = tmp_path / "b.json"
    assert main(["bdmc", str(vae_checkpoint), *FAST, "--aide", "--aide-examples", "2", "--json", str(out)]) == 1
    captured = capsys.readouterr()
    assert "raise-eval: error: AIDE failed: RuntimeError: out of memory" in captured.err
    assert "Traceback" not in captured.err
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "AIDE"
    assert doc["error"] == "RuntimeError: out of memory" and list(doc["simulated"]["bdmc"]) == ["5", "20"]


def test_the_api_checks_its_settings_and_keeps_partial_results(vae_checkpoint, monkeypatch):
    from raise_eval.bidirectional import BDMCFailed, BDMCInterrupted, evaluate_bdmc
    from raise_eval.models.io.checkpoints import load_checkpoint

    model = load_checkpoint(vae_checkpoint).model
    small = dict(num_examples=4, chains=2, steps=(5, 20), iwae_samples=(1,), elbo_samples=3, pilot_chains=2)
    for bad, match in (
        (dict(target_accept=1.0), "target_accept must be a finite number strictly between 0 and 1"),
        (dict(aide_settings={"Ng": 0}), r"aide_ng must be an integer of at least 1"),
        (dict(aide_settings={"num_examples": 5}), "AIDE runs on 5 of the simulated examples"),
        (dict(aide_settings={"ng": 2}), "unknown: ng"),
        (dict(steps=()), "steps must be one or more integers of at least 1"),
    ):
        with pytest.raises(ValueError, match=match):
            evaluate_bdmc(model, **{**small, **bad})
    _stop_at(monkeypatch, "bdmc", 20, KeyboardInterrupt())
    with pytest.raises(BDMCInterrupted) as stop:
        evaluate_bdmc(model, **small)
    assert stop.value.report.interrupted == "BDMC at K=20" and list(stop.value.report.sandwich) == [5]
    _stop_at(monkeypatch, "bdmc", 5, ValueError("bad step size"))
    with pytest.raises(BDMCFailed) as failed:
        evaluate_bdmc(model, **small)
    report = failed.value.report
    assert report.sandwich == {} and report.error == "ValueError: bad step size"
    assert isinstance(failed.value.__cause__, ValueError)
    assert "stopped during BDMC at K=5 by an error" in report.format_table()  # the baselines alone, no 'vs truth'


def _report_with_gap(gap: float):
    from raise_eval.bidirectional import BDMCReport
    from raise_eval.estimators.bdmc import BDMCResult

    lower = torch.tensor([-100.0, -102.0], dtype=torch.float64)
    upper = lower + gap
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    result = BDMCResult(lower, upper, upper - lower, zeros, zeros, num_steps=100, num_chains=3, seconds=1.0)
    settings = {"model": "toy", "dtype": "float32", "device": "cpu", "num_examples": 2, "seed": 0, "kernel": "HMC",
                "schedule": "sigmoid", "chains": 3, "steps": [100], "checkpoint": "toy.pt"}
    baselines = {"ELBO": torch.tensor([-110.0, -111.0], dtype=torch.float64)}
    return BDMCReport(settings=settings, sandwich={100: result}, baselines=baselines)


def test_an_open_bdmc_sandwich_is_no_ground_truth():
    """A sandwich wider than a nat is not called the truth: the table and the JSON carry a bdmc-open warning."""
    open_report = _report_with_gap(5.0)
    table = open_report.format_table()
    assert "(truth)" not in table and "K=100 (open)" in table and "vs midpoint" in table
    assert "warning [bdmc-open]: the BDMC sandwich at K = 100 is 5.00 nats wide" in table
    assert [w["code"] for w in open_report.to_dict()["warnings"]] == ["bdmc-open"]
    closed = _report_with_gap(0.5)
    assert "K=100 (truth)" in closed.format_table() and "warning" not in closed.format_table()
    assert closed.to_dict()["warnings"] == []
