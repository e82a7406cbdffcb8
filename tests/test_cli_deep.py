"""`raise-eval evaluate` on DBM and DBN checkpoints (.pt and .npz): the same table and JSON keys as for RBMs."""

import json

import numpy as np
import pytest
import torch
from raise_eval.models import DBM, DBN
from raise_eval.models.io.checkpoints import save_checkpoint, save_npz

from raise_eval import exact
from raise_eval.cli import build_parser, main

FAST = ["--steps", "30", "--ais-chains", "200", "--raise-examples", "20", "--raise-chains", "4", "--no-progress"]
KEYS = [
    "log_z.ais.estimate",
    "log_z.ais.stderr",
    "log_z.exact",
    "log_likelihood.ais.mean",
    "log_likelihood.raise.mean",
    "log_likelihood.raise.stderr",
    "log_likelihood.raise.subset_mean",
    "log_likelihood.raise.subset_stderr",
    "log_likelihood.raise.control_variate.alpha",
    "log_likelihood.exact",
    "log_likelihood.gap",
    "log_likelihood.log_unnormalized.method",
    "settings",
    "timing.seconds",
]


def _get(d, dotted):
    for key in dotted.split("."):
        d = d[key]
    return d


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deep")
    g = torch.Generator().manual_seed(0)
    test = (torch.rand(120, 12, generator=g) < 0.3).float()
    train = (torch.rand(400, 12, generator=g) < 0.3).float()
    np.save(folder / "test.npy", test.numpy())
    np.save(folder / "train.npy", train.numpy())
    return folder, test


@pytest.mark.parametrize("kind", ["dbm", "dbn"])
@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_deep_checkpoints_evaluate(tmp_path, data_files, kind, suffix, capsys):
    folder, test = data_files
    g = torch.Generator().manual_seed(1)
    cls = DBM if kind == "dbm" else DBN
    model = cls.random([12, 6, 5] if kind == "dbm" else [12, 6, 5, 4], weight_std=0.5, generator=g)
    ckpt = tmp_path / f"model{suffix}"
    (save_checkpoint if suffix == ".pt" else save_npz)(ckpt, model)
    out = tmp_path / "r.json"
    args = ["evaluate", str(ckpt), "--data", str(folder / "test.npy"), "--train-data", str(folder / "train.npy")]
    assert main([*args, *FAST, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert ("(heating)" if kind == "dbm" else "(heated)") in table and "without control variate" in table
    doc = json.loads(out.read_text())
    assert doc["log_likelihood"]["raise"]["start"] == ("heating" if kind == "dbm" else "heated")
    assert ("dbn_start" in doc["settings"]) == (kind == "dbn")
    for key in KEYS:
        _get(doc, key)
    assert doc["log_likelihood"]["exact"] == pytest.approx(
        float(exact.log_likelihood(model.to(dtype=torch.float64), test.double()).mean()), abs=1e-3
    )


def test_log_f_options(tmp_path, data_files, capsys):
    folder, _ = data_files
    model = DBM.random([12, 6, 5], weight_std=0.5, generator=torch.Generator().manual_seed(2))
    ckpt = tmp_path / "dbm.pt"
    save_checkpoint(ckpt, model)
    # --exact never: otherwise the exact log f(v) of this small DBM replaces every estimator
    args = ["evaluate", str(ckpt), "--data", str(folder / "test.npy"), "--init", "uniform", "--exact", "never", *FAST]
    assert main([*args, "--log-f", "mean-field", "--cv-alpha", "optimal"]) == 0
    table = capsys.readouterr().out
    assert "mean-field bound" in table and "(optimal)" in table
    assert main([*args, "--log-f-samples", "7", "--cv-alpha", "0.5"]) == 0
    table = capsys.readouterr().out
    assert "7 importance samples" in table and "alpha = 0.5" in table
    assert "AIS (log f-hat - log Z-hat)" in table and "not a bound" in table
    assert main([*args, "--log-f", "ais", "--log-f-steps", "9", "--log-f-chains", "3", "--log-f-check", "5"]) == 0
    table = capsys.readouterr().out
    assert "AIS, 9 steps x 3 chains per vector" in table and "36 steps) on 5 test vectors" in table
    assert main([*args, "--log-f-steps", "9"]) == 0  # under --log-f auto, an AIS option chooses AIS
    assert "AIS, 9 steps x 10 chains per vector" in capsys.readouterr().out
    for bad, says in (
        (["--log-f", "ais", "--log-f-samples", "7"], "--log-f-samples sets importance sampling, but --log-f is ais"),
        (["--log-f", "importance", "--log-f-chains", "3"], "--log-f-chains sets per-vector AIS, but --log-f is importance"),
        (["--log-f-samples", "7", "--log-f-steps", "3"], "choose one"),
    ):
        with pytest.raises(SystemExit):
            main([*args, *bad])
        assert says in capsys.readouterr().err
    assert main([*args[:3], str(folder / "test.npy"), "--init", "uniform", *FAST]) == 0
    table = capsys.readouterr().out
    assert "log f(v): exact, by enumeration" in table and "AIS (optimistic)" in table
    with pytest.raises(SystemExit):
        main([*args, "--cv-alpha", "best"])
    assert "--cv-alpha must be a finite number or 'optimal', got 'best'" in capsys.readouterr().err


def test_dbn_start_option(tmp_path, data_files, capsys):
    """--dbn-start unrolled runs the paper's unrolling (table, JSON start and settings say so); a bad value is refused
    before any work with the choices; a DBM ignores it."""
    folder, test = data_files
    model = DBN.random([12, 6, 5, 4], weight_std=0.5, generator=torch.Generator().manual_seed(3))
    ckpt = tmp_path / "dbn.pt"
    save_checkpoint(ckpt, model)
    out = tmp_path / "r.json"
    args = ["evaluate", str(ckpt), "--data", str(folder / "test.npy"), "--init", "uniform", *FAST]
    assert main([*args, "--dbn-start", "unrolled", "--json", str(out)]) == 0
    assert "(unrolled)" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["log_likelihood"]["raise"]["start"] == "unrolled" and doc["settings"]["dbn_start"] == "unrolled"
    with pytest.raises(SystemExit):
        main([*args, "--dbn-start", "warm"])
    err = capsys.readouterr().err
    assert "--dbn-start" in err and "heated" in err and "unrolled" in err


def test_help_documents_the_deep_options():
    text = build_parser()._subparsers._group_actions[0].choices["evaluate"].format_help()
    for option in ["--log-f", "--log-f-samples", "--log-f-steps", "--log-f-chains", "--log-f-check", "--until-gap",
                   "--time-budget", "--max-steps", "--cv-alpha", "--dbn-start", "DBM", "DBN"]:
        assert option in text
