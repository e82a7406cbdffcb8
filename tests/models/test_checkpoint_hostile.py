"""Checkpoints from elsewhere with optional arrays, metadata or Gaussian scales that do not fit (issue 45): each is
refused in one line naming the file and the key, never a traceback and never read silently."""

import re

import numpy as np
import pytest
import torch
from raise_eval.models import RBM
from raise_eval.models.io.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from torch import Tensor


@pytest.fixture()
def rbm():
    return RBM.random(5, 3, generator=torch.Generator().manual_seed(0))


def _potts_npz(path, **extra):
    rng = np.random.default_rng(0)
    np.savez(path, W=rng.normal(size=(4, 3, 2)), vbias=np.zeros((4, 3)), hbias=np.zeros(2), visible="categorical",
             hidden="bernoulli", **extra)  # fmt: skip
    return path


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize(
    "extra,says",
    [
        ({"logZ_exact": [1.0, 2.0]}, r"logZ_exact must be one finite real number .* shape \(2,\)"),
        ({"logZ_exact": "abc"}, r"logZ_exact must be one finite real number .*, got a <U3 array"),
        ({"logZ_exact": np.inf}, r"logZ_exact must be one finite real number"),
        ({"train_pixel_means": "abc"}, r"train_pixel_means is a <U3 array of shape \(\); it must hold real numbers"),
    ],
)
def test_an_optional_npz_array_of_the_wrong_type_names_the_file_and_key(tmp_path, typed, extra, says):
    """Issue 45, bug 4: a logZ_exact with two values or a train_pixel_means that is text raised TypeError."""
    path = tmp_path / "b.npz"
    if typed:
        _potts_npz(path, **extra)
    else:
        np.savez(path, W=np.zeros((4, 2)), vbias=np.zeros(4), hbias=np.zeros(2), **extra)
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(path))}: {says}"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "means,says",
    [
        ("abc", r"train_pixel_means is a <U3 array of shape \(\); it must hold real numbers"),
        ([[1.0, 2.0], [3.0]], r"train_pixel_means is not an array of numbers"),
        (-torch.ones(12) / 3, r"train_pixel_means has 12 entries outside the range of a categorical\(4x3\) layer's"),
    ],
)
def test_a_typed_pt_checkpoints_bad_means_are_refused_naming_file_and_key(tmp_path, means, says):
    """Issue 45, bug 4 (typed .pt), and a Potts .pt whose means are negative, which was accepted."""
    model = load_checkpoint(_potts_npz(tmp_path / "p.npz")).model
    save_checkpoint(tmp_path / "p.pt", model)
    payload = torch.load(tmp_path / "p.pt", weights_only=True)
    payload["train_pixel_means"] = means
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(tmp_path / 'bad.pt'))}: {says}"):
        load_checkpoint(tmp_path / "bad.pt")
    if isinstance(means, Tensor):  # save_checkpoint refuses what load_checkpoint would
        with pytest.raises(ValueError, match="outside the range"):
            save_checkpoint(tmp_path / "again.pt", model, train_pixel_means=means)


@pytest.mark.parametrize(
    "metadata,says",
    [
        ({"dataset": 5}, r"metadata\['dataset'\] is an int \(5\); it must be a dataset's name"),
        ({"dataset": ["digits"]}, r"metadata\['dataset'\] is a list"),
        ({"dataset": {"a": 1}}, r"metadata\['dataset'\] is a dict"),
        ({"dataset": True}, r"metadata\['dataset'\] is a bool"),
        ({"dataset": 1.5}, r"metadata\['dataset'\] is a float"),
        ({"log_z_exact": "x"}, r"metadata\['log_z_exact'\] is a str \('x'\); it must be a real number"),
        ({"ignored_variables": 5}, r"metadata\['ignored_variables'\] is an int \(5\); it must be a list of strings"),
    ],
)
def test_metadata_fields_of_the_wrong_type_are_refused_saving_and_loading(tmp_path, rbm, metadata, says):
    """Issue 45, bug 5: save_checkpoint accepted metadata={'dataset': 5}, and evaluate then raised TypeError."""
    with pytest.raises(TypeError, match=f"^save_checkpoint: {says}"):
        save_checkpoint(tmp_path / "m.pt", rbm, metadata=metadata)
    assert not (tmp_path / "m.pt").exists()
    save_checkpoint(tmp_path / "ok.pt", rbm)
    payload = torch.load(tmp_path / "ok.pt", weights_only=True)
    payload["metadata"] = metadata  # a file written by other code
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(tmp_path / 'bad.pt'))}: {says}"):
        load_checkpoint(tmp_path / "bad.pt")


def test_metadata_that_is_not_a_dict_is_refused_when_loading(tmp_path, rbm):
    """Issue 45, bug 5: a .pt whose metadata is a list gave "dictionary update sequence element #0 ..."."""
    save_checkpoint(tmp_path / "ok.pt", rbm)
    payload = torch.load(tmp_path / "ok.pt", weights_only=True)
    payload["metadata"] = ["digits"]
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=r"bad\.pt: metadata is a list \(\['digits'\]\); it must be a dict"):
        load_checkpoint(tmp_path / "bad.pt")


def _gaussian_npz(path, sigmas, dtype=np.float64, **replace):
    arrays = dict(W=np.full((3, 2), 0.1, dtype=dtype), vbias=np.zeros(3), hbias=np.zeros(2), visible="gaussian",
                  hidden="bernoulli", sigma=np.asarray(sigmas, dtype=float))  # fmt: skip
    np.savez(path, **{**arrays, **replace})
    return path


@pytest.mark.parametrize(
    "sigma,dtype,says",
    [
        ([1.0, np.inf, -1.0], np.float64, r"sigma must be positive and finite .*; 2 entries are not"),
        (
            [1e30, 1.0, 1.0],
            np.float32,
            r"sigma has 1 entries \(e.g. 1e\+30 at index 0\) whose precision 1 / sigma\^2 "
            r"is 0 in float32",
        ),  # fmt: skip
        ([1e-25, 1.0, 1.0], np.float32, r"sigma has 1 entries .* is infinite in float32"),
    ],
)
def test_gaussian_sigmas_out_of_range_are_refused_when_loading(tmp_path, sigma, dtype, says):
    """Issue 45: an inf sigma was not counted; 1e30 was called "not positive" and 1e-25 failed late in the run."""
    path = _gaussian_npz(tmp_path / "g.npz", sigma, dtype)
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(path))}: {says}"):
        load_checkpoint(path)


@pytest.mark.parametrize("sigma,says", [(1e30, "must be positive"), (1e-25, "biases_0 has 1 entries that overflow")])
def test_a_float64_gaussian_machine_that_float32_cannot_hold_is_refused_when_converted(tmp_path, sigma, says):
    path = _gaussian_npz(tmp_path / "g.npz", [sigma, 1.0, 1.0])
    assert load_checkpoint(path, dtype=torch.float64).model.dtype == torch.float64
    with pytest.raises(CheckpointError, match=rf"g\.npz: in float32, .*{says}.*: use float64"):
        load_checkpoint(path, dtype=torch.float32)


@pytest.mark.parametrize("key", ["W", "sigma"])
def test_a_typed_npz_array_of_text_names_the_file_and_key(tmp_path, key):
    path = _gaussian_npz(tmp_path / "g.npz", [1.0, 1.0, 1.0], **{key: np.array("abc")})
    with pytest.raises(CheckpointError, match=rf"g\.npz: {key} is a <U3 array of shape \(\); expected real numbers"):
        load_checkpoint(path)
