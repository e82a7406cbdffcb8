"""Typed results that serialize to JSON (tensors become lists, non-finite floats become null)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import torch


def to_jsonable(obj: Any) -> Any:
    """Convert results to plain JSON types: tensors -> numbers/lists, nan/inf -> None, dataclasses -> dicts."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "to_dict"):
            return to_jsonable(obj.to_dict())
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, torch.Tensor):
        return to_jsonable(obj.detach().cpu().double().tolist() if obj.is_floating_point() else obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, torch.dtype):
        return str(obj).replace("torch.", "")
    return str(obj)


def dump_json(obj: Any, path: str) -> None:
    """Write `obj` as indented JSON (strictly valid: no NaN/Infinity tokens)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(to_jsonable(obj), f, indent=2, allow_nan=False)
        f.write("\n")


def scalar(t: torch.Tensor) -> float:
    """A 0-d tensor as a Python float."""
    return float(t.detach().cpu().double())
