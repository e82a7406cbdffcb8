"""Checkpoints: raise-eval's own format, and importers for RBMs trained elsewhere.

raise-eval checkpoint (.pt, written with torch.save, read with torch.load(weights_only=True)) is a dict:

    {
        "format": "raise-eval-checkpoint",
        "version": 1,
        "model_type": "rbm",
        "state": {"W": (n_visible, n_hidden), "vbias": (n_visible,), "hbias": (n_hidden,)},
        "metadata": {...},                       # optional; strings, numbers, lists (e.g. "dataset": "digits")
        "train_pixel_means": (n_visible,),       # optional; the data base rates of the training set
    }

or, for a VAE, "model_type": "vae", "config": {"data_dim", "latent_dim", "hidden", "activation"} and "state" the
module's state_dict.

Importers (`load_checkpoint` picks one from the file name):
- .npz with arrays W (n_visible, n_hidden), vbias and hbias, and optionally logZ_exact (the format of
  ../shared/data/checkpoints);
- MATLAB .mat (level 5) with vishid (n_visible, n_hidden), hidbiases (or hidrecbiases) and visbiases, as saved by
  Salakhutdinov's RBM code; other MATLAB variables are listed in metadata["ignored_variables"].

Unknown or missing keys are errors that name the keys expected.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

from models.boltzmann.rbm import RBM
from models.io.matfile import read_mat

FORMAT = "raise-eval-checkpoint"
VERSION = 1
_TOP_KEYS_REQUIRED = {"format", "version", "model_type", "state"}
_TOP_KEYS_OPTIONAL = {"metadata", "train_pixel_means", "config"}
_STATE_KEYS = {"rbm": ("W", "vbias", "hbias")}
_MODEL_TYPES = ("rbm", "vae")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded as it is; the message says what is wrong and how to fix it."""


@dataclass
class Checkpoint:
    """A loaded model with what came with it.

    model: the model (float32 unless the file held float64 and `dtype` was not given).
    metadata: free-form information (dataset, training settings, exact log Z when known...).
    train_pixel_means: mean of each visible unit over the training set (n_visible,), or None.
    source: the file it came from; source_format: 'raise-eval', 'npz' or 'mat'.
    """

    model: Any  # RBM or VAE
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
    """Write an RBM or a VAE in raise-eval's format (see the module docstring)."""
    from models.directed.vae import VAE

    if isinstance(model, VAE):
        torch.save(
            {
                "format": FORMAT,
                "version": VERSION,
                "model_type": "vae",
                "config": asdict(model.config),
                "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                "metadata": dict(metadata or {}),
            },
            str(path),
        )
        return
    if not isinstance(model, RBM):
        raise TypeError(f"save_checkpoint writes RBMs and VAEs; got {type(model).__name__}")
    payload: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "model_type": "rbm",
        "state": {k: t.detach().cpu().clone() for k, t in zip(_STATE_KEYS["rbm"], (model.W, model.vbias, model.hbias))},
        "metadata": dict(metadata or {}),
    }
    if train_pixel_means is not None:
        means = torch.as_tensor(train_pixel_means).detach().cpu().flatten()
        if means.numel() != model.n_visible:
            raise ValueError(
                f"train_pixel_means has {means.numel()} entries; the model has {model.n_visible} visible units"
            )
        payload["train_pixel_means"] = means.to(model.dtype)
    torch.save(payload, str(path))


