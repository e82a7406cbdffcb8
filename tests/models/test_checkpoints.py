"""Checkpoint round trips, importers (npz, MATLAB) and clear errors for malformed files."""

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from raise_eval.models import DBM, DBN, RBM
from raise_eval.models.io.checkpoints import CheckpointError, load_checkpoint, save_checkpoint, save_npz
from raise_eval.models.io.matfile import MatFileError, read_mat

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture()
def rbm():
    return RBM.random(5, 3, generator=torch.Generator().manual_seed(0))


def test_round_trip(tmp_path, rbm):
    path = tmp_path / "m.pt"
    save_checkpoint(path, rbm, metadata={"dataset": "digits", "epochs": 3}, train_pixel_means=torch.full((5,), 0.2))
    ckpt = load_checkpoint(path)
    assert torch.equal(ckpt.model.W, rbm.W) and torch.equal(ckpt.model.hbias, rbm.hbias)
    assert ckpt.metadata == {"dataset": "digits", "epochs": 3}
    assert torch.allclose(ckpt.train_pixel_means, torch.full((5,), 0.2))
    assert load_checkpoint(path, dtype=torch.float64).model.dtype == torch.float64


def test_what_save_checkpoint_writes_load_checkpoint_reads(tmp_path, rbm):
    """Issue 24: metadata holding NumPy scalars, a Path or a datetime was saved, then refused by load_checkpoint."""
    import datetime

    metadata = {
        "lr": np.float32(0.1),
        "epochs": np.int64(3),
        "done": np.bool_(True),
        "out": tmp_path / "runs",
        "when": datetime.datetime(2024, 5, 1, 12, 30),
        "day": datetime.date(2024, 5, 1),
        "losses": np.array([0.5, 0.25]),
        "nested": {"sizes": (np.int32(5), np.int32(3)), "w": torch.nn.Parameter(torch.ones(2))},
    }
    path = tmp_path / "m.pt"
    save_checkpoint(path, rbm, metadata=metadata)
    loaded = load_checkpoint(path).metadata
    assert loaded["lr"] == float(np.float32(0.1)) and type(loaded["lr"]) is float
    assert loaded["epochs"] == 3 and type(loaded["epochs"]) is int and loaded["done"] is True
    assert loaded["out"] == str(tmp_path / "runs")
    assert loaded["when"] == "2024-05-01T12:30:00" and loaded["day"] == "2024-05-01"
    assert loaded["losses"] == [0.5, 0.25] and loaded["nested"]["sizes"] == (5, 3)
    assert type(loaded["nested"]["w"]) is torch.Tensor and torch.equal(loaded["nested"]["w"], torch.ones(2))
    assert isinstance(metadata["lr"], np.float32)  # the caller's dict is not changed


def test_metadata_that_would_not_load_is_refused_when_saving_naming_the_key(tmp_path, rbm):
    path = tmp_path / "m.pt"
    with pytest.raises(TypeError) as e:
        save_checkpoint(path, rbm, metadata={"dataset": "digits", "optimizer": {"schedule": print}})
    message = str(e.value)
    assert "metadata['optimizer']['schedule'] is a builtins.builtin_function_or_method" in message
    assert "load_checkpoint could not read back" in message and "e.g. str(value)" in message
    assert not path.exists()  # nothing written


def test_a_vae_config_with_numpy_integers_reads_back(tmp_path):
    from raise_eval.models import VAE, VAEConfig

    torch.manual_seed(0)  # parameter initialization only
    vae = VAE(VAEConfig(data_dim=np.int64(6), latent_dim=np.int64(2), hidden=[np.int64(4)]))
    save_checkpoint(tmp_path / "v.pt", vae)
    assert load_checkpoint(tmp_path / "v.pt").model.config.hidden == [4]


@pytest.mark.parametrize("name", ["rbm_5x3_plain.mat", "rbm_5x3_compressed.mat"])
def test_matlab_import_matches_reference(name):
    ref = np.load(DATA / "rbm_5x3_reference.npz")
    ckpt = load_checkpoint(DATA / name)
    np.testing.assert_allclose(ckpt.model.W.numpy(), ref["W"])
    np.testing.assert_allclose(ckpt.model.vbias.numpy(), ref["vbias"])
    np.testing.assert_allclose(ckpt.model.hbias.numpy(), ref["hbias"])
    assert ckpt.model.dtype == torch.float64  # MATLAB doubles stay doubles
    assert ckpt.metadata["ignored_variables"] == ["counts", "epoch", "note"]


