"""`raise-eval evaluate` on checkpoints of typed layers: a Potts RBM from an alignment (FASTA, A2M), a
Gaussian-Bernoulli RBM on real vectors (its log-likelihood said to be a density), a spin RBM on 0/1 data, and the data
and alphabet options refused before any work when they do not fit the model."""

import gzip
import json

import numpy as np
import pytest

from raise_eval.cli import main

FAST = [
    "--steps",
    "30",
    "--ais-chains",
    "200",
    "--raise-examples",
    "10",
    "--raise-chains",
    "4",
    "--no-progress",
    "--threads",
    "1",
]
PROTEIN = "-ACDEFGHIKLMNPQRSTVWY"
RNG = np.random.default_rng(0)


def _potts(tmp_path, alphabet=PROTEIN):
    extra = {} if alphabet is None else {"alphabet": alphabet}
    np.savez(
        tmp_path / "potts.npz",
        W=RNG.normal(size=(5, 21, 3)) * 0.3,
        vbias=RNG.normal(size=(5, 21)),
        hbias=RNG.normal(size=3),
        visible="categorical",
        hidden="bernoulli",
        **extra,
    )
    with gzip.open(tmp_path / "family.fasta.gz", "wt") as f:
        for i in range(40):
            f.write(f">seq{i}\n{''.join(PROTEIN[j] for j in RNG.integers(0, 21, 5))}\n")
    return tmp_path / "potts.npz", tmp_path / "family.fasta.gz"


def test_a_potts_rbm_from_a_fasta_file(tmp_path, capsys):
    model, fasta = _potts(tmp_path)
    out = tmp_path / "r.json"
    assert (
        main(["evaluate", str(model), "--data", str(fasta), "--train-data", str(fasta), *FAST, "--json", str(out)]) == 0
    )
    doc = json.loads(out.read_text())
    assert doc["settings"]["model"] == "RBM categorical(5x21) - bernoulli(3)"
    assert doc["settings"]["alphabet"] == PROTEIN and doc["settings"]["likelihood"] == "probability"
    assert doc["settings"]["base_rates_from"] == f"--train-data {fasta}"
    assert doc["log_likelihood"]["exact"] is not None
    assert "average test log-likelihood (nats)" in capsys.readouterr().out


def test_an_a2m_file_and_a_given_alphabet(tmp_path):
    model, _ = _potts(tmp_path, alphabet=None)
    a2m = tmp_path / "family.a2m"
    a2m.write_text("".join(f">s{i}\nAC..dDE-\n" for i in range(6)))  # 'd' and '..' are insertions
    out = tmp_path / "r.json"
    argv = ["evaluate", str(model), "--data", str(a2m), "--init", "uniform", *FAST, "--json", str(out)]
    assert main([*argv, "--alphabet", "protein"]) == 0
    assert json.loads(out.read_text())["settings"]["alphabet"] == PROTEIN


@pytest.mark.parametrize(
    "options,message",
    [
        ([], "the checkpoint has none: give --alphabet protein, rna, dna or the 21 symbols"),
        (["--alphabet", "rna"], "--alphabet has 5 symbols (-ACGU) but the model's sites have q = 21 states"),
    ],
)
def test_an_alignment_needs_the_right_alphabet(tmp_path, capsys, options, message):
    model, fasta = _potts(tmp_path, alphabet=None)
    with pytest.raises(SystemExit):
        main(["evaluate", str(model), "--data", str(fasta), "--init", "uniform", *options, *FAST])
    assert message in capsys.readouterr().err


def test_an_alphabet_that_differs_from_the_checkpoints_is_refused(tmp_path, capsys):
    model, fasta = _potts(tmp_path)
    with pytest.raises(SystemExit):
        main(["evaluate", str(model), "--data", str(fasta), "--alphabet", PROTEIN[::-1], "--init", "uniform", *FAST])
    assert "differs from the checkpoint's alphabet" in capsys.readouterr().err


def test_an_alignment_for_a_binary_model_is_refused(tmp_path, capsys):
    _, fasta = _potts(tmp_path)
    np.savez(tmp_path / "rbm.npz", W=np.zeros((5, 2)), vbias=np.zeros(5), hbias=np.zeros(2))
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "rbm.npz"), "--data", str(fasta), "--init", "uniform", *FAST])
    assert (
        "is for a categorical (Potts) visible layer; this checkpoint's visible units are binary"
        in capsys.readouterr().err
    )


