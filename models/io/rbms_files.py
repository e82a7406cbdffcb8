"""Training runs of DsysDML/rbms (`pip install rbms`) read from its HDF5 files: every `update_{n}` group is a
checkpoint of the run, so one file is a whole trajectory.

rbms' layout: a root dataset `model_type` (bytes: 'BBRBM', 'PBRBM' or 'PBM') and, per saved update n, a group
`update_{n}` whose `params` subgroup holds the named arrays (older files hold them in the group itself). What each
becomes here, with rbms' energies (log f = -E):

- 'BBRBM' (Bernoulli-Bernoulli RBM): weight_matrix (n_v, n_h), vbias (n_v,), hbias (n_h,);
  E(v, h) = -v.vbias - h.hbias - v^T W h, our `RBM` as it is.
- 'PBRBM' (Potts-Bernoulli RBM): weight_matrix (L, q, n_h), vbias (L, q), hbias (n_h,);
  E(v, h) = -sum_i vbias[i, v_i] - h.hbias - sum_i W[i, v_i, :].h, a `MixedBoltzmannMachine` with a categorical
  visible layer (`rbm_from_arrays('categorical', 'bernoulli', ...)`, the same convention). rbms trains it in the
  zero-sum gauge (it moves the weights' mean over states into hbias and subtracts the fields' mean over states):
  the gauge changes log f by a constant at most, and the arrays are read as stored, so log f(v) equals rbms' -E(v)
  and log Z is that of the stored parameters.
- 'PBM' (Potts Boltzmann machine, rbms' bmDCA): weight_matrix W (L, q, L, q), bias (L, q);
  E(v) = -sum_i bias[i, v_i] - x^T W x / 2 over the one-hot x of v (L q,), the sum over every pair of sites and
  each site with itself. As a `FullyVisibleModel`: couplings J = (W + W^T) / 2 with the blocks J[i, :, i, :] set to
  zero and fields h[i, a] = bias[i, a] + W[i, a, i, a] / 2 (a site's own block only meets x at (a, a)), so that
  sum_i h[i, v_i] + sum_{i<j} J[i, v_i, j, v_j] = -E(v) exactly.

States are rbms' integer codes 0..q-1; the file does not record the letters. rbms' protein alphabet is adabmDCA's,
`-ACDEFGHIKLMNPQRSTVWY` (rna `-ACGU`, dna `-ACGT`): give it (`alphabet`) to read alignments against the model.
Float64 arrays stay float64, others are read as float32. h5py is imported only here, when a file is read
(`pip install raise-eval[hdf5]`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import torch
from raise_eval.models.boltzmann.mixed import rbm_from_arrays
from raise_eval.models.fully_visible import FullyVisibleModel
from raise_eval.models.io.builders import CheckpointError, _make_rbm, float_tensor
from torch import Tensor

HDF5_SUFFIXES = (".h5", ".hdf5")
RBMS_MODEL_TYPES = {"BBRBM": ("weight_matrix", "vbias", "hbias"), "PBRBM": ("weight_matrix", "vbias", "hbias"),
                    "PBM": ("weight_matrix", "bias")}  # fmt: skip
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_UPDATE = re.compile(r"update_(\d+)")


def is_hdf5_name(path) -> bool:
    """Whether `path`'s name says HDF5 (.h5, .hdf5): the files this module reads."""
    return Path(path).suffix.lower() in HDF5_SUFFIXES


def _h5py():
    try:
        import h5py
    except ImportError:
        raise CheckpointError(
            "reading rbms HDF5 files needs h5py, which is not installed: pip install raise-eval[hdf5] (or pip install "
            "h5py)"
        ) from None
    return h5py


def _open(path: Path):
    """The open h5py File, after checking that `path` is an HDF5 file (CheckpointError otherwise)."""
    h5py = _h5py()
    with open(path, "rb") as probe:
        head = probe.read(8)
    if head != _HDF5_SIGNATURE:  # rbms writes no user block, so the signature is at offset 0
        raise CheckpointError(f"{path} is not an HDF5 file (no HDF5 signature at its start); give an rbms run's .h5")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise CheckpointError(f"{path} cannot be read as HDF5 ({e}); is it truncated or damaged?") from None


