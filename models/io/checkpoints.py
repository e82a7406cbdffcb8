"""Checkpoints: raise-eval's own format, and importers for models trained elsewhere.

raise-eval checkpoint (.pt, written with torch.save, read with torch.load(weights_only=True)) is a dict:

    {
        "format": "raise-eval-checkpoint",
        "version": 1,
        "model_type": "rbm",
        "state": {"W": (n_visible, n_hidden), "vbias": (n_visible,), "hbias": (n_hidden,)},
        "metadata": {...},                       # optional; strings, numbers, lists (e.g. "dataset": "digits")
        "train_pixel_means": (n_visible,),       # optional; the data base rates of the training set
    }

For a DBM (layers x_0 = v, x_1, ..., x_L, L >= 2 hidden layers) "model_type" is "dbm" and "state" holds
"weights_0" .. "weights_{L-1}", weights_l shaped (n_l, n_{l+1}), and "biases_0" .. "biases_L", biases_l shaped
(n_l,). A DBN ("model_type": "dbn") has the same keys (weights_{L-1}, biases_{L-1} and biases_L are its top RBM,
weights_l and biases_l for l < L-1 its directed layers p(x_l | x_{l+1})) plus "recognition_biases_1" ..
"recognition_biases_{L-1}", the biases of q(x_l | x_{l-1}) for layers 1 .. L-1.

A VAE: "model_type" "vae", "config" {data_dim, latent_dim, hidden, activation}, "state" its state_dict.

Importers (`load_checkpoint` picks one from the file name):
- .npz (numpy.savez) interchange format:
  * an RBM: arrays W (n_visible, n_hidden), vbias and hbias, and optionally logZ_exact (the format of
    ../shared/data/checkpoints), which goes into metadata["log_z_exact"];
  * a DBM or DBN: a 0-d string array model_type ('dbm' or 'dbn'; 'rbm' names the arrays above), weights_0 ..
    weights_{L-1} (weights_l shaped (n_l, n_{l+1})), biases_0 .. biases_L and, for a DBN, recognition_biases_1 ..
    recognition_biases_{L-1}, named as in the .pt state above;
  * either may hold train_pixel_means (n_visible,). Other arrays are loaded past and listed in
    metadata["ignored_variables"]. `save_npz` writes this format.
  * a fully visible pairwise model: arrays h and J, visible and optionally alphabet (`fully_visible_files`; its .pt
    has model_type 'fully-visible').
- MATLAB .mat (level 5) with vishid (n_visible, n_hidden), hidbiases (or hidrecbiases) and visbiases, as saved by
  Salakhutdinov's RBM code; other MATLAB variables are listed in metadata["ignored_variables"].
- .h5 / .hdf5: a DsysDML/rbms training run, one update_{n} of it (`rbms_files`; needs h5py).

What save_checkpoint stores, load_checkpoint reads back: metadata (and a VAE's config) are kept in types that
torch.load(weights_only=True) reads. NumPy scalars become Python numbers (np.float32(0.1) -> 0.10000000149011612,
the float32's exact value), NumPy arrays nested lists, paths (os.PathLike) strings, datetime/date/time values ISO
8601 strings, tensors detached CPU copies; anything else that loader would refuse (a function, an arbitrary object)
is refused when saving, naming its key, before anything is written.

Float64 weights stay float64; anything else is read as float32. Missing keys, unknown keys in a .pt state, gaps in
the layer indices, mismatched shapes and NaN or infinite values are errors that say what was expected.
"""

from __future__ import annotations

