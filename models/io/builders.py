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


def real_array(path: Path, key: str, value) -> Tensor:
    """An optional array of a checkpoint as a tensor of real numbers; CheckpointError naming the file and `key` when
    it is text, ragged lists, complex or otherwise not numbers."""
    if isinstance(value, Tensor):
        array = value
    else:
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as e:  # ragged nested lists
            raise CheckpointError(f"{path}: {key} is not an array of numbers ({e})") from None
        if array.dtype.kind not in "biuf":
            raise CheckpointError(
                f"{path}: {key} is a {array.dtype} array of shape {array.shape}; it must hold real numbers"
            )
        array = torch.as_tensor(array)
    if array.is_complex():
        raise CheckpointError(f"{path}: {key} has dtype {array.dtype}; it must hold real numbers")
    return array


def float_tensor(path: Path, key: str, value) -> Tensor:
    """`real_array` as parameters: float64 kept, every other real dtype (bool and integers included) as float32."""
    array = real_array(path, key, value)
    return array.to(torch.float64 if array.dtype == torch.float64 else torch.float32)


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


# ----------------------------------------------------------------------------------------------- typed layers
# The .npz convention of machines with Gaussian, categorical (Potts) or spin units (docs/units.md): 0-d string arrays
# `visible` and `hidden` name the unit types; W, vbias, hbias as `rbm_from_arrays` reads them; sigma / hsigma the
# standard deviations of a Gaussian visible / hidden layer; alphabet (a 0-d string of q symbols) a categorical
# visible layer's. Without `visible` and `hidden` a file is a binary RBM, as before.
UNIT_KEYS = ("visible", "hidden")
MIXED_KEYS = ("W", "vbias", "hbias", "visible", "hidden", "sigma", "hsigma", "alphabet")
_TYPED_ONLY = ("sigma", "hsigma", "alphabet")  # keys a binary RBM never has


def _string(path: Path, key: str, value) -> str:
    value = np.asarray(value)
    if value.ndim != 0 or value.dtype.kind not in "US":
        raise CheckpointError(f"{path}: {key} must be a 0-d string array (e.g. np.savez(..., {key}='gaussian')), got "
                              f"a {value.dtype} array of shape {value.shape}")  # fmt: skip
    item = value[()]
    return item.decode() if isinstance(item, bytes) else str(item)


def is_typed_npz(arrays: dict) -> bool:
    """Whether an .npz's arrays describe a machine of typed layers (`visible`/`hidden` keys, or keys only such a
    machine has, which are then refused rather than read as a binary RBM)."""
    return any(k in arrays for k in UNIT_KEYS + _TYPED_ONLY)


def make_typed_rbm(path: Path, arrays: dict):
    """An RBM of typed layers (or the binary `RBM` when both layers are Bernoulli) from .npz arrays; pops the keys
    it reads from `arrays` (the rest are the caller's to list). CheckpointError names the key and the fix."""
    from raise_eval.models.boltzmann.mixed import rbm_from_arrays
    from raise_eval.models.boltzmann.units import UNIT_ALIASES, UNIT_TYPES, unit_type

    known = f"{', '.join(UNIT_TYPES)} (or {', '.join(UNIT_ALIASES)})"
    missing = [k for k in UNIT_KEYS if k not in arrays]
    if missing:
        extra = [k for k in _TYPED_ONLY if k in arrays]
        why = f" but it holds {', '.join(extra)}, which a binary RBM does not have" if extra and len(missing) == 2 \
            else ""  # fmt: skip
        raise CheckpointError(
            f"{path}: no {' or '.join(missing)} unit type{why}; a machine of typed units names both layers' types, "
            f"e.g. np.savez(..., visible='gaussian', hidden='bernoulli') (types: {known}); a binary RBM has neither "
            "key"
        )
    kinds = {}
    for key in UNIT_KEYS:
        name = _string(path, key, arrays.pop(key))
        try:
            kinds[key] = unit_type(name)
        except ValueError:
            raise CheckpointError(f"{path}: {key} = {name!r} is not a unit type raise-eval knows ({known}); the file "
                                  "is not read as a binary machine") from None  # fmt: skip
    missing = {"W", "vbias", "hbias"} - set(arrays)
    if missing:
        raise CheckpointError(f"{path}: {_describe_keys(missing, set())}; an RBM of {kinds['visible']} visible and "
                              f"{kinds['hidden']} hidden units has W, vbias and hbias (docs/units.md)")  # fmt: skip
    alphabet = _string(path, "alphabet", arrays.pop("alphabet")) if "alphabet" in arrays else None
    W, vbias, hbias = arrays.pop("W"), arrays.pop("vbias"), arrays.pop("hbias")
    sigma, hsigma = arrays.pop("sigma", None), arrays.pop("hsigma", None)
    if kinds["visible"] == kinds["hidden"] == "bernoulli" and sigma is None and hsigma is None and alphabet is None:
        return _make_rbm(path, W, vbias, hbias)  # a binary RBM: the binary machine and its fast path
    try:
        return rbm_from_arrays(kinds["visible"], kinds["hidden"], W, vbias, hbias, sigma=sigma, hsigma=hsigma,
                               alphabet=alphabet)  # fmt: skip
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: {e}") from None