def test_matlab_reader_agrees_with_scipy(tmp_path):
    sio = pytest.importorskip("scipy.io")
    rng = np.random.default_rng(1)
    arrays = {"a": rng.normal(size=(4, 7)), "b": rng.normal(size=(3,)).astype(np.float32), "c": np.int16(-5)}
    for comp in (False, True):
        sio.savemat(tmp_path / "x.mat", arrays, do_compression=comp)
        got, _ = read_mat(tmp_path / "x.mat")
        for k, v in arrays.items():
            np.testing.assert_array_equal(got[k].reshape(np.shape(v) or (1, 1)).squeeze(), np.squeeze(v))


def test_npz_import(tmp_path, rbm):
    path = tmp_path / "m.npz"
    np.savez(path, W=rbm.W.numpy(), vbias=rbm.vbias.numpy(), hbias=rbm.hbias.numpy(), logZ_exact=1.5)
    ckpt = load_checkpoint(path)
    assert torch.equal(ckpt.model.W, rbm.W) and ckpt.metadata == {"log_z_exact": 1.5}


def test_npz_extra_arrays_are_listed(tmp_path, rbm):
    W, a, b = rbm.W.numpy(), rbm.vbias.numpy(), rbm.hbias.numpy()
    ckpt = load_checkpoint(_npz(tmp_path, W=W, vbias=a, hbias=b, logZ_exact=2.0, extra=a, epoch=np.int64(3)))
    assert torch.equal(ckpt.model.W, rbm.W)
    assert ckpt.metadata == {"log_z_exact": 2.0, "ignored_variables": ["epoch", "extra"]}


def _npz(tmp_path, **arrays):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


def test_npz_errors(tmp_path, rbm):
    W, a, b = rbm.W.numpy(), rbm.vbias.numpy(), rbm.hbias.numpy()
    with pytest.raises(CheckpointError, match=r"missing keys \['hbias'\]"):
        load_checkpoint(_npz(tmp_path, W=W, vbias=a))
    with pytest.raises(CheckpointError, match="must be \\(n_visible, n_hidden\\)"):
        load_checkpoint(_npz(tmp_path, W=W.T, vbias=a, hbias=b))
    with pytest.raises(CheckpointError, match="NaN"):
        load_checkpoint(_npz(tmp_path, W=np.where(W > 0, np.nan, W), vbias=a, hbias=b))
    with pytest.raises(CheckpointError, match="infinite"):
        load_checkpoint(_npz(tmp_path, W=W, vbias=a, hbias=np.full_like(b, np.inf)))


def test_raise_eval_format_errors(tmp_path, rbm):
    path = tmp_path / "m.pt"
    good = {
        "format": "raise-eval-checkpoint",
        "version": 1,
        "model_type": "rbm",
        "state": {"W": rbm.W, "vbias": rbm.vbias, "hbias": rbm.hbias},
    }
    for change, message in [
        ({"state": {"W": rbm.W, "vbias": rbm.vbias}}, r"missing keys \['hbias'\]"),
        ({"state": {"W": rbm.W, "vbias": rbm.vbias, "hbias": rbm.hbias, "c": rbm.hbias}}, r"unknown keys \['c'\]"),
        ({"optimizer": {}}, r"unknown keys \['optimizer'\]"),
        ({"model_type": "gan"}, "not supported"),
        ({"version": 7}, "version 7"),
    ]:
        torch.save({**good, **change}, path)
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(path)
    missing_state = dict(good)
    del missing_state["state"]
    torch.save(missing_state, path)
    with pytest.raises(CheckpointError, match=r"missing keys \['state'\]"):
        load_checkpoint(path)


def test_unknown_files_are_refused(tmp_path):
    (tmp_path / "m.bin").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="unknown checkpoint type .bin"):
        load_checkpoint(tmp_path / "m.bin")
    (tmp_path / "v73.mat").write_bytes(b"MATLAB 7.3 MAT-file" + b" " * 600)
    with pytest.raises(MatFileError, match="HDF5"):
        load_checkpoint(tmp_path / "v73.mat")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "absent.pt")


def test_pickled_objects_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": object}, path)  # not loadable with weights_only=True
    with pytest.raises(CheckpointError, match="weights_only"):
        load_checkpoint(path)


@pytest.mark.data
def test_shared_checkpoints_load(shared_data):
    for path in sorted((shared_data / "checkpoints").glob("*.npz")):
        ckpt = load_checkpoint(path)
        assert ckpt.model.n_visible in (196, 784)


