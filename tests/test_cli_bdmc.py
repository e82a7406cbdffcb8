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