import os
import re
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from raise_eval.models.boltzmann.dbm import DBM
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.rbm import RBM
from raise_eval.models.contracts import declared_family, has_typed_layers
from raise_eval.models.io.builders import (
    _LAYERED_KEY,
    CheckpointError,
    _check_keys,
    _describe_keys,
    _make_layered,
    _make_rbm,
    is_typed_npz,
    log_z_exact_value,
    make_mixed,
    make_typed_rbm,
    mixed_state,
    real_array,
)
from raise_eval.models.io.files import check_magic, why_unusable
from raise_eval.models.io.fully_visible_files import MODEL_TYPE as FULLY_VISIBLE
from raise_eval.models.io.fully_visible_files import (
    fully_visible_payload,
    is_fully_visible_npz,
    make_fully_visible_npz,
    make_fully_visible_pt,
)
from raise_eval.models.io.matfile import read_mat
from raise_eval.models.io.metadata import _storable, metadata_problem
from raise_eval.models.io.rbms_files import is_hdf5_name, read_rbms_update
from torch import Tensor

FORMAT = "raise-eval-checkpoint"
VERSION = 1
_TOP_KEYS_REQUIRED = {"format", "version", "model_type", "state"}
_TOP_KEYS_OPTIONAL = {"metadata", "train_pixel_means", "config"}
_STATE_KEYS = {"rbm": ("W", "vbias", "hbias")}
_MODEL_TYPES = ("rbm", "dbm", "dbn", "vae", "mixed", FULLY_VISIBLE)  # mixed: typed layers (models/boltzmann/mixed.py)
_NPZ_MODEL_TYPES = ("rbm", "dbm", "dbn")


@dataclass
class Checkpoint:
    """A loaded model with what came with it.

    model: the model (float32 unless the file held float64 and `dtype` was not given).
    metadata: free-form information (dataset, training settings, exact log Z when known...).
    train_pixel_means: mean of each visible unit over the training set (n_visible,), or None.
    source: the file it came from; source_format: 'raise-eval', 'npz', 'mat' or 'rbms'.
    """

    model: Any  # RBM, DBM, DBN or VAE
    metadata: dict[str, Any] = field(default_factory=dict)
    train_pixel_means: Optional[Tensor] = None
    source: str = ""
    source_format: str = "raise-eval"


def save_checkpoint(
    path: Union[str, Path],
    model,
    metadata: Optional[dict[str, Any]] = None,
    train_pixel_means: Optional[Tensor] = None,
) -> None:
    """Write an RBM, a DBM, a DBN or a VAE in raise-eval's format (see the module docstring). `metadata` is stored
    in a form load_checkpoint reads back (NumPy scalars and arrays, paths and dates converted); a value it could not
    read back raises TypeError naming its key, and nothing is written. The file is written whole or not at all (a
    temporary file renamed over it): a failed write raises OutputWriteError and leaves the file at `path` as it was,
    the new checkpoint kept in the system's temporary folder where it can be (named in the error). `path` may also be
    an open binary file or buffer."""
    from raise_eval.models.directed.vae import VAE

    stored = _storable(metadata, "metadata")
    if isinstance(model, VAE):
        _save_whole(
            {
                "format": FORMAT,
                "version": VERSION,
                "model_type": "vae",
                "config": _storable(asdict(model.config), "the VAE's config"),
                "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                "metadata": stored,
                **(
                    {}
                    if train_pixel_means is None
                    else {"train_pixel_means": _vae_pixel_means(train_pixel_means, model)}
                ),
            },
            path,
        )
        return
    config = None
    if declared_family(model) == FULLY_VISIBLE:  # declared by the model (`models.contracts`)
        model_type = FULLY_VISIBLE
        config, state = fully_visible_payload(model)
    else:
        what = "save_checkpoint writes RBMs, DBMs, DBNs, fully visible models and VAEs"
        model_type, state = _boltzmann_state(model, what)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "model_type": model_type,
        "state": {k: t.detach().cpu().clone() for k, t in state.items()},
        "metadata": stored,
    }
    if model_type == "mixed":
        payload["config"] = mixed_state(model)[0]
    if config is not None:
        payload["config"] = config
    if train_pixel_means is not None:
        payload["train_pixel_means"] = _pixel_means_to_save(train_pixel_means, model)
    _save_whole(payload, path)


def _save_whole(payload: dict, path) -> None:
    _write_whole(path, lambda f: torch.save(payload, f), "the checkpoint")