def test_vae_round_trip_and_config_errors(tmp_path):
    from raise_eval.models import VAE, VAEConfig

    torch.manual_seed(0)  # parameter initialization only
    vae = VAE(VAEConfig(data_dim=12, latent_dim=2, hidden=[6]))
    path = tmp_path / "vae.pt"
    save_checkpoint(path, vae, metadata={"dataset": "toy"})
    ckpt = load_checkpoint(path)
    for (k, a), (_, b) in zip(vae.state_dict().items(), ckpt.model.state_dict().items()):
        assert torch.equal(a, b), k
    assert ckpt.metadata == {"dataset": "toy"} and not any(p.requires_grad for p in ckpt.model.parameters())
    assert ckpt.train_pixel_means is None
    means = torch.linspace(0.1, 0.9, 12)
    save_checkpoint(path, vae, train_pixel_means=means)
    assert torch.equal(load_checkpoint(path).train_pixel_means, means)
    with pytest.raises(ValueError, match="train_pixel_means has 11 entries; the VAE has 12 inputs"):
        save_checkpoint(path, vae, train_pixel_means=means[:11])
    save_checkpoint(path, vae)
    payload = torch.load(path, weights_only=True)
    payload["config"]["hidden"] = [7]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="does not fit the VAE config"):
        load_checkpoint(path)
    payload["config"] = {"data_dim": 12, "latent_dim": 2, "hidden": [6], "activation": "tanh", "dropout": 0.1}
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=r"unknown keys \['dropout'\]"):
        load_checkpoint(path)


# ----------------------------------------------------------------- DBMs and DBNs


def _deep(kind, sizes, dtype=torch.float32):
    g = torch.Generator().manual_seed(len(sizes))
    cls = DBM if kind == "dbm" else DBN
    return cls.random(sizes, weight_std=0.3, generator=g, dtype=dtype)


def _assert_same(a, b):
    assert type(a) is type(b) and a.layer_sizes == b.layer_sizes
    pairs = list(zip(a.weights, b.weights)) + list(zip(a.biases, b.biases))
    if isinstance(a, DBN):
        assert len(a.recognition_biases) == len(b.recognition_biases)
        pairs += list(zip(a.recognition_biases, b.recognition_biases))
    for x, y in pairs:
        assert x.dtype == y.dtype and torch.equal(x, y)


DEEP = [("dbm", [7, 5, 3]), ("dbm", [7, 5, 4, 3]), ("dbn", [7, 5, 3]), ("dbn", [7, 5, 4, 3])]


@pytest.mark.parametrize("kind,sizes", DEEP)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_deep_round_trip_pt(tmp_path, kind, sizes, dtype):
    model = _deep(kind, sizes, dtype)
    means = torch.linspace(0.1, 0.9, sizes[0], dtype=dtype)
    path = tmp_path / "m.pt"
    save_checkpoint(path, model, metadata={"dataset": "toy", "training": {"epochs": 2}}, train_pixel_means=means)
    payload = torch.load(path, weights_only=True)
    L = len(sizes) - 1
    expected = {f"weights_{l}" for l in range(L)} | {f"biases_{l}" for l in range(L + 1)}
    if kind == "dbn":
        expected |= {f"recognition_biases_{l}" for l in range(1, L)}
    assert payload["model_type"] == kind and set(payload["state"]) == expected
    ckpt = load_checkpoint(path)
    _assert_same(ckpt.model, model)
    assert ckpt.metadata == {"dataset": "toy", "training": {"epochs": 2}} and torch.equal(ckpt.train_pixel_means, means)
    assert load_checkpoint(path, dtype=torch.float64).model.dtype == torch.float64


@pytest.mark.parametrize("kind,sizes", DEEP)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_deep_round_trip_npz(tmp_path, kind, sizes, dtype):
    model = _deep(kind, sizes, dtype)
    means = torch.linspace(0.1, 0.9, sizes[0], dtype=dtype)
    path = tmp_path / "m.npz"
    save_npz(path, model, train_pixel_means=means)
    with np.load(path) as z:
        assert z["model_type"].shape == () and str(z["model_type"]) == kind
    ckpt = load_checkpoint(path)
    _assert_same(ckpt.model, model)
    assert ckpt.source_format == "npz" and ckpt.metadata == {} and torch.equal(ckpt.train_pixel_means, means)