def load_checkpoint(path: Union[str, Path], dtype: Optional[torch.dtype] = None, device=None) -> Checkpoint:
    """Load a raise-eval .pt checkpoint, an .npz or a MATLAB .mat RBM (chosen by the file name)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    suffix = path.suffix.lower()
    if suffix in (".pt", ".pth", ".ckpt"):
        ckpt = _load_raise_eval(path)
    elif suffix == ".npz":
        ckpt = _load_npz(path)
    elif suffix == ".mat":
        ckpt = _load_mat(path)
    else:
        raise CheckpointError(
            f"{path}: unknown checkpoint type {suffix or '(no extension)'}; expected .pt (raise-eval), "
            ".npz (W, vbias, hbias) or .mat (vishid, hidbiases, visbiases)"
        )
    if dtype is not None or device is not None:
        ckpt.model = ckpt.model.to(device=device, dtype=dtype)  # nn.Module.to for VAEs (in place, returns self)
        if ckpt.train_pixel_means is not None:
            ckpt.train_pixel_means = ckpt.train_pixel_means.to(device=device, dtype=dtype)
    return ckpt


def _load_raise_eval(path: Path) -> Checkpoint:
    try:
        payload = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling errors name what they found
        raise CheckpointError(
            f"{path} is not a raise-eval checkpoint readable with torch.load(weights_only=True): {e}"
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
    _check_keys(path, set(state), set(_STATE_KEYS[model_type]), f"state of a {model_type}")
    model = _make_rbm(path, state["W"], state["vbias"], state["hbias"])
    means = payload.get("train_pixel_means")
    if means is not None:
        means = torch.as_tensor(means).flatten()
        if means.numel() != model.n_visible:
            raise CheckpointError(f"{path}: train_pixel_means has {means.numel()} entries for {model.n_visible} units")
    return Checkpoint(model, dict(payload.get("metadata") or {}), means, str(path), "raise-eval")


def _load_vae(path: Path, payload: dict) -> Checkpoint:
    from models.directed.vae import VAE, VAEConfig

    config = payload.get("config")
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: a VAE checkpoint needs 'config' (data_dim, latent_dim, hidden, activation)")
    known = {"data_dim", "latent_dim", "hidden", "activation"}
    _check_keys(path, set(config), known, "a VAE config")
    try:
        model = VAE(VAEConfig(**config))
        model.load_state_dict(payload["state"], strict=True)
    except (RuntimeError, ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: the state does not fit the VAE config: {e}") from None
    for name, t in model.state_dict().items():
        if not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{path}: parameter {name} has NaN or infinite entries")
    model.requires_grad_(False).eval()
    return Checkpoint(model, dict(payload.get("metadata") or {}), None, str(path), "raise-eval")


def _load_npz(path: Path) -> Checkpoint:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    _check_keys(path, set(arrays), {"W", "vbias", "hbias"}, "an .npz RBM", optional={"logZ_exact"})
    model = _make_rbm(path, arrays["W"], arrays["vbias"], arrays["hbias"])
    metadata: dict[str, Any] = {}
    if "logZ_exact" in arrays:
        metadata["log_z_exact"] = float(arrays["logZ_exact"])
    return Checkpoint(model, metadata, None, str(path), "npz")


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
    model = _make_rbm(path, arrays["vishid"], arrays["visbiases"], arrays["hidbiases"])
    ignored = sorted(set(arrays) - required) + sorted(skipped)
    metadata: dict[str, Any] = {"ignored_variables": ignored} if ignored else {}
    return Checkpoint(model, metadata, None, str(path), "mat")


def _make_rbm(path: Path, W, vbias, hbias) -> RBM:
    W, vbias, hbias = (torch.as_tensor(np.asarray(x)) if not isinstance(x, Tensor) else x for x in (W, vbias, hbias))
    if W.dim() != 2:
        raise CheckpointError(
            f"{path}: the weight matrix must be 2-D (n_visible, n_hidden), got shape {tuple(W.shape)}"
        )
    for name, b in (("visible biases", vbias), ("hidden biases", hbias)):
        if b.dim() > 2 or (b.dim() == 2 and min(b.shape) != 1):
            raise CheckpointError(f"{path}: {name} must be a vector, got shape {tuple(b.shape)}")
    vbias, hbias = vbias.flatten(), hbias.flatten()
    if (vbias.numel(), hbias.numel()) != tuple(W.shape):
        raise CheckpointError(
            f"{path}: weights are {tuple(W.shape)} but there are {vbias.numel()} visible and {hbias.numel()} hidden "
            "biases; the weight matrix must be (n_visible, n_hidden)"
        )
    dtype = torch.float64 if W.dtype == torch.float64 else torch.float32
    try:
        return RBM(W.to(dtype), vbias.to(dtype), hbias.to(dtype))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: {e}") from None


def _check_keys(path: Path, found: set, required: set, what: str, optional: set = frozenset()) -> None:
    missing, unknown = required - found, found - required - set(optional)
    if missing or unknown:
        extra = f" (optional: {', '.join(sorted(optional))})" if optional else ""
        keys = ", ".join(sorted(required))
        raise CheckpointError(f"{path}: {_describe_keys(missing, unknown)}; {what} has exactly the keys {keys}{extra}")


def _describe_keys(missing: set, unknown: set) -> str:
    parts = []
    if missing:
        parts.append(f"missing keys {sorted(missing)}")
    if unknown:
        parts.append(f"unknown keys {sorted(unknown)}")
    return " and ".join(parts)