def _no_file_writer(path, content, *, what: str, keep_on_failure: bool) -> None:
    raise RuntimeError(f"no file writer to save {what} with: import raise_eval first (it installs one)")


# How a checkpoint file is written: `raise_eval.io.writing.write_file`, whole or not at all, installed by importing
# raise_eval (which runs before any of raise_eval.models is imported). Injected because models/ may not import
# raise_eval.io (models/__init__.py).
_file_writer = _no_file_writer


def use_file_writer(writer) -> None:
    """Install `writer(path, write_to_path, what=..., keep_on_failure=...)` as the writer of checkpoint files (the
    signature of `raise_eval.io.writing.write_file`)."""
    global _file_writer
    _file_writer = writer


def file_writer():
    """The writer of checkpoint files (`use_file_writer`)."""
    return _file_writer


def _write_whole(path, write, what: str) -> None:
    """`write(file)` into an open binary file at `path`, whole or not at all: a crash or a full disk leaves the file
    that was at `path` as it was (and the new content in the system's temporary folder, named in the error), never
    half of one. An open file or buffer given as `path` is written directly: the caller owns it."""
    if hasattr(path, "write"):
        write(path)
        return
    _file_writer(path, lambda p: _write_to(p, write), what=what, keep_on_failure=True)


def _write_to(path: str, write) -> None:
    with open(path, "wb") as f:  # a file object: np.savez would add '.npz' to the temporary file's name
        write(f)


def save_npz(path: Union[str, Path], model, train_pixel_means: Optional[Tensor] = None) -> None:
    """Write an RBM (W, vbias, hbias), a DBM or a DBN (model_type, weights_l, biases_l, recognition_biases_l) in
    the .npz interchange format of the module docstring."""
    model_type, state = _boltzmann_state(model, "save_npz writes RBMs, DBMs and DBNs")
    arrays = {k: t.detach().cpu().numpy() for k, t in state.items()}
    if model_type == "mixed":
        from raise_eval.models.boltzmann.mixed import rbm_arrays

        arrays = rbm_arrays(model)  # the convention of other code: W, vbias, hbias, visible, hidden, sigma, ...
    elif model_type != "rbm":
        arrays["model_type"] = np.array(model_type)
    if train_pixel_means is not None:
        arrays["train_pixel_means"] = _pixel_means_to_save(train_pixel_means, model).numpy()
    if not hasattr(path, "write"):
        path = os.fspath(path)
        path = path if path.endswith(".npz") else path + ".npz"  # where np.savez(path) writes
    _write_whole(path, lambda f: np.savez(f, **arrays), "the .npz file")


def _boltzmann_state(model, what: str) -> tuple[str, dict[str, Tensor]]:
    """(model_type, state) of an RBM, DBM or DBN, with the key names of the module docstring."""
    if isinstance(model, RBM):
        return "rbm", dict(zip(_STATE_KEYS["rbm"], (model.W, model.vbias, model.hbias)))
    if has_typed_layers(model):  # a MixedBoltzmannMachine (`models.contracts.BoltzmannModel`)
        return "mixed", mixed_state(model)[1]
    if isinstance(model, DBM):
        if model.weight_scale != 1.0:
            raise ValueError(
                f"this DBM has weight_scale {model.weight_scale:g} (a point on an annealing path); "
                "save the model itself"
            )
        model_type = "dbm"
    elif isinstance(model, DBN):
        model_type = "dbn"
    else:
        raise TypeError(f"{what}; got {type(model).__name__}")
    state = {f"weights_{l}": w for l, w in enumerate(model.weights)}
    state.update({f"biases_{l}": b for l, b in enumerate(model.biases)})
    if model_type == "dbn":
        state.update({f"recognition_biases_{i + 1}": r for i, r in enumerate(model.recognition_biases)})
    return model_type, state