def test_rbm_npz_round_trip(tmp_path, rbm):
    save_npz(tmp_path / "r.npz", rbm)
    ckpt = load_checkpoint(tmp_path / "r.npz")
    assert isinstance(ckpt.model, RBM) and torch.equal(ckpt.model.W, rbm.W) and torch.equal(ckpt.model.vbias, rbm.vbias)


def _deep_arrays(kind, sizes):
    model = _deep(kind, sizes)
    arrays = {"model_type": np.array(kind)}
    arrays.update({f"weights_{l}": w.numpy() for l, w in enumerate(model.weights)})
    arrays.update({f"biases_{l}": b.numpy() for l, b in enumerate(model.biases)})
    if kind == "dbn":
        arrays.update({f"recognition_biases_{i + 1}": r.numpy() for i, r in enumerate(model.recognition_biases)})
    return arrays


def test_deep_npz_user_written_and_extras(tmp_path):
    arrays = _deep_arrays("dbn", [6, 4, 3, 2])
    arrays["biases_1"] = arrays["biases_1"][None, :]  # a (1, n) row vector, as MATLAB exports write them
    ckpt = load_checkpoint(_npz(tmp_path, **arrays, notes=np.array("trained at home"), lr=np.float64(0.1)))
    assert isinstance(ckpt.model, DBN) and ckpt.model.layer_sizes == (6, 4, 3, 2)
    assert ckpt.metadata == {"ignored_variables": ["lr", "notes"]}
    assert np.array_equal(ckpt.model.recognition_biases[1].numpy(), arrays["recognition_biases_2"])


def _one_line(excinfo):
    message = str(excinfo.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("fmt", ["pt", "npz"])
def test_deep_errors(tmp_path, fmt):
    def load(kind, arrays):
        if fmt == "npz":
            return load_checkpoint(_npz(tmp_path, **{**arrays, "model_type": np.array(kind)}))
        state = {k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items() if k != "model_type"}
        path = tmp_path / "bad.pt"
        torch.save({"format": "raise-eval-checkpoint", "version": 1, "model_type": kind, "state": state}, path)
        return load_checkpoint(path)

    dbm = _deep_arrays("dbm", [7, 5, 4, 3])
    dbn = _deep_arrays("dbn", [7, 5, 4, 3])
    # a gap: weights_1 missing, with weights_0 and weights_2 present
    with pytest.raises(
        CheckpointError, match=r"missing keys \['weights_1'\].*weights_0..weights_2, biases_0..biases_3"
    ) as e:
        load("dbm", {k: v for k, v in dbm.items() if k != "weights_1"})
    assert str(tmp_path) in _one_line(e)
    # the last weight matrix missing
    with pytest.raises(CheckpointError, match=r"missing keys \['weights_2'\]"):
        load("dbm", {k: v for k, v in dbm.items() if k != "weights_2"})
    # a wrong shape: weights_1 transposed
    with pytest.raises(CheckpointError, match=r"weights_1 has shape \(4, 5\).*\(n_l, n_\(l\+1\)\) = \(5, 4\)") as e:
        load("dbm", {**dbm, "weights_1": dbm["weights_1"].T})
    _one_line(e)
    with pytest.raises(CheckpointError, match=r"biases_2 must be a vector"):
        load("dbm", {**dbm, "biases_2": np.zeros((4, 2), np.float32)})
    # a DBN without recognition biases
    with pytest.raises(CheckpointError, match=r"missing keys \['recognition_biases_1', 'recognition_biases_2'\]"):
        load("dbn", {k: v for k, v in dbn.items() if not k.startswith("recognition")})
    with pytest.raises(CheckpointError, match=r"recognition_biases_2 has 3 entries but layer 2 has 4 units"):
        load("dbn", {**dbn, "recognition_biases_2": np.zeros(3, np.float32)})
    # recognition biases under model_type dbm: a DBN mislabelled
    with pytest.raises(CheckpointError, match=r"belong to a DBN but model_type is 'dbm'"):
        load("dbm", dbn)
    # one hidden layer is not a DBM
    with pytest.raises(CheckpointError, match=r"missing keys \['biases_2', 'weights_1'\].*at least 2"):
        load("dbm", {"weights_0": dbm["weights_0"], "biases_0": dbm["biases_0"], "biases_1": dbm["biases_1"]})
    # NaN weights: the model's own check, with the path
    with pytest.raises(CheckpointError, match=r"bad\.(pt|npz): weights\[1\] has 20 NaN"):
        load("dbm", {**dbm, "weights_1": np.full((5, 4), np.nan, np.float32)})
    # a wrong model type
    with pytest.raises(CheckpointError, match=r"model_type 'dgm' is not supported.*known: \['rbm', 'dbm', 'dbn'"):
        load("dgm", dbm)


def test_deep_pt_unknown_state_key(tmp_path):
    model = _deep("dbm", [5, 4, 3])
    path = tmp_path / "m.pt"
    save_checkpoint(path, model)
    payload = torch.load(path, weights_only=True)
    payload["state"]["W"] = payload["state"]["weights_0"]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=r"unknown keys \['W'\]; a dbm with 2 weight matrices"):
        load_checkpoint(path)


