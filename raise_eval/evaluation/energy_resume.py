"""Resumable energy evaluations: `evaluate_energy(..., resume_file=FILE)` keeps its progress in a resume file of
`raise_eval.runtime.resume`'s format, so that the same call continues an interrupted run (Ctrl-C, a crash) with the
bits of an uninterrupted one.

The file holds the pilot's step sizes (`step_sizes`, once tuned), each finished stage as shard 0 of 'ais' / 'raise'
(its log-weights and, for RAISE, log f(v); with the stage's recorded acceptance and drift), and the annealing state of
the stage in progress (`running`: the chains' `EnergyState` as its layers x, log f, gradient; the generator's state;
the recorder's running totals in its `extra`). A file written with other settings (the model's parameters, the
energy's values at fixed probe points, the test data, the base, K, the chains, the kernel, the seed, the dtype or
device) is refused, naming what differs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.runtime.resume import ResumeFile, model_digest, tensor_digest


def energy_resume_settings(model, test: Tensor, settings, base_digest: str) -> dict[str, Any]:
    """What an energy evaluation's resume file must agree on: everything that decides its numbers (`settings`: an
    `EnergySettings`; its tolerance only decides the verdict, recomputed)."""
    numbers = {k: v for k, v in dataclasses.asdict(settings).items() if k != "tolerance"}
    return {
        "family": "energy",
        **numbers,
        "dtype": str(model.dtype),
        "device": str(model.device),
        "parameters": model_digest(model),
        "energy": energy_digest(model),
        "test_data": tensor_digest([test]),
        "base": base_digest,
    }


def energy_digest(model) -> str:
    """The energy itself, as a digest of its values on the fixed probe batch `check_energy` tries it on: another
    function (another model file, a parameter-free energy changed, a plain function) differs here even where the
    parameters and buffers that `model_digest` covers agree or do not exist."""
    from raise_eval.models.energy_check import probe_states

    with torch.no_grad():
        energies = model.energies(model.energy_input(probe_states(model)))
    return tensor_digest([energies])


def base_digest(model, train_data: Optional[Tensor], base: Any) -> str:
    """What the base is made of, as a digest: the training data it is fitted to, the given (or the model's) base's
    tensors and box, or 'default'."""
    if train_data is not None:
        return "fitted to " + tensor_digest([torch.as_tensor(train_data)])
    chosen = base if base is not None else model.base
    if chosen is None:
        return "default"
    tensors = [t for t in (getattr(chosen, n, None) for n in ("mean", "std", "logits")) if isinstance(t, Tensor)]
    box = (getattr(chosen, "low", None), getattr(chosen, "high", None))
    return f"{type(chosen).__name__} {tensor_digest(tensors)} {box!r}"


def open_store(path, settings: dict[str, Any], interval: float) -> ResumeFile:
    """The resume file at `path` (refused, a `SettingsError` naming what differs, when written with other
    settings); the thread count and torch version are its context (reported when they changed)."""
    context = {"threads": torch.get_num_threads(), "torch": str(torch.__version__)}
    return ResumeFile(path, settings, interval=interval, context=context)


class StageCheckpoint:
    """The `ShardCheckpoint` of one stage ('ais' or 'raise', shard 0) whose saves carry `recorder`'s running totals
    (`recorder.live`, kept current at every step) and whose restore hands them back (`recorder.load`): a continued
    stage reports the acceptance (and drift) of an uninterrupted one."""

    def __init__(self, store: ResumeFile, stage: str, generator: torch.Generator, recorder):
        self.inner, self.recorder = store.checkpoint(stage, 0, generator), recorder

    def restore(self, phase: str, path) -> Optional[dict[str, Any]]:
        saved = self.inner.restore(phase, path)
        if saved is not None:
            self.recorder.load(saved["extra"])
        return saved

    def on_step(self, phase: str, extra: Optional[dict] = None):
        if extra:
            raise ValueError("an energy stage's saves carry its recorder's totals only")
        return self.inner.on_step(phase, self.recorder.live)
