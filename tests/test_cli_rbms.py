"""rbms training runs (.h5) on the command line: `evaluate run.h5` reads the last update or `--update N`, and
`trajectory run.h5` anneals through every update (a Potts RBM's run, a PBM's run, and a folder of fully visible .npz
checkpoints); enumerable models checked against the exact log Z of rbms' own energies."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from raise_eval.cli import main
from tests.models.test_rbms_files import pbm_arrays, pbm_minus_energy, pbrbm_arrays, pbrbm_minus_energy, write_run

h5py = pytest.importorskip("h5py")

FAST = ["--ais-chains", "200", "--raise-examples", "10", "--raise-chains", "4", "--no-progress", "--threads", "1"]


def _log_z_of_rbms_energy(arrays) -> float:
    L, q, _ = arrays["weight_matrix"].shape
    codes = np.array(list(itertools.product(range(q), repeat=L)))
    return float(np.logaddexp.reduce(pbrbm_minus_energy(arrays, codes)))


@pytest.fixture
def potts_run(tmp_path):
    """A Potts-Bernoulli run of 4 sites, 3 states, 2 hidden units at updates 1, 5, 20 (small steps between them),
    and 30 test sequences (codes)."""
    rng = np.random.default_rng(0)
    first = pbrbm_arrays(rng, L=4, q=3, n_h=2)
    updates, current = {}, {k: 0.3 * v for k, v in first.items()}
    for n in (1, 5, 20):
        current = {k: v + 0.2 * rng.normal(size=v.shape) for k, v in current.items()}
        updates[n] = current
    path = write_run(tmp_path / "run.h5", "PBRBM", updates)
    data = tmp_path / "test.npy"
    np.save(data, rng.integers(0, 3, size=(30, 4)))
    return path, data, updates


def test_evaluate_reads_the_last_update_or_the_one_asked_for(potts_run, tmp_path):
    path, data, updates = potts_run
    for flags, update in (([], 20), (["--update", "5"], 5)):
        out = tmp_path / f"r{update}.json"
        args = ["evaluate", str(path), "--data", str(data), "--init", "uniform", "--steps", "30", *FAST]
        assert main([*args, *flags, "--json", str(out)]) == 0
        doc = json.loads(out.read_text())
        assert doc["settings"]["update"] == update
        log_z = doc["log_z"]
        # the exact log Z raise-eval enumerated is that of rbms' own energy of the update read (float32 run)
        assert log_z["exact"] == pytest.approx(_log_z_of_rbms_energy(updates[update]), rel=1e-5)
        assert abs(log_z["ais"]["estimate"] - log_z["exact"]) < 4 * log_z["ais"]["stderr"]


def test_update_is_refused_for_other_checkpoints_and_a_missing_update_is_named(potts_run, tmp_path, capsys):
    path, data, _ = potts_run
    np.savez(tmp_path / "m.npz", W=np.zeros((4, 2)), vbias=np.zeros(4), hbias=np.zeros(2))
    for checkpoint, message in ((tmp_path / "m.npz", "--update chooses an update of an rbms run's HDF5 file"),
                                (path, "has no update_3; its updates are 1, 5, 20")):  # fmt: skip
        with pytest.raises(SystemExit) as refused:
            main(["evaluate", str(checkpoint), "--data", str(data), "--update", "3", *FAST])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and message in err and err.count("\n") == 1


def test_trajectory_anneals_through_every_update(potts_run, tmp_path, capsys):
    path, data, _ = potts_run
    out = tmp_path / "t.json"
    args = ["trajectory", str(path), "--data", str(data), "--init", "uniform", "--steps", "20", "--bootstrap", "20"]
    code = main([*args, *FAST, "--json", str(out)])
    assert code in (0, 3), capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert [c["step"] for c in doc["checkpoints"]] == [1, 5, 20]
    assert doc["settings"]["checkpoints"] == ["update_1", "update_5", "update_20"]


@pytest.fixture
def pbm_run(tmp_path):
    """An rbms PBM run of 3 sites, 3 states at updates 1, 4, 9, with test and training codes."""
    rng = np.random.default_rng(1)
    updates, current = {}, {k: 0.3 * v for k, v in pbm_arrays(rng, 3, 3).items()}
    for n in (1, 4, 9):
        current = {k: v + 0.2 * d for (k, v), d in zip(current.items(), pbm_arrays(rng, 3, 3).values())}
        updates[n] = current
    np.save(tmp_path / "test.npy", rng.integers(0, 3, size=(40, 3)))
    np.save(tmp_path / "train.npy", rng.integers(0, 3, size=(100, 3)))
    return write_run(tmp_path / "pbm.h5", "PBM", updates), tmp_path / "test.npy", tmp_path / "train.npy", updates


def test_trajectory_of_an_rbms_pbm_run_against_its_own_energy(pbm_run, tmp_path, capsys):
    path, test, train, updates = pbm_run
    out = tmp_path / "pbm.json"
    args = ["trajectory", str(path), "--data", str(test), "--train-data", str(train), "--steps", "20"]
    code = main([*args, *FAST, "--bootstrap", "20", "--dtype", "float64", "--json", str(out)])
    assert code in (0, 3), capsys.readouterr().err
    assert "3 checkpoints of a fully visible model of 3 categorical sites" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["settings"]["base_rates_from"] == f"--train-data {train}"
    codes = np.array(list(itertools.product(range(3), repeat=3)))
    for entry, n in zip(doc["checkpoints"], (1, 4, 9)):
        assert entry["step"] == n
        # exact log Z of rbms' own PBM energy: the reader's fields and couplings give the same distribution
        assert entry["log_z_exact"] == pytest.approx(float(np.logaddexp.reduce(pbm_minus_energy(updates[n], codes))))
        assert abs(entry["log_z"] - entry["log_z_exact"]) < 4 * entry["log_z_stderr"]


def test_trajectory_of_a_folder_of_fully_visible_npz_checkpoints(pbm_run, tmp_path, capsys):
    from raise_eval.models.io import load_checkpoint

    path, test, _, _ = pbm_run
    folder = tmp_path / "run"
    folder.mkdir()
    for n in (1, 4, 9):
        model = load_checkpoint(path, update=n).model
        np.savez(folder / f"step_{n}.npz", h=model.fields.numpy(), J=model.couplings.numpy(), visible="categorical")
    out = tmp_path / "npz.json"
    code = main(["trajectory", str(folder), "--data", str(test), "--init", "uniform", "--steps", "10", *FAST,
                 "--bootstrap", "20", "--json", str(out)])  # fmt: skip
    assert code in (0, 3), capsys.readouterr().err
    assert json.loads(out.read_text())["settings"]["checkpoints"] == ["step_1.npz", "step_4.npz", "step_9.npz"]
    with pytest.raises(SystemExit) as refused:  # a fully visible model's data are a file: no dataset to default to
        main(["trajectory", str(folder), "--init", "uniform", *FAST])
    assert refused.value.code == 2 and "give --data FILE" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # the start fitted to training data that were not given
        main(["trajectory", str(folder), "--data", str(test), *FAST])
    assert refused.value.code == 2 and "--init base-rates fits the start" in capsys.readouterr().err


def test_evaluate_reads_an_rbms_pbm_run_as_a_fully_visible_model(pbm_run, tmp_path):
    """`evaluate pbm.h5` runs the last update (a FullyVisibleModel) through the fully visible plan: its exact log Z is
    that of rbms' own PBM energy, and AIS lies within its standard error of it."""
    path, test, train, updates = pbm_run
    out = tmp_path / "pbm_eval.json"
    args = ["evaluate", str(path), "--data", str(test), "--train-data", str(train), "--steps", "30",
            "--dtype", "float64"]  # fmt: skip
    assert main([*args, *FAST, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["update"] == 9 and doc["settings"]["sites"] == "categorical"
    codes = np.array(list(itertools.product(range(3), repeat=3)))
    log_z = doc["log_z"]
    assert log_z["exact"] == pytest.approx(float(np.logaddexp.reduce(pbm_minus_energy(updates[9], codes))))
    assert abs(log_z["ais"]["estimate"] - log_z["exact"]) < 4 * log_z["ais"]["stderr"]


def test_a_pbm_run_follows_its_trajectory_with_smc_and_refuses_adaptive_links(pbm_run, tmp_path, capsys):
    """SMC (--resample-ess) runs along a fully visible trajectory, every checkpoint against the exact log Z of rbms'
    own energy; --links adaptive, built for layered machines' paths, is refused before any work. Over seeds 0-29
    (90 checkpoints) the z-scores had mean 0.22, spread 0.99 and largest |z| 2.24: a 4-SE miss is rare."""
    path, test, train, updates = pbm_run
    out = tmp_path / "smc.json"
    args = ["trajectory", str(path), "--data", str(test), "--train-data", str(train), "--steps", "20", *FAST]
    # ten replicates: the standard error is their spread (9 degrees of freedom, so 4 of them is a rare miss)
    code = main([*args, "--resample-ess", "0.999", "--replicates", "10", "--ais-chains", "400", "--bootstrap", "20",
                 "--json", str(out)])  # fmt: skip
    assert code in (0, 3), capsys.readouterr().err
    doc = json.loads(out.read_text())
    codes = np.array(list(itertools.product(range(3), repeat=3)))
    for entry, n in zip(doc["checkpoints"], (1, 4, 9)):
        assert entry["log_z_exact"] == pytest.approx(float(np.logaddexp.reduce(pbm_minus_energy(updates[n], codes))))
        assert abs(entry["log_z"] - entry["log_z_exact"]) < 4 * entry["log_z_stderr"]
    assert doc["checkpoints"][-1]["resamplings"] > 0  # the chains were resampled on the way
    with pytest.raises(SystemExit) as refused:
        main([*args, "--links", "adaptive"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "--links adaptive follows RBMs' and DBMs' trajectories" in err


def test_trajectory_reads_alignments_with_the_alphabet_given(tmp_path, capsys):
    """rbms files do not record their letters: `trajectory run.h5 --alphabet protein` reads FASTA test and training
    sequences (a new user's PBM run with its alignments was refused: `--alphabet` was evaluate's only), and gives the
    numbers the same sequences give as integer codes."""
    rng = np.random.default_rng(2)
    L, q = 3, 21
    updates = {n: {k: 0.1 * v for k, v in pbm_arrays(rng, L, q).items()} for n in (1, 5)}
    path = write_run(tmp_path / "pbm.h5", "PBM", updates)
    letters = "-ACDEFGHIKLMNPQRSTVWY"  # rbms' protein order, as adabmDCA's
    files = {}
    for name, count in (("test", 30), ("train", 200)):
        codes = rng.integers(0, q, size=(count, L))
        np.save(tmp_path / f"{name}.npy", codes)
        (tmp_path / f"{name}.fasta").write_text("".join(f">s{i}\n{''.join(letters[c] for c in row)}\n"
                                                        for i, row in enumerate(codes)))  # fmt: skip
        files[name] = codes
    docs = {}
    for form, extra in (("fasta", ["--alphabet", "protein"]), ("npy", [])):
        out = tmp_path / f"{form}.json"
        args = ["trajectory", str(path), "--data", str(tmp_path / f"test.{form}"), "--train-data",
                str(tmp_path / f"train.{form}"), "--steps", "5", *FAST, "--bootstrap", "10", "--json", str(out)]
        assert main([*args, *extra]) in (0, 3), capsys.readouterr().err
        docs[form] = json.loads(out.read_text())
    assert docs["fasta"]["settings"]["alphabet"] == letters
    for a, b in zip(docs["fasta"]["checkpoints"], docs["npy"]["checkpoints"]):
        assert a["log_z"] == b["log_z"] and a["log_z_exact"] == b["log_z_exact"]
