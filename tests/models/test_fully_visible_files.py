"""Fully visible models in checkpoint files (`models/io/fully_visible_files.py`): the .npz convention of issue 42
(h, J, visible, alphabet) and the .pt round trip through save_checkpoint/load_checkpoint, with bad files refused
naming the file and what is wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from raise_eval.models import FullyVisibleModel
from raise_eval.models.io.builders import CheckpointError

from raise_eval import exact, load_checkpoint, save_checkpoint


def _potts(L=4, q=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(L, q, generator=g, dtype=torch.float64)
    J = torch.randn(L, q, L, q, generator=g, dtype=torch.float64) * 0.3
    J = (J + J.permute(2, 3, 0, 1)) / 2
    for i in range(L):
        J[i, :, i, :] = 0
    return h, J


def _ising(n=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    J = torch.randn(n, n, generator=g, dtype=torch.float64) * 0.4
    J = (J + J.T) / 2
    J.fill_diagonal_(0)
    return torch.randn(n, generator=g, dtype=torch.float64), J


def test_the_npz_convention_reads_categorical_spin_and_bernoulli_models(tmp_path):
    h, J = _potts()
    np.savez(tmp_path / "potts.npz", h=h.numpy(), J=J.numpy(), visible="categorical", alphabet="ACG")
    ckpt = load_checkpoint(tmp_path / "potts.npz")
    model = ckpt.model
    assert model.family == "fully-visible" and model.sites == "categorical" and model.alphabet == "ACG"
    assert model.dtype == torch.float64 and torch.equal(model.couplings, J)
    assert exact.log_partition(model) == pytest.approx(exact.log_partition(FullyVisibleModel(h, J)), abs=1e-12)
    np.savez(tmp_path / "no_visible.npz", h=h.numpy().astype(np.float32), J=J.numpy().astype(np.float32))
    assert load_checkpoint(tmp_path / "no_visible.npz").model.sites == "categorical"  # a 4-d J is categorical
    h, J = _ising()
    for sites in ("spin", "bernoulli"):
        np.savez(tmp_path / f"{sites}.npz", h=h.numpy(), J=J.numpy(), visible=sites, extra=np.zeros(2))
        ckpt = load_checkpoint(tmp_path / f"{sites}.npz")
        assert ckpt.model.sites == sites and ckpt.metadata["ignored_variables"] == ["extra"]


@pytest.mark.parametrize("kind", ["categorical", "spin"])
def test_save_checkpoint_round_trips_a_fully_visible_model(tmp_path, kind):
    if kind == "categorical":
        model = FullyVisibleModel(*_potts(), alphabet="ACG")
    else:
        model = FullyVisibleModel(*_ising(), "spin")
    save_checkpoint(tmp_path / "m.pt", model, metadata={"source": "test"})
    loaded = load_checkpoint(tmp_path / "m.pt")
    assert loaded.metadata["source"] == "test" and loaded.model.sites == model.sites
    assert loaded.model.alphabet == model.alphabet
    assert torch.equal(loaded.model.fields, model.fields) and torch.equal(loaded.model.couplings, model.couplings)


def test_bad_fully_visible_files_are_refused_naming_the_file_and_the_fault(tmp_path):
    h, J = _ising()
    np.savez(tmp_path / "ambiguous.npz", h=h.numpy(), J=J.numpy())
    with pytest.raises(CheckpointError, match=r"ambiguous.npz: J is shaped \(5, 5\) and there is no visible array"):
        load_checkpoint(tmp_path / "ambiguous.npz")
    np.savez(tmp_path / "kind.npz", h=h.numpy(), J=J.numpy(), visible="potts")
    with pytest.raises(CheckpointError, match=r"kind.npz: visible = 'potts'; a fully visible model's sites are"):
        load_checkpoint(tmp_path / "kind.npz")
    bad = J.clone()
    bad[0, 1] += 1.0
    np.savez(tmp_path / "asym.npz", h=h.numpy(), J=bad.numpy(), visible="spin")
    with pytest.raises(CheckpointError, match="asym.npz: .*symmetric"):
        load_checkpoint(tmp_path / "asym.npz")


def test_evaluate_runs_a_fully_visible_checkpoint(tmp_path, capsys):
    from raise_eval.cli import main

    h, J = _potts()
    np.savez(tmp_path / "potts.npz", h=h.numpy(), J=J.numpy())
    np.save(tmp_path / "test.npy", np.zeros((3, h.shape[0]), dtype=np.int64))
    code = main(["evaluate", str(tmp_path / "potts.npz"), "--data", str(tmp_path / "test.npy"), "--steps", "2",
                 "--ais-chains", "4", "--raise-chains", "2", "--no-progress", "--threads", "1"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0 and "fully-visible categorical" in out.out and "Traceback" not in out.err


# ------------------------------------------------------------------------------------------- adabmDCA's files
def _adabmdca_text(h, J, tokens, both_triangles=False) -> str:
    """adabmDCA's text format written by hand: 'J i j a b value' for i < j (and j > i too), 'h i a value'."""
    L, q = h.shape
    lines = ["# written by the test"]
    for i in range(L):
        for j in range(L):
            if i < j or (both_triangles and i > j):
                value = J[i, :, j, :] / (2 if both_triangles else 1)
                for a in range(q):
                    lines += [f"J {i} {j} {tokens[a]} {tokens[b]} {float(value[a, b])!r}" for b in range(q)]
    lines += [f"h {i} {tokens[a]} {float(h[i, a])!r}" for i in range(L) for a in range(q)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("both_triangles", [False, True])
@pytest.mark.parametrize("compressed", [False, True])
def test_an_adabmdca_parameter_file_reads_as_the_model(tmp_path, compressed, both_triangles):
    import gzip

    from raise_eval.models import read_adabmdca_parameters

    h, J = _potts(L=4, q=5)
    text = _adabmdca_text(h, J, "-ACGU", both_triangles)
    path = tmp_path / ("params.dat.gz" if compressed else "params.dat")
    if compressed:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    model = read_adabmdca_parameters(path, alphabet="rna")
    assert model.alphabet == "-ACGU" and model.sites == "categorical"
    assert torch.allclose(model.fields, h, atol=1e-15) and torch.allclose(model.couplings, J, atol=1e-15)


@pytest.mark.parametrize(
    "line, message",
    [
        ("J 0 1 A Z 0.5", "line 2: letter 'Z' is not in the alphabet '-ACGU'"),
        ("J 0 0 A C 0.5", "line 2: a self-coupling (i = j = 0)"),
        ("h 0 A nan", "line 2: the value nan is not finite"),
        ("h -1 A 0.5", "line 2: a negative position"),
        ("h 0 A", "line 2: expected 'J i j a b value' or 'h i a value'"),
        ("J x 1 A C 0.5", "line 2: positions must be integers and the value a number"),
    ],
)
def test_a_bad_adabmdca_line_is_refused_naming_the_file_and_line(tmp_path, line, message):
    from raise_eval.models import read_adabmdca_parameters

    path = tmp_path / "bad.dat"
    path.write_text(f"h 1 C 0.25\n{line}\n")
    with pytest.raises(CheckpointError) as error:
        read_adabmdca_parameters(path, alphabet="rna")
    assert str(error.value).startswith(f"{path}, {message}")


@pytest.mark.parametrize(
    "line, message",
    [
        ("h 1 C -0.75", "line 3: 'h 1 C' is written again (first on line 1); each field and coupling once"),
        ("J 0 1 A C 0.5", "line 3: 'J 0 1 A C' is written again (first on line 2); each field and coupling once"),
    ],
)
def test_a_repeated_adabmdca_record_is_refused_naming_both_lines(tmp_path, line, message):
    """A field or coupling written twice has no one reading (adabmDCA 1.0.0's loader keeps a field's last line but
    assigns couplings by numpy fancy indexing, whose result for repeated indices numpy leaves unspecified; its writer
    never repeats a record): refused, not the last line taken silently."""
    from raise_eval.models import read_adabmdca_parameters

    path = tmp_path / "repeated.dat"
    path.write_text(f"h 1 C 0.25\nJ 0 1 A C 0.5\n{line}\n")
    with pytest.raises(CheckpointError) as error:
        read_adabmdca_parameters(path, alphabet="rna")
    assert str(error.value) == f"{path}, {message}"


def test_energies_agree_with_adabmdca_s_own_code(tmp_path):
    """adabmDCA writes the file (its save_params) and computes the energies (its compute_energy); ours are -E."""
    adabm_io = pytest.importorskip("adabmDCA.io", reason="adabmDCA is not installed (pip install adabmDCA)")
    statmech = pytest.importorskip("adabmDCA.statmech")
    from raise_eval.models import read_adabmdca_parameters

    h, J = _potts(L=6, q=21, seed=4)
    adabm_io.save_params(str(tmp_path / "p.dat"), {"bias": h, "coupling_matrix": J}, "protein")
    model = read_adabmdca_parameters(tmp_path / "p.dat")
    codes = torch.randint(0, 21, (50, 6), generator=torch.Generator().manual_seed(5))
    one_hot = torch.nn.functional.one_hot(codes, 21).double()
    theirs = -statmech.compute_energy(one_hot, {"bias": h, "coupling_matrix": J})
    assert torch.allclose(model.log_unnormalized(codes), theirs, atol=1e-10)
    loaded = adabm_io.load_params(str(tmp_path / "p.dat"), "protein", torch.device("cpu"), torch.float64)
    assert torch.allclose(model.couplings, loaded["coupling_matrix"], atol=1e-12)


@pytest.mark.parametrize(
    "name, letters", [("protein", "-ACDEFGHIKLMNPQRSTVWY"), ("rna", "-ACGU"), ("dna", "-ACGT")]
)
def test_adabmdca_s_named_alphabets_put_the_gap_first_and_its_letters_in_order(tmp_path, name, letters):
    """adabmDCA's own alphabets (its fasta.py tokens): the gap is state 0 and the letters follow in that order, so a
    field written under a letter lands in that letter's state. Each letter's field here is its position in a
    shuffled listing, so any other order of the states is seen."""
    from raise_eval.models import read_adabmdca_parameters

    order = torch.randperm(len(letters), generator=torch.Generator().manual_seed(0)).tolist()
    lines = [f"h {i} {letters[a]} {float(10 * i + a)!r}" for i in range(2) for a in order]
    lines += [f"J 0 1 {letters[a]} {letters[b]} {float(a - 2 * b)!r}" for a in order for b in order]
    path = tmp_path / f"{name}.dat"
    path.write_text("\n".join(lines) + "\n")
    model = read_adabmdca_parameters(path, alphabet=name)
    q = len(letters)
    assert model.alphabet == letters and model.num_states == q
    states = torch.arange(q, dtype=torch.float64)
    torch.testing.assert_close(model.fields, torch.stack([10 * i + states for i in range(2)]), rtol=0, atol=0)
    torch.testing.assert_close(model.couplings[0, :, 1, :], states[:, None] - 2 * states[None, :], rtol=0, atol=0)
    # a sequence of letters, coded by the model's alphabet, has the energy its lines say
    codes = torch.tensor([[letters.index("-"), letters.index("A")]])
    assert float(model.log_unnormalized(codes)) == 0.0 + 10 + letters.index("A") + 0 - 2 * letters.index("A")
