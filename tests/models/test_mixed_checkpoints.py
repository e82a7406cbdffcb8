"""Checkpoints of typed layers in the .npz convention of other code (Gaussian-Bernoulli with sigma; Potts-Bernoulli
with W (n_v, q, n_h), vbias (n_v, q) and an alphabet; spins) and raise-eval's .pt: exactly those keys and energies,
unknown unit types refused (never read as binary), bad parameters refused naming the key and the fix."""

import numpy as np
import pytest
import torch
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine
from raise_eval.models.boltzmann.rbm import RBM
from raise_eval.models.io.checkpoints import CheckpointError, load_checkpoint, save_checkpoint, save_npz

from raise_eval import exact
from raise_eval.paths.mixed import visible_statistics
from tests.mixed_models import exact_visible_samples, tiny_dbm, tiny_pair

RNG = np.random.default_rng(0)


def _gaussian_bernoulli(path, **extra):
    arrays = dict(
        W=RNG.normal(size=(3, 2)),
        vbias=RNG.normal(size=3),
        hbias=RNG.normal(size=2),
        sigma=np.array([0.5, 1.0, 2.0]),
        visible="gaussian",
        hidden="bernoulli",
    )
    arrays.update(extra)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return arrays


def test_gaussian_bernoulli_npz(tmp_path):
    arrays = _gaussian_bernoulli(tmp_path / "gb.npz")
    model = load_checkpoint(tmp_path / "gb.npz").model
    assert isinstance(model, MixedBoltzmannMachine) and model.describe() == "gaussian(3) - bernoulli(2)"
    assert model.dtype == torch.float64  # float64 arrays stay float64
    v = torch.tensor(RNG.normal(size=(4, 3)))
    h = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    sigma = torch.tensor(arrays["sigma"])
    energy = ((v - torch.tensor(arrays["vbias"])) ** 2 / (2 * sigma**2)).sum(1) - h @ torch.tensor(arrays["hbias"])
    energy -= ((v / sigma) @ torch.tensor(arrays["W"]) * h).sum(1)
    torch.testing.assert_close(model.log_unnormalized_joint([v, h]), -energy)


def test_potts_and_spin_npz(tmp_path):
    np.savez(
        tmp_path / "potts.npz",
        W=RNG.normal(size=(4, 21, 3)),
        vbias=RNG.normal(size=(4, 21)),
        hbias=RNG.normal(size=3),
        visible="categorical",
        hidden="bernoulli",
        alphabet="-ACDEFGHIKLMNPQRSTVWY",
    )
    potts = load_checkpoint(tmp_path / "potts.npz").model
    assert potts.layers[0].q == 21 and potts.layers[0].alphabet == "-ACDEFGHIKLMNPQRSTVWY"
    np.savez(
        tmp_path / "spin.npz",
        W=RNG.normal(size=(3, 2)),
        vbias=RNG.normal(size=3),
        hbias=RNG.normal(size=2),
        visible="spin",
        hidden="spin",
    )
    spin = load_checkpoint(tmp_path / "spin.npz").model
    assert spin.describe() == "spin(3) - spin(2)"
    # a spin file is never a binary RBM, even on 0/1 data: the data are read as spins (0 -> -1)
    v01 = torch.tensor([[0.0, 1.0, 1.0]])
    torch.testing.assert_close(spin.prepare_visible(v01), torch.tensor([[-1.0, 1.0, 1.0]], dtype=torch.float64))


def test_bernoulli_bernoulli_is_the_binary_rbm(tmp_path):
    np.savez(
        tmp_path / "b.npz",
        W=RNG.normal(size=(3, 2)),
        vbias=RNG.normal(size=3),
        hbias=RNG.normal(size=2),
        visible="bernoulli",
        hidden="binary",
    )
    assert isinstance(load_checkpoint(tmp_path / "b.npz").model, RBM)