def _pixel_means_to_save(train_pixel_means, model) -> Tensor:
    try:
        torch.as_tensor(train_pixel_means, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(
            f"train_pixel_means must be numbers (the training set's means), got {type(train_pixel_means).__name__} "
            f"{str(train_pixel_means)[:40]!r}"
        ) from None
    if model.typed_layers:  # typed layers: the visible layer's training statistics
        return _typed_statistics(model, torch.as_tensor(train_pixel_means).detach().cpu()).to(model.dtype)
    means = torch.as_tensor(train_pixel_means).detach().cpu().flatten()
    if means.numel() != model.n_visible:
        raise ValueError(
            f"train_pixel_means has {means.numel()} entries; the model has {model.n_visible} visible units"
        )
    problem = _means_problem(means)
    if problem:  # load_checkpoint would refuse them
        raise ValueError(f"train_pixel_means {problem}; they must be the training set's pixel means, in [0, 1]")
    return means.to(model.dtype)


def _vae_pixel_means(train_pixel_means, model) -> Tensor:
    means = torch.as_tensor(train_pixel_means).detach().cpu().flatten().float()
    if means.numel() != model.config.data_dim:
        raise ValueError(f"train_pixel_means has {means.numel()} entries; the VAE has {model.config.data_dim} inputs")
    return means


def load_checkpoint(
    path: Union[str, Path], dtype: Optional[torch.dtype] = None, device=None, update: Optional[int] = None
) -> Checkpoint:
    """Load a raise-eval .pt checkpoint, an .npz (RBM, DBM, DBN or fully visible model), a MATLAB .mat RBM or an rbms
    run's HDF5 file (.h5: its `update` n, default the last; `rbms_files`), chosen by the file name."""
    path = Path(path)
    unusable = why_unusable(path)
    if unusable == "does not exist":
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    if unusable is not None:  # a symbolic link loop, a broken link, a folder, a device: said as such
        raise CheckpointError(f"checkpoint {path} {unusable}; give the checkpoint file")
    suffix = path.suffix.lower()
    if update is not None and not is_hdf5_name(path):
        raise CheckpointError(f"{path}: an update is chosen in an rbms run's HDF5 file (.h5); this is a {suffix} file")
    if is_hdf5_name(path):
        model, metadata = read_rbms_update(path, update)
        ckpt = Checkpoint(model, metadata, None, str(path), "rbms")
    elif suffix in (".pt", ".pth", ".ckpt"):
        ckpt = _load_raise_eval(path)
    elif suffix == ".npz":
        ckpt = _load_npz(path)
    elif suffix == ".mat":
        ckpt = _load_mat(path)
    else:
        raise CheckpointError(
            f"{path}: unknown checkpoint type {suffix or '(no extension)'}; expected .pt (raise-eval), "
            ".npz (W, vbias, hbias, or model_type and weights_l, biases_l, or h and J), .mat (vishid, hidbiases, "
            "visbiases) or .h5 (an rbms run)"
        )
    if dtype is not None or device is not None:
        ckpt.model = ckpt.model.to(device=device, dtype=dtype)  # nn.Module.to for VAEs (in place, returns self)
        if dtype is not None and has_typed_layers(ckpt.model):
            _check_converted(path, ckpt.model, dtype)
        if ckpt.train_pixel_means is not None:
            ckpt.train_pixel_means = ckpt.train_pixel_means.to(device=device, dtype=dtype)
    return ckpt


def _check_converted(path: Path, model, dtype: torch.dtype) -> None:
    """A machine of typed layers converted to `dtype` still has finite parameters that fit its layers (a Gaussian
    layer's precisions 1 / sigma^2 of 1e-60 or 1e50 are 0 or inf in float32); CheckpointError naming the array."""
    named = [(f"weights_{l}", w, None) for l, w in enumerate(model.weights)]
    named += [(f"biases_{l}", b, layer) for l, (b, layer) in enumerate(zip(model.biases, model.layers))]
    for name, t, layer in named:
        try:
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} has {int((~torch.isfinite(t)).sum())} entries that overflow")
            if layer is not None:
                layer.check_params(t, name)
        except ValueError as e:
            raise CheckpointError(
                f"{path}: in {str(dtype).replace('torch.', '')}, {e}; its values are out of that precision's range "
                "(e.g. Gaussian standard deviations far from 1): use float64, or rescale the data and the model"
            ) from None


