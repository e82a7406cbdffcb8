"""Checkpoint round trips, importers (npz, MATLAB) and clear errors for malformed files."""

from pathlib import Path

import numpy as np
import pytest
import torch

from models import RBM
from models.io.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from models.io.matfile import MatFileError, read_mat

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


def _npz(tmp_path, **arrays):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


def test_npz_errors(tmp_path, rbm):
    W, a, b = rbm.W.numpy(), rbm.vbias.numpy(), rbm.hbias.numpy()
    with pytest.raises(CheckpointError, match=r"missing keys \['hbias'\]"):
        load_checkpoint(_npz(tmp_path, W=W, vbias=a))
    with pytest.raises(CheckpointError, match=r"unknown keys \['extra'\].*exactly the keys W, hbias, vbias"):
        load_checkpoint(_npz(tmp_path, W=W, vbias=a, hbias=b, extra=a))
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
    (tmp_path / "m.h5").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="unknown checkpoint type .h5"):
        load_checkpoint(tmp_path / "m.h5")
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
    from models import VAE, VAEConfig

    torch.manual_seed(0)  # parameter initialization only
    vae = VAE(VAEConfig(data_dim=12, latent_dim=2, hidden=[6]))
    path = tmp_path / "vae.pt"
    save_checkpoint(path, vae, metadata={"dataset": "toy"})
    ckpt = load_checkpoint(path)
    for (k, a), (_, b) in zip(vae.state_dict().items(), ckpt.model.state_dict().items()):
        assert torch.equal(a, b), k
    assert ckpt.metadata == {"dataset": "toy"} and not any(p.requires_grad for p in ckpt.model.parameters())
    payload = torch.load(path, weights_only=True)
    payload["config"]["hidden"] = [7]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="does not fit the VAE config"):
        load_checkpoint(path)
    payload["config"] = {"data_dim": 12, "latent_dim": 2, "hidden": [6], "activation": "tanh", "dropout": 0.1}
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=r"unknown keys \['dropout'\]"):
        load_checkpoint(path)