@pytest.mark.parametrize(
    "extra,message",
    [
        (dict(visible="spinn"), "visible = 'spinn' is not a unit type raise-eval knows.*not read as a binary machine"),
        (dict(hidden=None), "no hidden unit type"),
        (dict(visible=None, hidden=None), "no visible or hidden unit type but it holds sigma"),
        (dict(sigma=np.array([1.0, 0.0, 1.0])), "sigma must be positive"),
        (dict(sigma=None), "needs sigma"),
        (dict(sigma=np.ones(4)), "sigma has 4 entries for 3 visible units"),
        (dict(W=np.zeros((3, 4))), r"W has shape \(3, 4\)"),
        (dict(visible=np.array(["gaussian", "spin"])), "visible must be a 0-d string array"),
    ],
)
def test_bad_files_are_refused_naming_the_key(tmp_path, extra, message):
    _gaussian_bernoulli(tmp_path / "bad.npz", **extra)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path / "bad.npz")


def test_a_non_normalizable_gaussian_pair_is_refused(tmp_path):
    np.savez(
        tmp_path / "gg.npz",
        W=np.eye(2) * 3,
        vbias=np.zeros(2),
        hbias=np.zeros(2),
        sigma=np.ones(2),
        hsigma=np.ones(2),
        visible="gaussian",
        hidden="gaussian",
    )
    with pytest.raises(CheckpointError, match="not positive definite.*lower the weights.*W.*sigma"):
        load_checkpoint(tmp_path / "gg.npz")


def test_a_potts_w_that_does_not_fit_q_is_refused(tmp_path):
    np.savez(
        tmp_path / "p.npz",
        W=np.zeros((4, 20, 3)),
        vbias=np.zeros((4, 21)),
        hbias=np.zeros(3),
        visible="categorical",
        hidden="bernoulli",
    )
    with pytest.raises(CheckpointError, match=r"W has shape \(4, 20, 3\) but vbias and hbias give \(4, 21, 3\)"):
        load_checkpoint(tmp_path / "p.npz")


@pytest.mark.parametrize(
    "visible,hidden",
    [
        ("gaussian", "bernoulli"),
        ("categorical", "bernoulli"),
        ("spin", "spin"),
        ("bernoulli", "gaussian"),
        ("categorical", "categorical"),
    ],
)
def test_save_and_load_round_trip(tmp_path, visible, hidden):
    model = tiny_pair(visible, hidden)
    stats = visible_statistics(model, exact_visible_samples(model, 50, torch.Generator().manual_seed(0)))
    save_npz(tmp_path / "m.npz", model)
    with np.load(tmp_path / "m.npz") as z:
        keys = set(z.files)
    assert (
        {"W", "vbias", "hbias", "visible", "hidden"}
        <= keys
        <= {"W", "vbias", "hbias", "visible", "hidden", "sigma", "hsigma", "alphabet"}
    )
    save_checkpoint(tmp_path / "m.pt", model, metadata={"dataset": "x.npy"}, train_pixel_means=stats)
    for name in ("m.npz", "m.pt"):
        ckpt = load_checkpoint(tmp_path / name)
        assert ckpt.model.layers == model.layers
        assert exact.log_partition(ckpt.model) == pytest.approx(exact.log_partition(model), abs=1e-10)
    ckpt = load_checkpoint(tmp_path / "m.pt")
    torch.testing.assert_close(ckpt.train_pixel_means, stats.reshape(model.layers[0].param_shape))
    assert ckpt.metadata == {"dataset": "x.npy"}


def test_a_dbm_of_typed_layers_round_trips_in_pt(tmp_path):
    model = tiny_dbm()
    save_checkpoint(tmp_path / "dbm.pt", model)
    loaded = load_checkpoint(tmp_path / "dbm.pt", dtype=torch.float32).model
    assert loaded.layers == model.layers and loaded.dtype == torch.float32
    with pytest.raises(ValueError, match="describes RBMs"):
        save_npz(tmp_path / "dbm.npz", model)
