"""DsysDML/rbms HDF5 runs (models/io/rbms_files.py): files built by hand in rbms' layout (needs h5py), and files
written by rbms' own code with its energies as the reference (needs rbms; skipped without it)."""

import itertools
import sys

import numpy as np
import pytest
import torch
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine
from raise_eval.models.boltzmann.rbm import RBM
from raise_eval.models.fully_visible import FullyVisibleModel
from raise_eval.models.io import CheckpointError, load_checkpoint
from raise_eval.models.io.rbms_files import rbms_updates, read_rbms_update

h5py = pytest.importorskip("h5py")


def write_run(path, model_type, updates, params_group=True):
    """An rbms-layout file: model_type and, per n, update_{n}/params/<name> (or update_{n}/<name>)."""
    with h5py.File(path, "w") as f:
        f["model_type"] = model_type  # rbms writes a str, which h5py stores as bytes
        f.create_group("hyperparameters")["batch_size"] = 10
        for n, arrays in updates.items():
            group = f.create_group(f"update_{n}")
            target = group.create_group("params") if params_group else group
            for name, value in arrays.items():
                target[name] = value
            group["time"] = 0.0
        f["parallel_chains"] = np.zeros((2, 3))
    return path


def bbrbm_arrays(rng, n_v=5, n_h=3):
    return {"weight_matrix": rng.normal(size=(n_v, n_h)), "vbias": rng.normal(size=n_v), "hbias": rng.normal(size=n_h)}


def pbrbm_arrays(rng, L=4, q=3, n_h=2):
    return {"weight_matrix": rng.normal(size=(L, q, n_h)), "vbias": rng.normal(size=(L, q)),
            "hbias": rng.normal(size=n_h)}  # fmt: skip


def pbm_arrays(rng, L=4, q=3, symmetric=True):
    W = rng.normal(size=(L, q, L, q))
    if symmetric:
        W = (W + W.transpose(2, 3, 0, 1)) / 2
    return {"weight_matrix": W, "bias": rng.normal(size=(L, q))}


def one_hot(codes, q):
    return np.eye(q)[codes].reshape(len(codes), -1)


# rbms' energies as its documentation states them, written out here in numpy: -E(v) marginalised over h.
def bbrbm_minus_energy(a, v):
    return v @ a["vbias"] + np.logaddexp(0, a["hbias"] + v @ a["weight_matrix"]).sum(1)


def pbrbm_minus_energy(a, codes):
    L, q, n_h = a["weight_matrix"].shape
    x = one_hot(codes, q)
    return x @ a["vbias"].reshape(-1) + np.logaddexp(0, a["hbias"] + x @ a["weight_matrix"].reshape(L * q, n_h)).sum(1)


def pbm_minus_energy(a, codes):
    L, q = a["bias"].shape
    x = one_hot(codes, q)
    return x @ a["bias"].reshape(-1) + 0.5 * np.einsum("ni,ij,nj->n", x, a["weight_matrix"].reshape(L * q, L * q), x)


def test_bernoulli_rbm_reads_as_an_rbm_with_rbms_energy(tmp_path):
    rng = np.random.default_rng(0)
    arrays = bbrbm_arrays(rng)
    path = write_run(tmp_path / "run.h5", "BBRBM", {1: bbrbm_arrays(rng), 5: arrays})
    ckpt = load_checkpoint(path)
    assert isinstance(ckpt.model, RBM) and ckpt.model.dtype == torch.float64
    assert ckpt.metadata == {"rbms_model_type": "BBRBM", "update": 5, "updates": [1, 5]}
    v = rng.integers(0, 2, size=(6, 5)).astype(float)
    got = ckpt.model.log_unnormalized_prob(torch.tensor(v)).numpy()
    np.testing.assert_allclose(got, bbrbm_minus_energy(arrays, v), rtol=1e-12)


def test_potts_rbm_reads_as_a_categorical_visible_machine(tmp_path):
    rng = np.random.default_rng(1)
    arrays = pbrbm_arrays(rng)
    path = write_run(tmp_path / "run.h5", "PBRBM", {3: arrays})
    model, meta = read_rbms_update(path, alphabet="-AC")
    assert isinstance(model, MixedBoltzmannMachine) and model.layers[0].kind == "categorical"
    assert model.layers[0].alphabet == "-AC"
    codes = rng.integers(0, 3, size=(7, 4))
    got = model.log_unnormalized_prob(model.prepare_visible(torch.tensor(codes))).numpy()
    np.testing.assert_allclose(got, pbrbm_minus_energy(arrays, codes), rtol=1e-12)


@pytest.mark.parametrize("symmetric", [True, False])
def test_pbm_reads_as_a_fully_visible_model_with_the_same_distribution(tmp_path, symmetric):
    """rbms' PBM sums x^T W x / 2 over all pairs and each site with itself: the diagonal blocks go into the fields,
    and an asymmetric W counts by its symmetric part. Every configuration's log f equals -E: the same log Z."""
    rng = np.random.default_rng(2)
    L, q = 4, 3
    arrays = pbm_arrays(rng, L, q, symmetric)
    path = write_run(tmp_path / "pbm.hdf5", "PBM", {10: arrays})
    model = load_checkpoint(path).model
    assert isinstance(model, FullyVisibleModel) and model.sites == "categorical"
    codes = np.array(list(itertools.product(range(q), repeat=L)))
    got = model.log_unnormalized(torch.tensor(codes)).numpy()
    np.testing.assert_allclose(got, pbm_minus_energy(arrays, codes), rtol=1e-10, atol=1e-12)