def _model_type(path: Path, handle) -> str:
    updates = _updates_of(handle)
    if "model_type" not in handle or not updates:
        raise CheckpointError(
            f"{path} is an HDF5 file but not an rbms run: it has no model_type and update_{{n}} groups (found "
            f"{sorted(handle.keys())[:6]})"
        )
    value = handle["model_type"][()]
    name = value.decode() if isinstance(value, bytes) else str(value)
    if name not in RBMS_MODEL_TYPES:
        raise CheckpointError(
            f"{path}: rbms model_type {name!r} is not read by raise-eval; known: {', '.join(RBMS_MODEL_TYPES)}"
        )
    return name


def _updates_of(handle) -> list[int]:
    found = []
    for key in handle.keys():
        m = _UPDATE.fullmatch(key)
        if m is not None and hasattr(handle[key], "keys"):
            found.append(int(m.group(1)))
    return sorted(found)


def rbms_updates(path) -> list[int]:
    """The update numbers n of an rbms run's `update_{n}` groups, in increasing order (training order)."""
    path = Path(path)
    with _open(path) as handle:
        _model_type(path, handle)
        return _updates_of(handle)


def read_rbms_update(path, update: Optional[int] = None, alphabet: Optional[str] = None):
    """(model, metadata) of update `update` of an rbms run (default: the last one saved).

    The model: an `RBM` ('BBRBM'), a `MixedBoltzmannMachine` with a categorical visible layer ('PBRBM') or a
    `FullyVisibleModel` ('PBM'), as the module docstring says. `alphabet`: the q letters of a categorical model's
    states, or None. metadata: {'rbms_model_type', 'update', 'updates'}. A file that is not an rbms run, an
    unknown model type, a missing update or array, is refused (CheckpointError) before any array is read.
    """
    path = Path(path)
    with _open(path) as handle:
        model_type = _model_type(path, handle)
        updates = _updates_of(handle)
        if update is None:
            update = updates[-1]
        elif update not in updates:
            shown = ", ".join(map(str, updates[:8])) + (", ..." if len(updates) > 8 else "")
            raise CheckpointError(f"{path} has no update_{update}; its updates are {shown}: give one of them")
        group = handle[f"update_{update}"]
        group = group["params"] if "params" in group else group  # older files: the arrays in the group itself
        names = RBMS_MODEL_TYPES[model_type]
        missing = [n for n in names if n not in group]
        if missing:
            raise CheckpointError(
                f"{path}: update_{update} of an rbms {model_type} lacks {missing}; it needs {list(names)}"
            )
        arrays = {n: float_tensor(path, f"update_{update}/{n}", group[n][()]) for n in names}
    metadata = {"rbms_model_type": model_type, "update": update, "updates": updates}
    return _build(path, model_type, arrays, alphabet), metadata


def _build(path: Path, model_type: str, arrays: dict[str, Tensor], alphabet: Optional[str]):
    if model_type == "BBRBM":
        if alphabet is not None:
            raise CheckpointError(f"{path}: an alphabet belongs to categorical sites; this run is a binary RBM")
        return _make_rbm(path, arrays["weight_matrix"], arrays["vbias"], arrays["hbias"],
                         ("weight_matrix", "vbias", "hbias"))  # fmt: skip
    try:
        if model_type == "PBRBM":
            return rbm_from_arrays("categorical", "bernoulli", arrays["weight_matrix"], arrays["vbias"],
                                   arrays["hbias"], alphabet=alphabet)  # fmt: skip
        fields, couplings = pbm_parameters(arrays["weight_matrix"], arrays["bias"])
        return FullyVisibleModel(fields, couplings, "categorical", alphabet)
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: rbms {model_type}: {e}") from None


def pbm_parameters(weight_matrix: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
    """(fields h (L, q), couplings J (L, q, L, q)) of rbms' PBM with weight_matrix W (L, q, L, q) and bias (L, q):
    J the symmetric part of W without the sites' own blocks, h the bias plus half of each site's own diagonal."""
    if weight_matrix.dim() != 4 or bias.dim() != 2 or tuple(weight_matrix.shape) != (*bias.shape, *bias.shape):
        raise ValueError(
            f"weight_matrix is shaped {tuple(weight_matrix.shape)} and bias {tuple(bias.shape)}; a PBM's are "
            "(L, q, L, q) and (L, q)"
        )
    sites, states = bias.shape
    dtype = torch.promote_types(weight_matrix.dtype, bias.dtype)
    W, bias = weight_matrix.to(dtype), bias.to(dtype)
    couplings = (W + W.permute(2, 3, 0, 1)) / 2
    own = torch.arange(sites)
    couplings[own, :, own, :] = 0
    fields = bias + torch.diagonal(W[own, :, own, :], dim1=1, dim2=2) / 2
    return fields, couplings