def test_an_alphabet_in_other_case_is_the_checkpoints_and_misplaced_alphabets_are_named(tmp_path, capsys):
    """A new user's findings: the checkpoint's alphabet in lower case was called 'different' (letters are read
    without regard to case); --alphabet with a binary model was told to give a .npy file (dropping the flag is the
    fix); a missing alignment for a binary model was called an alignment for a Potts layer, not missing."""
    model, fasta = _potts(tmp_path)
    main(["evaluate", str(model), "--data", str(fasta), f"--alphabet={PROTEIN.lower()}", "--init", "uniform", *FAST])
    assert "RAISE (conservative)" in capsys.readouterr().out
    np.savez(tmp_path / "rbm.npz", W=np.zeros((5, 2)), vbias=np.zeros(5), hbias=np.zeros(2))
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "rbm.npz"), "--data", "digits", "--alphabet", "protein", *FAST])
    assert "visible units are binary: drop --alphabet" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "rbm.npz"), "--data", str(tmp_path / "gone.fasta"), *FAST])
    assert "gone.fasta does not exist" in capsys.readouterr().err


def test_a_gaussian_rbm_reports_a_density(tmp_path, capsys):
    np.savez(
        tmp_path / "gb.npz",
        W=RNG.normal(size=(4, 3)) * 0.5,
        vbias=RNG.normal(size=4),
        hbias=np.zeros(3),
        sigma=np.full(4, 0.5),
        visible="gaussian",
        hidden="bernoulli",
    )
    x = RNG.normal(size=(30, 4))
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "r.json"
    argv = [
        "evaluate",
        str(tmp_path / "gb.npz"),
        "--data",
        str(tmp_path / "x.npy"),
        "--train-data",
        str(tmp_path / "x.npy"),
        "--dtype",
        "float64",
        *FAST,
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    assert "a log-density, in the data's units" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["settings"]["likelihood"] == "density" and doc["settings"]["units"] == ["gaussian", "bernoulli"]
    assert doc["log_test_mass"] is None  # a sum of densities bounds nothing
    x[3, 2] = np.inf
    np.save(tmp_path / "x.npy", x)
    with pytest.raises(SystemExit):
        main(argv)
    assert "NaN or infinite values, e.g. at row 3, column 2" in capsys.readouterr().err


def test_a_spin_rbm_takes_binary_data(tmp_path):
    np.savez(
        tmp_path / "spin.npz",
        W=RNG.normal(size=(6, 3)) * 0.3,
        vbias=np.zeros(6),
        hbias=np.zeros(3),
        visible="spin",
        hidden="spin",
    )
    np.save(tmp_path / "v.npy", RNG.integers(0, 2, size=(20, 6)))
    out = tmp_path / "r.json"
    argv = [
        "evaluate",
        str(tmp_path / "spin.npz"),
        "--data",
        str(tmp_path / "v.npy"),
        "--train-data",
        str(tmp_path / "v.npy"),
        *FAST,
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    assert json.loads(out.read_text())["settings"]["model"] == "RBM spin(6) - spin(3)"


def test_an_alphabet_that_starts_with_the_gap_is_a_value_not_an_option(tmp_path):
    """Issue 45: `--alphabet -ACGT...` was taken by argparse for an option ("expected one argument")."""
    model, fasta = _potts(tmp_path, alphabet=None)
    out = tmp_path / "r.json"
    argv = ["evaluate", str(model), "--data", str(fasta), "--init", "uniform", *FAST, "--json", str(out)]
    assert main([*argv, "--alphabet", PROTEIN]) == 0
    assert json.loads(out.read_text())["settings"]["alphabet"] == PROTEIN


def test_an_alignment_of_the_wrong_length_for_the_model_names_the_file(tmp_path, capsys):
    model, _ = _potts(tmp_path)
    long = tmp_path / "long.fasta"
    long.write_text(">a\nACDEFG\n")
    with pytest.raises(SystemExit):
        main(["evaluate", str(model), "--data", str(long), "--init", "uniform", *FAST])
    assert f"{long}: the sequences have 6 aligned positions but the model has 5 sites" in capsys.readouterr().err