def make_mixed(path: Path, config, state: dict):
    """A `MixedBoltzmannMachine` from a .pt checkpoint's config {"layers": [layer configs]} and state weights_l,
    biases_l (its own parameters: a Gaussian layer's biases_l is (eta, lam) shaped (2, n))."""
    from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine
    from raise_eval.models.boltzmann.units import layer_from_config

    if not isinstance(config, dict) or not isinstance(config.get("layers"), (list, tuple)):
        raise CheckpointError(f"{path}: a checkpoint of model_type 'mixed' needs config {{'layers': [...]}}")
    try:
        layers = [layer_from_config(c) for c in config["layers"]]
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"{path}: config's layers: {e}") from None
    n = len(layers)
    expected = {f"weights_{l}" for l in range(n - 1)} | {f"biases_{l}" for l in range(n)}
    _check_keys(path, set(state), expected, f"the state of a {n}-layer machine")
    for name, t in state.items():
        if not isinstance(t, Tensor) or t.is_complex() or t.dtype == torch.bool:
            raise CheckpointError(f"{path}: {name} must be a real tensor")
    dtype = torch.float64 if state["weights_0"].dtype == torch.float64 else torch.float32
    try:
        return MixedBoltzmannMachine(layers, [state[f"weights_{l}"].to(dtype) for l in range(n - 1)],
                                     [state[f"biases_{l}"].to(dtype) for l in range(n)])  # fmt: skip
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: {e}") from None


def mixed_state(model) -> tuple[dict, dict[str, Tensor]]:
    """(config, state) of a `MixedBoltzmannMachine` for a .pt checkpoint (`make_mixed` reads them back)."""
    if model.weight_scale != 1.0:
        raise ValueError(f"this machine has weight_scale {model.weight_scale:g} (a point on an annealing path); save "
                         "the model itself")  # fmt: skip
    from raise_eval.models.boltzmann.units import layer_from_config

    for l, layer in enumerate(model.layers):  # a file that load_checkpoint could not read is never written
        try:
            readable = layer_from_config(layer.to_config()) == layer
        except (ValueError, TypeError) as e:
            readable, why = False, str(e)
        else:
            why = f"its config {layer.to_config()} reads back as another layer"
        if not readable:
            raise ValueError(
                f"layer {l} ({layer.describe()}, a {type(layer).__name__}) cannot be saved in a checkpoint: {why}; "
                "checkpoints hold the unit types raise-eval can read back (bernoulli, spin, categorical, gaussian)"
            )
    state = {f"weights_{l}": w for l, w in enumerate(model.weights)}
    state.update({f"biases_{l}": b for l, b in enumerate(model.biases)})
    return {"layers": [layer.to_config() for layer in model.layers]}, state


def log_z_exact_value(path: Path, value: np.ndarray) -> float:
    """An .npz's logZ_exact: one finite real number; CheckpointError naming the file and the key otherwise."""
    value = np.asarray(value)
    if value.size != 1 or value.dtype.kind not in "iuf" or not np.isfinite(value).all():
        shown = f" ({np.array2string(value.ravel()[:3], threshold=3)})" if value.dtype.kind in "iufcb" else ""
        raise CheckpointError(
            f"{path}: logZ_exact must be one finite real number (the exact log partition function), got a "
            f"{value.dtype} array of shape {value.shape}{shown}; save it as a number or leave it out"
        )
    return float(value.reshape(()))
