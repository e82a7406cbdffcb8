"""Fully visible pairwise models (`models.fully_visible.FullyVisibleModel`) in checkpoint files.

- .npz, the convention of issue 42: arrays `h` and `J`, a 0-d string `visible` ('categorical', 'spin' or
  'bernoulli') and optionally a 0-d string `alphabet`: categorical h (L, q) and J (L, q, L, q); spin and 0/1 sites
  h (n,) and J (n, n). Without `visible`, a 4-d J is categorical; a 2-d J needs it (spin and 0/1 differ).
- .pt (`save_checkpoint`): model_type 'fully-visible', state {fields, couplings}, config {sites, alphabet}.

Float64 arrays stay float64; anything else is read as float32. What the model refuses (shapes, asymmetric J,
self-couplings, NaN) is said with the file's name.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import torch
from raise_eval.models.fully_visible import FullyVisibleModel
from raise_eval.models.io.builders import CheckpointError, _string, float_tensor
from torch import Tensor

MODEL_TYPE = "fully-visible"
NPZ_KEYS = ("h", "J")
SITE_KINDS = ("categorical", "spin", "bernoulli")


def is_fully_visible_npz(arrays: dict) -> bool:
    """Whether an .npz's arrays are a fully visible model's (`h` and `J`)."""
    return all(k in arrays for k in NPZ_KEYS)


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
    fields, couplings = float_tensor(path, "h", arrays.pop("h")), float_tensor(path, "J", arrays.pop("J"))
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


# ------------------------------------------------------------------------------------------- adabmDCA
# adabmDCA 1.0.0's parameter text format (its io.save_params / io.load_params): lines "J i j a b value" (0-based
# positions, letters of the alphabet) for the couplings, written for i < j, and "h i a value" for the fields; '#'
# lines are comments. Its energy is E(x) = -h.x - x'Jx / 2 with J made symmetric on reading (a block written under
# both (i, j) and (j, i) is summed, as its loader sums them), so log f(v) = -E(v) is our convention. Its alphabets:
ADABMDCA_ALPHABETS = {"protein": "-ACDEFGHIKLMNPQRSTVWY", "rna": "-ACGU", "dna": "-ACGT"}


def read_adabmdca_parameters(path, alphabet: str = "protein", dtype: torch.dtype = torch.float64) -> FullyVisibleModel:
    """The categorical model of an adabmDCA parameter file (plain or gzip-compressed), read as adabmDCA reads it.

    `alphabet`: 'protein', 'rna', 'dna' (adabmDCA's own, gap first) or the letters themselves, in the order of the
    states. A malformed line, a letter outside the alphabet, a negative position, a value that is not a finite
    number, a self-coupling, or a field or coupling written twice is refused (CheckpointError) naming the file and the
    line.
    """
    import gzip

    path = Path(path)
    tokens = ADABMDCA_ALPHABETS.get(alphabet, alphabet)
    index = {t: i for i, t in enumerate(tokens)}
    if len(index) != len(tokens) or len(tokens) < 2:
        raise CheckpointError(f"{path}: alphabet {alphabet!r} must have two or more distinct letters")
    with open(path, "rb") as probe:
        compressed = probe.read(2) == b"\x1f\x8b"
    fields: dict[tuple[int, int], float] = {}
    couplings: dict[tuple[int, int, int, int], float] = {}
    first_lines: dict[tuple, int] = {}  # each record's line, to name both lines of a repeated one
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if compressed else open(path, encoding="utf-8")) as handle:
            for number, line in enumerate(handle, 1):
                parts = line.split()
                if not parts or parts[0].startswith("#"):
                    continue
                _adabmdca_record(path, number, parts, index, (fields, couplings, first_lines))
    except (OSError, EOFError, UnicodeDecodeError) as e:
        what = f"{type(e).__name__}: {e}"
        raise CheckpointError(f"{path} cannot be read as an adabmDCA parameter file ({what})") from None
    if not fields:
        raise CheckpointError(f"{path}: no field records ('h i a value'): not an adabmDCA parameter file?")
    size = 1 + max(max(i for i, _ in fields), max((max(k[0], k[1]) for k in couplings), default=0))
    q = len(tokens)
    h = torch.zeros(size, q, dtype=torch.float64)
    for (i, a), value in fields.items():
        h[i, a] = value
    written = torch.zeros(size, q, size, q, dtype=torch.float64)  # as the lines say (each record once)
    for (i, j, a, b), value in couplings.items():
        written[i, a, j, b] = value
    J = written + written.permute(2, 3, 0, 1)  # symmetric, the two triangles summed: adabmDCA's reading
    return build(path, h.to(dtype), J.to(dtype), "categorical", tokens)


def _adabmdca_record(path, number, parts, index, records) -> None:
    """Check one line's record and add it to records = (fields, couplings, first_lines); a record written twice is
    refused as ambiguous (adabmDCA 1.0.0's loader keeps a repeated field's last line, and assigns repeated couplings
    by numpy fancy indexing, whose result numpy leaves unspecified; its own writer never repeats a record)."""
    fields, couplings, first_lines = records
    where = f"{path}, line {number}"
    kind, want = parts[0], {"J": 6, "h": 4}.get(parts[0])
    if want is None or len(parts) != want:
        raise CheckpointError(f"{where}: expected 'J i j a b value' or 'h i a value', got {' '.join(parts)[:80]!r}")
    try:
        positions = [int(p) for p in parts[1 : want - 1 - (2 if kind == "J" else 1)]]
        value = float(parts[-1])
    except ValueError:
        shown = " ".join(parts)
        raise CheckpointError(f"{where}: positions must be integers and the value a number: {shown!r}") from None
    letters = parts[want - 1 - (2 if kind == "J" else 1) : want - 1]
    if any(p < 0 for p in positions):
        raise CheckpointError(f"{where}: a negative position")
    unknown = [c for c in letters if c not in index]
    if unknown:
        raise CheckpointError(f"{where}: letter {unknown[0]!r} is not in the alphabet {''.join(index)!r}")
    if not math.isfinite(value):
        raise CheckpointError(f"{where}: the value {parts[-1]} is not finite")
    states = [index[c] for c in letters]
    key = (kind, *positions, *states)
    if key in first_lines:
        shown = " ".join(parts[: want - 1])
        raise CheckpointError(
            f"{where}: {shown!r} is written again (first on line {first_lines[key]}); each field and coupling once"
        )
    first_lines[key] = number
    if kind == "h":
        fields[(positions[0], states[0])] = value
        return
    i, j = positions
    if i == j:
        raise CheckpointError(f"{where}: a self-coupling (i = j = {i}); a pairwise model couples distinct sites")
    couplings[(i, j, states[0], states[1])] = value
