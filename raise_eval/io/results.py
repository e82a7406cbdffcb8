"""Typed results that serialize to JSON (tensors become lists, non-finite floats become null)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Optional

import torch

from raise_eval._version import __version__
from raise_eval.io.outputs import TOOL
from raise_eval.io.writing import write_file
from raise_eval.stats import scalar  # noqa: F401 (re-exported: its old place)


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


def dump_json(obj: Any, path: str) -> Optional[Path]:
    """Write `obj` as indented JSON (strictly valid: no NaN/Infinity tokens) and return the path written, or None
    for the null device (nothing written). A document (a dict) begins with "tool": "raise-eval" and
    "raise_eval_version", the mark by which a later run knows it may replace the file.

    Written whole or not at all (`raise_eval.io.writing.write_file`): a failed write leaves the old file as it was, no
    temporary file, and raises `OutputWriteError` naming the file in the system's temporary folder that keeps the
    JSON (its `text` holds the JSON for the caller to print when even that failed)."""
    doc = to_jsonable(obj)
    if isinstance(doc, dict):
        doc = {"tool": TOOL, "raise_eval_version": __version__, **doc}
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"  # serialized first: a bug here touches no file
    return write_file(path, text, what="the JSON")
