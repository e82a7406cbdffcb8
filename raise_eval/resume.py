"""Resumable runs: `--resume-file FILE` keeps every finished shard so that the same command continues a run.

The file (written with torch.save, read with torch.load(weights_only=True)) is a dict

    format: FORMAT
    settings: what determines the numbers (digests of the model's parameters, the test data, the start
        distribution and the schedule; seed, chain counts, shard size, dtype, device, ...)
    shards: {stage: {shard index: {"log_weights": tensor, ...}}} for the finished AIS and RAISE shards
    log_f: the log f(v) estimates once computed (a dict of LogUnnormalizedEstimate's fields), or absent

It is rewritten atomically (a temporary file, then os.replace) after every finished shard, so Ctrl-C or a crash
loses at most the shard in progress. A shard that had not finished is run again from its start with its own
generator, which gives the numbers an uninterrupted run gives; its mid-shard annealing state is not saved (choose a
smaller --shard-size for finer-grained saving). A file written with other settings is refused, naming each
setting that differs and its two values.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

FORMAT = 1


def tensor_digest(tensors: Iterable[Tensor]) -> str:
    """sha256 (first 16 hex digits) of the tensors' shapes, dtypes and values, in order."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def model_digest(model) -> str:
    """Digest of a Boltzmann machine's or DBN's parameters (weights, biases, recognition biases)."""
    tensors = [*model.weights, *model.biases, *getattr(model, "recognition_biases", ())]
    scale = getattr(model, "weight_scale", 1.0)
    return f"{tensor_digest(tensors)}/{float(scale)!r}"


class ResumeFile:
    """The finished shards of one run, kept in `path` (see the module docstring).

    Opening refuses (ValueError) a file written with other settings; a missing file starts an empty run.
    """

    def __init__(self, path, settings: dict[str, Any]):
        self.path = Path(path)
        self.settings = dict(settings)
        self.data: dict[str, Any] = {"format": FORMAT, "settings": self.settings, "shards": {}}
        if self.path.exists():
            try:
                loaded = torch.load(str(self.path), map_location="cpu", weights_only=True)
            except Exception as e:  # noqa: BLE001 - any unreadable file gets the same advice
                raise ValueError(
                    f"--resume-file {self.path} is not a raise-eval resume file ({type(e).__name__}); "
                    "delete it or name another file"
                ) from None
            if not isinstance(loaded, dict) or loaded.get("format") != FORMAT:
                raise ValueError(
                    f"--resume-file {self.path} is not a raise-eval resume file of format {FORMAT}; delete it or "
                    "name another file"
                )
            old = loaded.get("settings", {})
            differ = [
                f"{k}: {old.get(k)!r} in the file, {self.settings.get(k)!r} now"
                for k in sorted(set(old) | set(self.settings))
                if old.get(k) != self.settings.get(k)
            ]
            if differ:
                raise ValueError(
                    f"--resume-file {self.path} was written by a run with other settings ("
                    + "; ".join(differ)
                    + "); run with the same settings to continue it, or delete it or name another file to start over"
                )
            self.data = loaded

    def shards(self, stage: str) -> dict[int, dict]:
        """The finished shards of `stage` ('ais', 'raise'): {index: result}."""
        return self.data["shards"].get(stage, {})

    def save_shard(self, stage: str, index: int, result: dict) -> None:
        self.data["shards"].setdefault(stage, {})[int(index)] = _cpu(result)
        self.write()

    def get(self, key: str):
        return self.data.get(key)

    def put(self, key: str, value) -> None:
        self.data[key] = _cpu(value)
        self.write()

    def write(self) -> None:
        """Atomically replace the file: a reader (or a crash) never sees half a file."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        torch.save(self.data, str(tmp))
        os.replace(tmp, self.path)


def _cpu(obj):
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    return obj