def test_npz_model_type_errors(tmp_path):
    arrays = _deep_arrays("dbm", [5, 4, 3])
    del arrays["model_type"]
    with pytest.raises(CheckpointError, match=r"no model_type; a DBM or DBN \.npz needs a 0-d string array"):
        load_checkpoint(_npz(tmp_path, **arrays))
    with pytest.raises(CheckpointError, match=r"model_type must be a 0-d string array"):
        load_checkpoint(_npz(tmp_path, **arrays, model_type=np.array(["dbm"])))


# ------------------------------------------------------------ issue 24: messages that name the right thing


def test_complex_weights_are_refused_naming_the_key(tmp_path, rbm):
    """They were cast to their real part (torch's UserWarning the only trace)."""
    W, a, b = rbm.W.numpy(), rbm.vbias.numpy(), rbm.hbias.numpy()
    with pytest.raises(CheckpointError, match=r"bad.npz: W has dtype torch.complex64; expected real numbers"):
        load_checkpoint(_npz(tmp_path, W=W.astype(np.complex64) + 1j, vbias=a, hbias=b))
    with pytest.raises(CheckpointError, match=r"bad.npz: hbias has dtype torch.complex128"):
        load_checkpoint(_npz(tmp_path, W=W, vbias=a, hbias=b.astype(np.complex128)))
    path = tmp_path / "c.pt"
    state = {"W": rbm.W.to(torch.complex64), "vbias": rbm.vbias, "hbias": rbm.hbias}
    torch.save({"format": "raise-eval-checkpoint", "version": 1, "model_type": "rbm", "state": state}, path)
    with pytest.raises(CheckpointError, match=r"c.pt: W has dtype torch.complex64"):
        load_checkpoint(path)


def test_a_vaes_complex_parameter_is_refused_naming_it(tmp_path):
    from raise_eval.models import VAE, VAEConfig

    torch.manual_seed(0)  # parameter initialization only
    path = tmp_path / "v.pt"
    save_checkpoint(path, VAE(VAEConfig(data_dim=6, latent_dim=2, hidden=[4])))
    payload = torch.load(path, weights_only=True)
    name = next(iter(payload["state"]))
    payload["state"][name] = payload["state"][name].to(torch.complex64)
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=rf"parameter {re.escape(name)} has dtype torch.complex64"):
        load_checkpoint(path)


def test_nan_training_means_are_named_as_such_when_saving_and_loading(tmp_path, rbm):
    """They were reported as 'base bias 0 has NaN or infinite entries' once the run began."""
    with pytest.raises(ValueError, match=r"train_pixel_means have 1 NaN entry; they must be the training set's"):
        save_checkpoint(tmp_path / "m.pt", rbm, train_pixel_means=torch.tensor([0.5, float("nan"), 0.5, 0.5, 0.5]))
    assert not (tmp_path / "m.pt").exists()
    payload = {
        "format": "raise-eval-checkpoint",
        "version": 1,
        "model_type": "rbm",
        "state": {"W": rbm.W, "vbias": rbm.vbias, "hbias": rbm.hbias},
        "train_pixel_means": torch.full((5,), float("nan")),
    }
    torch.save(payload, tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match=r"nan.pt: train_pixel_means have 5 NaN entries; .*--init uniform"):
        load_checkpoint(tmp_path / "nan.pt")
    np.savez(tmp_path / "big.npz", W=rbm.W.numpy(), vbias=rbm.vbias.numpy(), hbias=rbm.hbias.numpy(),
             train_pixel_means=np.full(5, 2.0))
    with pytest.raises(CheckpointError, match=r"big.npz: train_pixel_means have 5 entries outside \[0, 1\]"):
        load_checkpoint(tmp_path / "big.npz")


