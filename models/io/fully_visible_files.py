"""Fully visible pairwise models (`models.fully_visible.FullyVisibleModel`) in checkpoint files.

- .npz, the convention of issue 42: arrays `h` and `J`, a 0-d string `visible` ('categorical', 'spin' or
  'bernoulli') and optionally a 0-d string `alphabet`: categorical h (L, q) and J (L, q, L, q); spin and 0/1 sites
  h (n,) and J (n, n). Without `visible`, a 4-d J is categorical; a 2-d J needs it (spin and 0/1 differ).
- .pt (`save_checkpoint`): model_type 'fully-visible', state {fields, couplings}, config {sites, alphabet}.

Float64 arrays stay float64; anything else is read as float32. What the model refuses (shapes, asymmetric J,
self-couplings, NaN) is said with the file's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from raise_eval.models.fully_visible import FullyVisibleModel
from raise_eval.models.io.builders import CheckpointError, _string
from torch import Tensor

MODEL_TYPE = "fully-visible"
NPZ_KEYS = ("h", "J")
SITE_KINDS = ("categorical", "spin", "bernoulli")


def is_fully_visible_npz(arrays: dict) -> bool:
    """Whether an .npz's arrays are a fully visible model's (`h` and `J`)."""
    return all(k in arrays for k in NPZ_KEYS)


def _tensor(path: Path, key: str, value) -> Tensor:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise CheckpointError(f"{path}: {key} must be a numeric array, got dtype {array.dtype}")
    dtype = torch.float64 if array.dtype == np.float64 else torch.float32
    return torch.as_tensor(array).to(dtype)


def build(path: Path, fields, couplings, sites: str, alphabet: Optional[str]) -> FullyVisibleModel:
    """The model, its refusal said with the file's name (CheckpointError)."""
    if sites not in SITE_KINDS:
        raise CheckpointError(f"{path}: visible = {sites!r}; a fully visible model's sites are one of {SITE_KINDS}")
    try:
        return FullyVisibleModel(fields, couplings, sites=sites, alphabet=alphabet)
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: {e}") from None


def make_fully_visible_npz(path: Path, arrays: dict) -> FullyVisibleModel:
    """The model of an .npz's arrays; pops the keys it reads (the rest are the caller's to list)."""
    fields, couplings = _tensor(path, "h", arrays.pop("h")), _tensor(path, "J", arrays.pop("J"))
    if "visible" in arrays:
        sites = _string(path, "visible", arrays.pop("visible"))
    elif couplings.dim() == 4:
        sites = "categorical"
    else:
        raise CheckpointError(
            f"{path}: J is shaped {tuple(couplings.shape)} and there is no visible array: say whether the sites are "
            "'spin' (-1/+1) or 'bernoulli' (0/1), e.g. np.savez(..., h=h, J=J, visible='spin')"
        )
    alphabet = _string(path, "alphabet", arrays.pop("alphabet")) if "alphabet" in arrays else None
    if fields.dtype != couplings.dtype:  # one dtype for the model: the wider
        wide = torch.float64 if torch.float64 in (fields.dtype, couplings.dtype) else torch.float32
        fields, couplings = fields.to(wide), couplings.to(wide)
    return build(path, fields, couplings, sites, alphabet)


def fully_visible_payload(model: FullyVisibleModel) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config, state) of a .pt checkpoint."""
    config = {"sites": model.sites, "alphabet": model.alphabet}
    return config, {"fields": model.fields, "couplings": model.couplings}


def make_fully_visible_pt(path: Path, config, state: dict) -> FullyVisibleModel:
    """The model of a .pt checkpoint's config and state."""
    if not isinstance(config, dict) or set(config) != {"sites", "alphabet"}:
        raise CheckpointError(f"{path}: a fully visible checkpoint's config is {{'sites', 'alphabet'}}, got {config!r}")
    missing = {"fields", "couplings"} - set(state)
    unknown = set(state) - {"fields", "couplings"}
    if missing or unknown:
        raise CheckpointError(
            f"{path}: a fully visible checkpoint's state holds fields and couplings; "
            f"missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    return build(path, state["fields"], state["couplings"], config["sites"], config["alphabet"])
