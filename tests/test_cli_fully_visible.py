"""`raise-eval evaluate` on fully visible models: the .npz convention and adabmDCA parameter files, test data as
arrays or alignments, --train-data for the base, the JSON document, --until-gap's verdict, and the refusals (wrong
shapes, values, alphabets, options that do not apply) before any work."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from raise_eval import exact
from raise_eval.cli import main
from tests.fully_visible_models import random_model

FAST = ["--steps", "200", "--ais-chains", "100", "--raise-chains", "4", "--no-progress", "--threads", "1"]
ALPHABET = "ABC"


def _adabmdca_file(model, path, alphabet: str) -> None:
    """The model in adabmDCA's text format: 'J i j a b value' for i < j, then 'h i a value'."""
    size, q = model.n_visible, model.num_states
    lines = [f"J {i} {j} {alphabet[a]} {alphabet[b]} {float(model.couplings[i, a, j, b])!r}"
             for i in range(size) for j in range(i + 1, size) for a in range(q) for b in range(q)]  # fmt: skip
    lines += [f"h {i} {alphabet[a]} {float(model.fields[i, a])!r}" for i in range(size) for a in range(q)]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def files(tmp_path):
    categorical = random_model("categorical", 5, 3, seed=1, scale=0.5)
    np.savez(tmp_path / "potts.npz", h=categorical.fields.numpy(), J=categorical.couplings.numpy(),
             visible="categorical", alphabet=ALPHABET)  # fmt: skip
    _adabmdca_file(categorical, tmp_path / "params.dat", ALPHABET)
    rng = np.random.default_rng(0)
    test = rng.integers(0, 3, (12, 5))
    np.save(tmp_path / "test.npy", test)
    np.save(tmp_path / "train.npy", rng.integers(0, 3, (200, 5)))
    (tmp_path / "test.fasta").write_text("".join(f">s{i}\n{''.join(ALPHABET[a] for a in row)}\n"
                                                 for i, row in enumerate(test)))  # fmt: skip
    spin = random_model("spin", 6, seed=2, scale=0.3)
    np.savez(tmp_path / "ising.npz", h=spin.fields.numpy(), J=spin.couplings.numpy(), visible="spin")
    np.save(tmp_path / "spin_test.npy", rng.choice([-1.0, 1.0], (10, 6)))
    return tmp_path, categorical, spin, test


def test_an_npz_model_with_array_data_and_training_data(files, capsys):
    folder, model, _, test = files
    out = folder / "report.json"
    args = ["evaluate", str(folder / "potts.npz"), "--data", str(folder / "test.npy"), "--train-data",
            str(folder / "train.npy"), "--ti-chains", "20", "--json", str(out), *FAST]  # fmt: skip
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "fully-visible categorical(5x3)" in table and "start: base-rates" in table
    assert "TI (not in the verdict)" in table
    document = json.loads(out.read_text())
    log_z = exact.log_partition(model)
    assert document["log_z"]["exact"] == pytest.approx(log_z, abs=1e-4)
    settings = document["settings"]
    assert settings["sites"] == "categorical" and settings["alphabet"] == ALPHABET
    assert settings["base_rates_from"] == f"--train-data {folder / 'train.npy'}"
    assert document["log_z"]["thermodynamic_integration"]["num_chains"] == 20
    expected = float(exact.log_unnormalized_visible(model, torch.as_tensor(test)).mean()) - log_z
    assert document["log_likelihood"]["exact"] == pytest.approx(expected, abs=1e-4)


def test_an_adabmdca_file_with_an_alignment_gives_the_npz_model_s_numbers(files, capsys):
    folder, *_ = files
    runs = []
    for model_file, data in (("potts.npz", "test.npy"), ("params.dat", "test.fasta")):
        out = folder / f"{model_file}.json"
        extra = ["--alphabet", ALPHABET] if model_file == "params.dat" else []
        assert main(["evaluate", str(folder / model_file), "--data", str(folder / data), *extra, "--init", "uniform",
                     "--dtype", "float64", "--json", str(out), *FAST]) == 0  # fmt: skip
        runs.append(json.loads(out.read_text()))
    capsys.readouterr()
    assert runs[0]["log_z"] == runs[1]["log_z"] and runs[0]["log_likelihood"] == runs[1]["log_likelihood"]


def test_until_gap_certifies_a_spin_model(files, capsys):
    folder, _, spin, _ = files
    out = folder / "cert.json"
    code = main(["evaluate", str(folder / "ising.npz"), "--data", str(folder / "spin_test.npy"), "--until-gap", "0.1",
                 "--max-steps", "800", "--json", str(out), *FAST])  # fmt: skip
    table = capsys.readouterr().out
    assert code == 0 and "verdict: CLOSED" in table and "note: the base is uniform fields" in table
    document = json.loads(out.read_text())
    assert document["verdict"] == "closed"


@pytest.mark.parametrize(
    "model_file, extra, message",
    [
        ("potts.npz", ["--data", "spin_test.npy"], r"--data .*spin_test.npy: it must be shaped \(\.\.\., 5\)"),
        ("potts.npz", ["--data", "test.fasta", "--alphabet", "ABCD"], "--alphabet has 4 symbols"),
        ("potts.npz", ["--data", "test.fasta", "--alphabet", "XYZ"], "--alphabet XYZ differs from the model's"),
        ("ising.npz", ["--data", "test.fasta"], "the alignment .*test.fasta is for categorical sites"),
        ("ising.npz", ["--data", "spin_test.npy", "--alphabet", "protein"], "--alphabet reads alignments into"),
        ("potts.npz", [], "no --data: a fully visible model's test data are a file"),
        ("potts.npz", ["--data", "mnist"], "--data mnist: a fully visible model's test data are a file"),
        (
            "potts.npz",
            ["--data", "test.npy", "--init", "uniform", "--train-data", "train.npy"],
            "--train-data gives the base's site frequencies, which --init uniform does not use",
        ),
        (
            "params.dat",
            ["--data", "test.fasta"],
            "letter 'B' is not in the alphabet '-ACDEFGHIKLMNPQRSTVWY'.*give --alphabet",
        ),
        ("potts.npz", ["--data", "test.npy", "--log-f", "ais"], "a fully visible model's is exact"),
        (
            "potts.npz",
            ["--data", "test.npy", "--gpu-products", "half-split"],
            "--gpu-products half-split has nothing to compute in a fully visible model",
        ),
    ],
)
def test_refusals_name_the_option(files, capsys, model_file, extra, message):
    folder, *_ = files
    extra = [str(folder / a) if a.endswith((".npy", ".fasta")) else a for a in extra]
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", str(folder / model_file), *extra, *FAST])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("raise-eval: error: ")
    assert re.search(message, err[0]), err[0]