def test_a_plain_pickle_is_named_and_never_unpickled(tmp_path, rbm):
    """torch's own message advised weights_only=False, which runs the pickle's code."""
    import pickle

    path = tmp_path / "m.pt"
    with open(path, "wb") as f:
        pickle.dump({"W": rbm.W.numpy()}, f)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    message = str(e.value)
    assert "is a plain Python pickle" in message and "raise-eval never unpickles arbitrary objects" in message
    assert "weights_only=False" not in message and "\n" not in message
    legacy = tmp_path / "legacy.pt"  # torch.save's pre-1.6 format is a pickle too, and still loads
    torch.save(torch.load(_saved(tmp_path, rbm), weights_only=True), legacy, _use_new_zipfile_serialization=False)
    assert torch.equal(load_checkpoint(legacy).model.W, rbm.W)


def _saved(tmp_path, rbm) -> Path:
    path = tmp_path / "saved.pt"
    save_checkpoint(path, rbm)
    return path


def test_an_npz_named_pt_and_a_pt_named_npz_are_told_to_be_renamed(tmp_path, rbm):
    npz = tmp_path / "m.npz"
    save_npz(npz, rbm)
    npz.rename(tmp_path / "m.pt")
    renamed_npz = r"m.pt is a NumPy .npz archive of \d+ bytes \(numpy.savez\) named .pt; rename it to .npz"
    with pytest.raises(CheckpointError, match=renamed_npz):
        load_checkpoint(tmp_path / "m.pt")
    _saved(tmp_path, rbm).rename(tmp_path / "s.npz")
    renamed_pt = r"s.npz is a file of \d+ bytes written by torch.save named .npz; rename it to .pt"
    with pytest.raises(CheckpointError, match=renamed_pt):
        load_checkpoint(tmp_path / "s.npz")


def test_a_checkpoint_path_that_is_no_file_says_what_it_is(tmp_path):
    """A link to /dev/zero was 'an empty file'; a link loop 'does not exist'."""
    (tmp_path / "zero.pt").symlink_to("/dev/zero")
    (tmp_path / "a.pt").symlink_to(tmp_path / "b.pt")
    (tmp_path / "b.pt").symlink_to(tmp_path / "a.pt")
    (tmp_path / "broken.pt").symlink_to(tmp_path / "gone.pt")
    (tmp_path / "folder.pt").mkdir()
    os.mkfifo(tmp_path / "pipe.pt")  # never opened: a read would block
    cases = {
        "zero.pt": "is a symbolic link to /dev/zero, a character device, not a file",
        "a.pt": f"is a symbolic link loop ({tmp_path / 'a.pt'} -> {tmp_path / 'b.pt'} -> {tmp_path / 'a.pt'})",
        "broken.pt": "is a broken symbolic link",
        "folder.pt": "is a folder, not a file",
        "pipe.pt": "is a named pipe (FIFO), not a file",
    }
    for name, words in cases.items():
        with pytest.raises(CheckpointError) as e:
            load_checkpoint(tmp_path / name)
        assert f"checkpoint {tmp_path / name} {words}" in str(e.value), name
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "absent.pt")


@pytest.mark.parametrize("writer", ["save_checkpoint", "save_npz"])
def test_a_failed_save_leaves_the_old_file_whole(tmp_path, monkeypatch, writer):
    """A save that breaks off (a full disk) leaves the checkpoint that was there as it was and no part of the new
    one beside it; a save that succeeds replaces it whole."""
    from raise_eval.models.io import checkpoints

    old, new = (RBM.random(5, 3, generator=torch.Generator().manual_seed(s)) for s in (0, 1))
    path = tmp_path / ("model.pt" if writer == "save_checkpoint" else "model.npz")
    save = getattr(checkpoints, writer)
    save(path, old)
    before = path.read_bytes()

    def full_disk(obj_or_file, file_or_obj, *args, **kwargs):  # writes part of the file, then the disk is full
        target = file_or_obj if writer == "save_checkpoint" else obj_or_file
        with open(target, "wb") if isinstance(target, str) else open(target.name, "wb") as f:
            f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints.torch, "save", full_disk)
    monkeypatch.setattr(checkpoints.np, "savez", full_disk)
    with pytest.raises(OSError, match="unchanged"):
        save(path, new)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    monkeypatch.undo()
    save(path, new)
    assert torch.equal(load_checkpoint(path).model.W, new.W)
    import io

    buffer = io.BytesIO()  # an open buffer is written as torch.save and np.savez write one
    save(buffer, new)
    assert buffer.tell() > 0
