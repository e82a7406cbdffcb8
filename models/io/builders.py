"""Building models from arrays read out of a file, whatever its format (.pt, .npz, .mat): the keys checked against
what is expected, shapes against each other, values for NaN, infinities and complex numbers; `CheckpointError`
says what was expected and where."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from raise_eval.models.boltzmann.dbm import DBM
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.rbm import RBM
from torch import Tensor

_LAYERED_KEY = re.compile(r"^(weights|biases|recognition_biases)_(0|[1-9][0-9]*)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded as it is; the message says what is wrong and how to fix it."""


def _make_layered(path: Path, model_type: str, arrays: dict, strict: bool):
    """A DBM or DBN from arrays named weights_l, biases_l (and recognition_biases_l); returns (model, the names of
    other arrays). With `strict`, other names are errors (a .pt state); otherwise they are returned (an .npz)."""
    groups: dict[str, dict[int, Any]] = {"weights": {}, "biases": {}, "recognition_biases": {}}
    others = []
    for name, value in arrays.items():
        m = _LAYERED_KEY.match(name) if isinstance(name, str) else None
        if m is None:
            others.append(name)
        else:
            groups[m.group(1)][int(m.group(2))] = value
    dbn = model_type == "dbn"
    if not dbn and groups["recognition_biases"]:
        names = sorted(f"recognition_biases_{i}" for i in groups["recognition_biases"])
        raise CheckpointError(
            f"{path}: {names} belong to a DBN but model_type is {model_type!r}; set model_type 'dbn' or drop them"
        )
    # L from the largest index of any kind, so that a gap anywhere is named as a missing key.
    n_weights = max(
        [i + 1 for i in groups["weights"]]
        + [i for i in groups["biases"]]
        + [i + 1 for i in groups["recognition_biases"]],
        default=0,
    )
    n_weights = max(n_weights, 2)
    expected = (
        [f"weights_{l}" for l in range(n_weights)]
        + [f"biases_{l}" for l in range(n_weights + 1)]
        + ([f"recognition_biases_{l}" for l in range(1, n_weights)] if dbn else [])
    )
    found = {f"{kind}_{i}" for kind, d in groups.items() for i in d}
    missing, unknown = set(expected) - found, found - set(expected)
    if strict:
        unknown |= set(map(str, others))
    if missing or unknown:
        L = n_weights
        keys = f"weights_0..weights_{L - 1}, biases_0..biases_{L}"
        if dbn:
            keys += f", recognition_biases_1..recognition_biases_{L - 1}"
        raise CheckpointError(
            f"{path}: {_describe_keys(missing, unknown)}; a {model_type} with {L} weight matrices (at least 2) has "
            f"the keys {keys}, indices without gaps"
        )

    def tensor(name, value):
        try:
            return value if isinstance(value, Tensor) else torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"{path}: {name} is not a numeric array: {e}") from None

    def vector(name, value):
        t = tensor(name, value)
        if t.dim() > 2 or (t.dim() == 2 and min(t.shape) != 1):
            raise CheckpointError(f"{path}: {name} must be a vector, got shape {tuple(t.shape)}")
        return t.flatten()

    weights = [tensor(f"weights_{l}", groups["weights"][l]) for l in range(n_weights)]
    biases = [vector(f"biases_{l}", groups["biases"][l]) for l in range(n_weights + 1)]
    recognition = (
        [vector(f"recognition_biases_{l}", groups["recognition_biases"][l]) for l in range(1, n_weights)] if dbn else []
    )
    sizes = [b.numel() for b in biases]
    for l, w in enumerate(weights):
        if tuple(w.shape) != (sizes[l], sizes[l + 1]):
            raise CheckpointError(
                f"{path}: weights_{l} has shape {tuple(w.shape)} but biases_{l} and biases_{l + 1} have {sizes[l]} "
                f"and {sizes[l + 1]} entries; weights_l must be shaped (n_l, n_(l+1)) = ({sizes[l]}, {sizes[l + 1]})"
            )
    for l, r in enumerate(recognition, start=1):
        if r.numel() != sizes[l]:
            raise CheckpointError(
                f"{path}: recognition_biases_{l} has {r.numel()} entries but layer {l} has {sizes[l]} units "
                f"(biases_{l}); they must match"
            )
    named = [(f"weights_{l}", w) for l, w in enumerate(weights)] + [(f"biases_{l}", b) for l, b in enumerate(biases)]
    named += [(f"recognition_biases_{l}", r) for l, r in enumerate(recognition, start=1)]
    for name, t in named:
        if t.is_complex() or t.dtype == torch.bool:
            raise CheckpointError(f"{path}: {name} has dtype {t.dtype}; expected real numbers")
    dtype = torch.float64 if weights[0].dtype == torch.float64 else torch.float32

    def conv(ts):
        return [t.to(dtype) for t in ts]

    try:
        if dbn:
            model = DBN(conv(weights), conv(biases), conv(recognition))
        else:
            model = DBM(conv(weights), conv(biases))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    return model, sorted(map(str, others))


def _make_rbm(path: Path, W, vbias, hbias, names: tuple = ("W", "vbias", "hbias")) -> RBM:
    """An RBM from its weights and biases; `names` are their keys in the file, for the messages."""
    W, vbias, hbias = (torch.as_tensor(np.asarray(x)) if not isinstance(x, Tensor) else x for x in (W, vbias, hbias))
    for name, t in zip(names, (W, vbias, hbias)):
        if t.is_complex() or t.dtype == torch.bool:  # .to(float32) would keep the real part without a word
            raise CheckpointError(f"{path}: {name} has dtype {t.dtype}; expected real numbers")
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