def test_updates_are_listed_in_numeric_order_and_any_one_is_read(tmp_path):
    rng = np.random.default_rng(3)
    runs = {n: bbrbm_arrays(rng) for n in (10, 2, 1)}
    path = write_run(tmp_path / "run.h5", "BBRBM", runs, params_group=False)  # older files: no params subgroup
    assert rbms_updates(path) == [1, 2, 10]
    model, meta = read_rbms_update(path, 2)
    assert meta["update"] == 2
    np.testing.assert_array_equal(model.weights[0].numpy(), runs[2]["weight_matrix"])
    assert load_checkpoint(path, update=10).metadata["update"] == 10


def test_float32_arrays_are_read_as_float32(tmp_path):
    arrays = {k: v.astype(np.float32) for k, v in bbrbm_arrays(np.random.default_rng(4)).items()}
    assert load_checkpoint(write_run(tmp_path / "run.h5", "BBRBM", {1: arrays})).model.dtype == torch.float32


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: p.write_text("not hdf5"), "is not an HDF5 file"),
        (lambda p: h5py.File(p, "w").close(), "not an rbms run"),
        (lambda p: write_run(p, "IGRBM", {1: {"x": np.zeros(2)}}), "model_type 'IGRBM' is not read"),
        (lambda p: write_run(p, "BBRBM", {1: {"vbias": np.zeros(2), "hbias": np.zeros(1)}}), r"lacks \['weight_matrix"),
        (lambda p: write_run(p, "PBM", {1: {"weight_matrix": np.zeros((2, 3, 2, 2)), "bias": np.zeros((2, 3))}}),
         "a PBM's are"),
    ],
)
def test_files_that_are_not_rbms_runs_are_refused_in_one_line(tmp_path, make, match):
    path = tmp_path / "run.h5"
    make(path)
    with pytest.raises(CheckpointError, match=match) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)


def test_a_missing_update_names_the_ones_there(tmp_path):
    path = write_run(tmp_path / "run.h5", "BBRBM", {1: bbrbm_arrays(np.random.default_rng(5))})
    with pytest.raises(CheckpointError, match="has no update_7; its updates are 1"):
        load_checkpoint(path, update=7)


def test_an_update_for_another_kind_of_file_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="an update is chosen in an rbms run's HDF5 file"):
        np.savez(tmp_path / "model.npz", **{k: v for k, v in bbrbm_arrays(np.random.default_rng(9)).items()})
        load_checkpoint(tmp_path / "model.npz", update=3)


def test_without_h5py_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    path = write_run(tmp_path / "run.h5", "BBRBM", {1: bbrbm_arrays(np.random.default_rng(6))})
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(CheckpointError, match=r"pip install raise-eval\[hdf5\]"):
        load_checkpoint(path)


# ---------------------------------------------------------------- against rbms' own code
def test_rbms_own_rbms_against_their_energies(tmp_path):
    pytest.importorskip("rbms")
    from rbms.bernoulli_bernoulli.classes import BBRBM
    from rbms.io import save_model
    from rbms.potts_bernoulli.classes import PBRBM

    g = torch.Generator().manual_seed(7)
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    cases = [
        (BBRBM(t(6, 3), t(6), t(3)), torch.randint(0, 2, (8, 6), generator=g).double()),
        (PBRBM(t(5, 4, 3), t(5, 4), t(3)), torch.randint(0, 4, (8, 5), generator=g).double()),
    ]
    for params, v in cases:
        path = tmp_path / f"{params.name}.h5"
        chains = params.init_chains(2)
        save_model(str(path), params, chains, num_updates=1, time=0.0)
        params.weight_matrix = params.weight_matrix * 2  # a second update, the one read by default
        save_model(str(path), params, chains, num_updates=4, time=1.0)
        model = load_checkpoint(path).model
        assert rbms_updates(path) == [1, 4]
        visible = v if isinstance(model, RBM) else model.prepare_visible(v.long())
        expected = -params.compute_energy_visibles(v)
        torch.testing.assert_close(model.log_unnormalized_prob(visible), expected, rtol=1e-12, atol=1e-12)


def test_rbms_own_pbm_against_its_energy(tmp_path):
    pytest.importorskip("rbms.bm.potts", reason="this rbms has no PBM (rbms 0.5.0 on PyPI has none)")
    from rbms.bm.potts import PBM
    from rbms.io import save_model

    g = torch.Generator().manual_seed(8)
    L, q = 4, 3
    W = torch.randn(L, q, L, q, generator=g, dtype=torch.float64)
    params = PBM(W + W.permute(2, 3, 0, 1), torch.randn(L, q, generator=g, dtype=torch.float64))
    path = tmp_path / "pbm.h5"
    save_model(str(path), params, {"visible": torch.zeros(2, L)}, num_updates=1, time=0.0)
    codes = torch.tensor(list(itertools.product(range(q), repeat=L)))
    expected = -params.compute_energy_visibles({"visible": codes.double()})
    torch.testing.assert_close(load_checkpoint(path).model.log_unnormalized(codes), expected)