def _check_file(path: Path, kind: str) -> None:
    try:
        check_magic(path, kind)
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def _load_raise_eval(path: Path) -> Checkpoint:
    _check_file(path, "pt")
    try:
        payload = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling errors name what they found, at length: keep the first line
        first = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines()
        found = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = f"it pickles a {found.group(1)} object" if found else (first[0] if first else type(e).__name__)
        raise CheckpointError(
            f"{path} is not a raise-eval checkpoint (torch.load(weights_only=True) refused it: {what}); save the "
            "model with raise_eval.save_checkpoint, which stores tensors only"
        ) from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path} holds a {type(payload).__name__}; a raise-eval checkpoint is a dict")
    keys = set(payload)
    missing, unknown = _TOP_KEYS_REQUIRED - keys, keys - _TOP_KEYS_REQUIRED - _TOP_KEYS_OPTIONAL
    if missing or unknown:
        raise CheckpointError(
            f"{path}: {_describe_keys(missing, unknown)}; a raise-eval checkpoint has keys "
            f"{sorted(_TOP_KEYS_REQUIRED)} and optionally {sorted(_TOP_KEYS_OPTIONAL)}"
        )
    if payload["format"] != FORMAT or payload["version"] != VERSION:
        raise CheckpointError(
            f"{path}: format {payload['format']!r} version {payload['version']!r}; this version of raise-eval reads "
            f"{FORMAT!r} version {VERSION}"
        )
    model_type = payload["model_type"]
    if model_type not in _MODEL_TYPES:
        raise CheckpointError(f"{path}: model_type {model_type!r} is not supported; known: {list(_MODEL_TYPES)}")
    if model_type == "vae":
        return _load_vae(path, payload)
    state = payload["state"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: 'state' is a {type(state).__name__}; it must be a dict of named tensors")
    if model_type == "rbm":
        _check_keys(path, set(state), set(_STATE_KEYS[model_type]), f"state of a {model_type}")
        model = _make_rbm(path, state["W"], state["vbias"], state["hbias"])
    elif model_type == "mixed":
        model = make_mixed(path, payload.get("config"), state)
    elif model_type == FULLY_VISIBLE:
        model = make_fully_visible_pt(path, payload.get("config"), state)
        return Checkpoint(model, _metadata(path, payload), None, str(path), "raise-eval")
    else:
        model, _ = _make_layered(path, model_type, state, strict=True)
    means = _pixel_means(path, payload.get("train_pixel_means"), model, convert=False)
    return Checkpoint(model, _metadata(path, payload), means, str(path), "raise-eval")


def _metadata(path: Path, payload: dict) -> dict:
    """A .pt checkpoint's metadata (a dict; {} when absent), its fields of `metadata.FIELDS` of their types."""
    metadata = payload.get("metadata")
    if metadata is None:
        return {}
    problem = metadata_problem(metadata)
    if problem:
        raise CheckpointError(f"{path}: {problem} (raise_eval.save_checkpoint checks these fields)")
    return dict(metadata)


def _pixel_means(path: Path, means, model, convert: bool) -> Optional[Tensor]:
    if means is None:
        return None
    means = real_array(path, "train_pixel_means", means)
    if model.typed_layers:  # typed layers: the visible layer's training statistics
        try:
            stats = _typed_statistics(model, means)
        except ValueError as e:
            raise CheckpointError(f"{path}: {e}") from None
        return stats.to(model.dtype)
    means = means.flatten()
    if means.numel() != model.n_visible:
        raise CheckpointError(f"{path}: train_pixel_means has {means.numel()} entries for {model.n_visible} units")
    problem = _means_problem(means)
    if problem:
        raise CheckpointError(
            f"{path}: train_pixel_means {problem}; they must be the training set's pixel means, in [0, 1] (save the "
            "checkpoint again with them, or without train_pixel_means and evaluate with --init uniform)"
        )
    return means.to(model.dtype) if convert else means


# The range of each typed layer's training statistics (one row for Gaussian units' means, one for their variances).
_STATISTICS_RANGES = {"bernoulli": (0.0, 1.0), "categorical": (0.0, 1.0), "spin": (-1.0, 1.0)}


def _typed_statistics(model, means: Tensor) -> Tensor:
    """The visible layer's training statistics checked for shape, finiteness and range (means of one-hot codes and
    of binary units in [0, 1], of spins in [-1, 1], Gaussian variances >= 0); ValueError naming train_pixel_means."""
    layer = model.layers[0]
    stats = layer.check_statistics(means, "train_pixel_means")
    low, high = _STATISTICS_RANGES.get(layer.kind, (None, None))
    outside = ((stats < low) | (stats > high)) if low is not None else (stats[1] < 0)
    if bool(outside.any()):
        what = f"in [{low:g}, {high:g}]" if low is not None else "with variances (the second row) >= 0"
        raise ValueError(
            f"train_pixel_means has {int(outside.sum())} entries outside the range of a {layer.describe()} layer's "
            f"training statistics; they must be {what}"
        )
    return stats


def _means_problem(means: Tensor) -> str:
    """What is wrong with pixel means ('has 3 NaN entries', ...), or '' when they are numbers in [0, 1]."""
    if means.is_complex():
        return f"have dtype {means.dtype}"
    means = means.double()
    nan = int(torch.isnan(means).sum())
    if nan:
        return f"have {nan} NaN entr{'ies' if nan != 1 else 'y'}"
    outside = int(((means < 0) | (means > 1)).sum())
    if outside:
        return f"have {outside} entr{'ies' if outside != 1 else 'y'} outside [0, 1]"
    return ""


def _load_vae(path: Path, payload: dict) -> Checkpoint:
    from raise_eval.models.directed.vae import VAE, VAEConfig

    config = payload.get("config")
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: a VAE checkpoint needs 'config' (data_dim, latent_dim, hidden, activation)")
    known = {"data_dim", "latent_dim", "hidden", "activation"}
    _check_keys(path, set(config), known, "a VAE config")
    state = payload["state"]
    if isinstance(state, dict):
        for name, t in state.items():
            if isinstance(t, Tensor) and (t.is_complex() or t.dtype == torch.bool):
                raise CheckpointError(f"{path}: parameter {name} has dtype {t.dtype}; expected real numbers")
    try:
        model = VAE(VAEConfig(**config))
        model.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: the state does not fit the VAE config: {e}") from None
    for name, t in model.state_dict().items():
        if not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{path}: parameter {name} has NaN or infinite entries")
    model.requires_grad_(False).eval()
    means = payload.get("train_pixel_means")
    if means is not None:
        means = real_array(path, "train_pixel_means", means).float().flatten()
        if means.numel() != model.config.data_dim:
            raise CheckpointError(
                f"{path}: train_pixel_means has {means.numel()} entries but the VAE has {model.config.data_dim} inputs"
            )
    return Checkpoint(model, _metadata(path, payload), means, str(path), "raise-eval")


def _load_npz(path: Path) -> Checkpoint:
    _check_file(path, "npz")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as e:
        if "allow_pickle" in str(e):  # object arrays need pickle, which is refused
            raise CheckpointError(
                f"{path}: cannot read the arrays without pickle ({e}); save plain numeric arrays"
            ) from None
        raise CheckpointError(f"{path} cannot be read: an array in it is truncated or damaged ({e})") from None
    except (EOFError, OSError, zipfile.BadZipFile, zlib.error) as e:
        raise CheckpointError(f"{path} cannot be read: it is truncated or damaged ({type(e).__name__}: {e})") from None
    means = arrays.pop("train_pixel_means", None)
    if is_fully_visible_npz(arrays):  # h and J: a fully visible pairwise model (DCA Potts, Ising)
        model = make_fully_visible_npz(path, arrays)
        if means is not None:
            arrays["train_pixel_means"] = means  # (a fully visible model's base is fitted to sequences, not means)
        return Checkpoint(model, {"ignored_variables": sorted(arrays)} if arrays else {}, None, str(path), "npz")
    layered = sorted(k for k in arrays if _LAYERED_KEY.match(k))
    if is_typed_npz(arrays):  # visible/hidden unit types: never read as a binary RBM
        metadata = {"log_z_exact": log_z_exact_value(path, arrays.pop("logZ_exact"))} if "logZ_exact" in arrays else {}
        model = make_typed_rbm(path, arrays)
        if arrays:
            metadata["ignored_variables"] = sorted(arrays)
        return Checkpoint(model, metadata, _pixel_means(path, means, model, convert=True), str(path), "npz")
    if "model_type" in arrays:
        model_type = _npz_model_type(path, arrays.pop("model_type"))
    elif layered and "W" not in arrays:
        raise CheckpointError(
            f"{path}: arrays {layered[:3] + ['...'] if len(layered) > 3 else layered} but no model_type; a DBM or "
            "DBN .npz needs a 0-d string array model_type, 'dbm' or 'dbn' (e.g. np.savez(..., model_type='dbm'))"
        )
    else:
        model_type = "rbm"
    metadata: dict[str, Any] = {}
    if model_type == "rbm":
        missing = {"W", "vbias", "hbias"} - set(arrays)
        if missing:
            raise CheckpointError(
                f"{path}: {_describe_keys(missing, set())}; an .npz RBM has the arrays W (n_visible, n_hidden), "
                "hbias and vbias (optional: logZ_exact, train_pixel_means); a DBM or DBN .npz has model_type, "
                "weights_l and biases_l"
            )
        model = _make_rbm(path, arrays.pop("W"), arrays.pop("vbias"), arrays.pop("hbias"))
        if "logZ_exact" in arrays:
            metadata["log_z_exact"] = log_z_exact_value(path, arrays.pop("logZ_exact"))
        ignored = sorted(arrays)
    else:
        model, ignored = _make_layered(path, model_type, arrays, strict=False)
    if ignored:
        metadata["ignored_variables"] = ignored
    return Checkpoint(model, metadata, _pixel_means(path, means, model, convert=True), str(path), "npz")


def _npz_model_type(path: Path, value: np.ndarray) -> str:
    if value.ndim != 0 or value.dtype.kind not in "US":
        raise CheckpointError(
            f"{path}: model_type must be a 0-d string array ('dbm' or 'dbn'), got a {value.dtype} array of shape "
            f"{value.shape}"
        )
    item = value[()]
    model_type = item.decode() if isinstance(item, bytes) else str(item)
    if model_type not in _NPZ_MODEL_TYPES:
        raise CheckpointError(
            f"{path}: model_type {model_type!r} is not supported in an .npz; known: {list(_NPZ_MODEL_TYPES)}"
        )
    return model_type


def _load_mat(path: Path) -> Checkpoint:
    arrays, skipped = read_mat(path)
    if "hidbiases" not in arrays and "hidrecbiases" in arrays:
        arrays["hidbiases"] = arrays.pop("hidrecbiases")
    required = {"vishid", "hidbiases", "visbiases"}
    missing = required - set(arrays)
    if missing:
        raise CheckpointError(
            f"{path}: {_describe_keys(missing, set())}; a MATLAB RBM needs vishid (n_visible x n_hidden), "
            f"hidbiases and visbiases (found {sorted(arrays) + sorted(skipped)})"
        )
    names = ("vishid", "visbiases", "hidbiases")
    model = _make_rbm(path, *(arrays[n] for n in names), names)
    ignored = sorted(set(arrays) - required) + sorted(skipped)
    metadata: dict[str, Any] = {"ignored_variables": ignored} if ignored else {}
    return Checkpoint(model, metadata, None, str(path), "mat")
