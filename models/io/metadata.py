"""Checkpoint metadata in types that torch.load(weights_only=True) reads back (`save_checkpoint`'s conversions):
NumPy scalars become Python numbers, NumPy arrays nested lists, paths strings, dates ISO 8601 strings, tensors
detached CPU copies; anything else the loader would refuse is refused, naming its key, before anything is written.

Metadata is free-form except for the fields raise-eval reads (`FIELDS`), whose types `metadata_problem` checks when
saving and when loading: "dataset" names a dataset (a string; a command reads it only when it is a dataset
raise-eval knows, never as a file), "log_z_exact" is a number, "ignored_variables" a list of strings."""

from __future__ import annotations

import datetime
import io
import os
from collections.abc import Mapping
from typing import Optional

import numpy as np
import torch
from torch import Tensor


def _storable(values: Optional[Mapping], where: str) -> dict:
    """`values` in types torch.load(weights_only=True) reads back (see the module docstring); TypeError naming the
    key of a value it would refuse."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise TypeError(f"save_checkpoint: {where} must be a dict, got a {type(values).__name__}")
    converted = _convert(dict(values))
    _check_loadable(converted, where)
    problem = metadata_problem(converted) if where == "metadata" else None
    if problem:
        raise TypeError(f"save_checkpoint: {problem}")
    return converted


FIELDS = {
    "dataset": "a dataset's name, a string such as 'binarized_mnist' (the default of --data)",
    "log_z_exact": "a real number (the exact log partition function)",
    "ignored_variables": "a list of strings (the arrays of an imported file that were not read)",
}


def metadata_problem(metadata) -> Optional[str]:
    """What is wrong with the metadata fields raise-eval reads (`FIELDS`), e.g. "metadata['dataset'] is an int
    (5); it must be a dataset's name, ..."; None when they are of their types (or absent)."""
    if not isinstance(metadata, Mapping):
        return f"metadata is a {type(metadata).__name__} ({metadata!r:.60}); it must be a dict"
    for key, ok in (("dataset", _is_name), ("log_z_exact", _is_real), ("ignored_variables", _is_names)):
        if key in metadata and not ok(metadata[key]):
            kind = type(metadata[key]).__name__
            article = "an" if kind[0] in "aeiou" else "a"
            return f"metadata[{key!r}] is {article} {kind} ({metadata[key]!r:.60}); it must be {FIELDS[key]}"
    return None


def _is_name(value) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_names(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _convert(value):
    if isinstance(value, np.generic):  # np.float32(0.1), np.int64(3), np.bool_(True), np.str_('a')
        return value.item()
    if isinstance(value, np.ndarray):
        return _convert(value.tolist())  # an object array's elements are converted in turn
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, Tensor):
        return value.detach().cpu().clone()  # an nn.Parameter or a CUDA tensor as a plain CPU tensor
    if isinstance(value, Mapping):
        return {_convert(k): _convert(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_convert(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_convert(v) for v in value)  # a named tuple becomes a plain one
    return value  # whatever else: `_check_loadable` asks torch's loader


def _reads_back(value) -> bool:
    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - any refusal by the loader (or failure to pickle) counts
        return False
    return True


def _check_loadable(value, where: str) -> None:
    """Raise TypeError naming the first part of `value` that torch.load(weights_only=True) cannot read back."""
    if _reads_back(value):
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not _reads_back(k):
                raise TypeError(
                    f"save_checkpoint: a key of {where} is a {type(k).__name__} ({k!r:.60}), which load_checkpoint "
                    "could not read back; use strings as keys"
                )
            _check_loadable(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_loadable(v, f"{where}[{i}]")
    raise TypeError(
        f"save_checkpoint: {where} is a {type(value).__module__}.{type(value).__qualname__} ({value!r:.60}), which "
        "load_checkpoint could not read back (torch.load(weights_only=True) reads numbers, strings, lists, tuples, "
        "dicts and tensors); store it as one of those, e.g. str(value)"
    )
