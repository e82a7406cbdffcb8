"""Output files that cost no one their work: what a command will write is checked before any computation.

`check_outputs` refuses, with one line naming the option, the path and the fix:

- an output that is an input of the run (the checkpoint, the data, ...), however it is spelled: paths are compared
  resolved, and with os.path.samefile when both exist (symbolic and hard links). Never allowed;
- two outputs naming the same file;
- an existing file that raise-eval did not write (`written_by_raise_eval`), unless `overwrite` is true. A resume
  file is never replaced, since the run reads it back: a foreign one is to be deleted or named otherwise.

raise-eval marks what it writes: every JSON document carries "tool": "raise-eval" (`raise_eval.io.results.dump_json`;
documents written before the mark are recognized by their keys), every plot the metadata of `plot_metadata`, and
resume files have their own format keys (`raise_eval.runtime.resume`; a certified run's JSON, `raise_eval.certify`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from raise_eval._version import __version__
from raise_eval.io.results import TOOL

PathLike = Union[str, os.PathLike]
KINDS = ("json", "plot", "resume")
# The top-level keys of the JSON documents raise-eval wrote before they carried "tool": evaluate, a certified run,
# bdmc.
_UNMARKED_DOCUMENTS = (
    {"complete", "log_z", "log_likelihood", "settings"},
    {"verdict", "history", "tolerance"},
    {"settings", "simulated"},
)
_PLOT_MARK = TOOL.encode()
_MARK_WINDOW = 1 << 16  # bytes read at each end of a plot: PNG, SVG and JPEG mark the head, PDF its trailer
_LARGEST_DOCUMENT = 1 << 28  # raise-eval's JSON documents are far smaller; a larger file is not one of them


class OutputError(ValueError):
    """An output path that would cost work (an input, a duplicate, a file raise-eval did not write)."""


@dataclass(frozen=True)
class Output:
    """A file a command writes: `option` names it for the user (e.g. '--json'), `kind` is one of KINDS."""

    option: str
    path: Optional[PathLike]
    kind: str


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether two paths name one file: os.path.samefile when both exist (links, other spellings), else the
    resolved paths."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def plot_metadata(path: PathLike) -> dict:
    """Keyword arguments of matplotlib's savefig that mark a plot as raise-eval's (see `written_by_raise_eval`)."""
    mark = f"{TOOL} {__version__}"
    suffix = Path(path).suffix.lower()
    if suffix in (".jpg", ".jpeg"):
        return {"pil_kwargs": {"comment": mark.encode()}}
    if suffix == ".png":
        return {"metadata": {"Software": mark}}
    if suffix in (".pdf", ".svg", ".ps", ".eps"):
        return {"metadata": {"Creator": mark}}
    return {}


def written_by_raise_eval(path: PathLike, kind: str) -> bool:
    """Whether the existing file `path` is a `kind` file that raise-eval wrote: a JSON document, a plot, or a
    resume file (a raise-eval resume file, or a certified run's JSON)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    path = Path(path)
    if kind == "plot":
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(_MARK_WINDOW)
            f.seek(max(0, size - _MARK_WINDOW))
            tail = f.read()
        return _PLOT_MARK in head or _PLOT_MARK in tail
    doc = _json_document(path)
    if kind == "json":
        return isinstance(doc, dict) and (
            doc.get("tool") == TOOL or any(keys <= doc.keys() for keys in _UNMARKED_DOCUMENTS)
        )
    if isinstance(doc, dict):  # a certified run's resume file (raise_eval.certify)
        return {"format", "fingerprint", "history"} <= doc.keys()
    return _is_resume_file(path)


def check_outputs(
    outputs: Iterable[Output], inputs: Iterable[tuple[str, Optional[PathLike]]] = (), *, overwrite: bool = False
) -> None:
    """Refuse (OutputError, one line) an output that is an input, two outputs naming one file, or an existing file
    that raise-eval did not write unless `overwrite` (see the module docstring). `inputs` are (what, path) pairs,
    e.g. ("the checkpoint", "model.pt") or ("--data", "test.npy"); None paths are skipped."""
    outputs = [o for o in outputs if o.path]
    inputs = [(what, p) for what, p in inputs if p]
    for i, out in enumerate(outputs):
        if out.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {out.kind!r}")
        for what, source in inputs:
            if same_file(out.path, source):
                raise OutputError(
                    f"{out.option} {out.path} is {what} ({source}), an input of this run: writing it would destroy "
                    "it; name another file (nothing was computed)"
                )
        for other in outputs[:i]:
            if same_file(out.path, other.path):
                raise OutputError(
                    f"{other.option} and {out.option} both name {out.path}: one would overwrite the other; give them "
                    "different files (nothing was computed)"
                )
        path = Path(out.path)
        if not path.is_file() or written_by_raise_eval(path, out.kind):
            continue
        from raise_eval.models.io.files import describe

        if out.kind == "resume":
            raise OutputError(
                f"{out.option} {out.path} exists and is not a raise-eval resume file ({describe(path)}): the run "
                "would read it back and then replace it; name another file, or delete it to start over (nothing "
                "was computed)"
            )
        if not overwrite:
            raise OutputError(
                f"{out.option} {out.path} exists and was not written by raise-eval ({describe(path)}); name another "
                "file, or pass --overwrite to replace it (nothing was computed)"
            )


def _json_document(path: Path):
    """The parsed JSON of `path`, or None when it is not JSON (or too large to be one of raise-eval's)."""
    if path.stat().st_size > _LARGEST_DOCUMENT:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


def _is_resume_file(path: Path) -> bool:
    """Whether `path` is a resume file of `raise_eval.runtime.resume` (its tensors memory-mapped, not read)."""
    import torch

    from raise_eval.runtime.resume import READABLE_FORMATS

    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - whatever it is, it is not a resume file
        return False
    return isinstance(loaded, dict) and loaded.get("format") in READABLE_FORMATS and "shards" in loaded


__all__ = ["KINDS", "Output", "OutputError", "check_outputs", "plot_metadata", "same_file", "written_by_raise_eval"]
