"""Checkpoint metadata in types that torch.load(weights_only=True) reads back (`save_checkpoint`'s conversions):
NumPy scalars become Python numbers, NumPy arrays nested lists, paths strings, dates ISO 8601 strings, tensors
detached CPU copies; anything else the loader would refuse is refused, naming its key, before anything is written."""

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
    return converted


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
