"""A training run's saved checkpoints, read in order, and the data they are evaluated on.

A folder holds one run: checkpoint files (.pt, .npz, .mat) and, optionally, a manifest `trajectory.json`
(`write_manifest`, as the training scripts write it) that lists them in training order with their steps:

    {"format": "raise-eval trajectory 1", "checkpoints": [{"file": "step_0000000.pt", "step": 0}, ...]}

Without a manifest the files are ordered by the step number in their names (the last number in the file name, e.g.
`step_0000500.pt`, `rbm_epoch12.npz`); a folder whose names do not say it (no number, or the same number twice) is
refused with the manifest's format. An rbms training run's HDF5 file (.h5) is a run by itself: its update_{n} groups
are the checkpoints, at step n (`models.io.rbms_files`). Every checkpoint must be the same model (class, layer sizes:
unit types and architecture), which `raise_eval.paths.trajectory.check_trajectory` checks after loading.

`TrajectoryInputSettings` declares the trajectory command's inputs: the folder, and the data options of an
evaluation, which are `InputSettings`' own declarations (declared once, there).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from torch import Tensor

from raise_eval.io.inputs import InputSettings, input_files, load_evaluation_inputs
from raise_eval.models.io.files import describe, why_unusable
from raise_eval.models.io.rbms_files import is_hdf5_name, rbms_updates
from raise_eval.settings import SettingsError, declarations, setting, settings_class

MANIFEST = "trajectory.json"
MANIFEST_FORMAT = "raise-eval trajectory 1"
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".npz", ".mat")
_NUMBER = re.compile(r"(\d+)")


@dataclass(frozen=True)
class TrajectoryFile:
    """One checkpoint of a run: its file and training step, and the update it is in an rbms run's file (else None)."""

    path: Path
    step: int
    update: Optional[int] = None

    @property
    def name(self) -> str:
        """The file's name, or the update's group for one of an rbms run's updates."""
        return self.path.name if self.update is None else f"update_{self.update}"


def write_manifest(folder, entries: list[tuple[str, int]], metadata: Optional[dict[str, Any]] = None) -> Path:
    """Write (atomically) the manifest of `folder`: `entries` are (file name, step) in training order; `metadata`
    (e.g. the dataset's name) is kept beside them."""
    folder = Path(folder)
    document = {
        "format": MANIFEST_FORMAT,
        "checkpoints": [{"file": str(name), "step": int(step)} for name, step in entries],
        "metadata": dict(metadata or {}),
    }
    path = folder / MANIFEST
    from raise_eval.io.writing import write_file  # whole or not at all: no '.tmp' left by a failed write

    write_file(path, json.dumps(document, indent=1) + "\n", what="the manifest", keep_on_failure=False)
    return path


def list_trajectory(folder) -> list[TrajectoryFile]:
    """The checkpoints of `folder` in training order (by its manifest, else by the step numbers in the names); of
    an rbms run's .h5 file, its updates."""
    folder = Path(folder)
    if is_hdf5_name(folder) and folder.is_file():
        return [TrajectoryFile(folder, n, update=n) for n in rbms_updates(folder)]
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise FileNotFoundError(f"{folder} {what}; give the folder of one run's checkpoints")
    manifest = folder / MANIFEST
    if os.path.lexists(manifest):  # a broken link to a manifest is refused, not read as "no manifest"
        return _from_manifest(manifest)
    candidates = sorted(p for p in folder.iterdir() if p.suffix.lower() in CHECKPOINT_SUFFIXES)
    for p in candidates:
        if p.is_symlink() and not p.is_file():  # a dangling or looping link: a checkpoint that went missing
            raise ValueError(
                f"{p} {why_unusable(p)}: a checkpoint of the run cannot be read; remove the link or point it at the "
                "checkpoint"
            )
    files = [p for p in candidates if p.is_file()]
    if not files:
        raise FileNotFoundError(
            f"{folder} holds no checkpoint ({', '.join(CHECKPOINT_SUFFIXES)} files) and no {MANIFEST}"
        )
    steps: dict[int, Path] = {}
    for p in files:
        numbers = _NUMBER.findall(p.stem)
        if not numbers:
            raise ValueError(f"{p.name} has no step number in its name; {_manifest_advice(folder)}")
        step = int(numbers[-1])
        if step in steps:
            raise ValueError(f"{steps[step].name} and {p.name} both have step {step}; {_manifest_advice(folder)}")
        steps[step] = p
    return [TrajectoryFile(steps[s], s) for s in sorted(steps)]


def thin_trajectory(entries: list[TrajectoryFile], min_step_gap: Optional[int]) -> list[TrajectoryFile]:
    """The checkpoints at least `min_step_gap` training steps apart, from the first on, and the last always (the
    one before it is dropped when closer than the gap to it); all of them when `min_step_gap` is None."""
    if min_step_gap is None or len(entries) <= 2:
        return list(entries)
    kept = [entries[0]]
    for entry in entries[1:-1]:
        if entry.step - kept[-1].step >= min_step_gap:
            kept.append(entry)
    if len(kept) > 1 and entries[-1].step - kept[-1].step < min_step_gap:
        kept.pop()
    return kept + [entries[-1]]


def checkpoints_from(entries: list[TrajectoryFile], from_step: Optional[int]) -> list[TrajectoryFile]:
    """The checkpoints saved at training step `from_step` or later (all of them when it is None); refused, naming
    the field, when none is."""
    if from_step is None:
        return list(entries)
    kept = [e for e in entries if e.step >= from_step]
    if not kept:
        raise SettingsError(
            f"{{from_step}} {from_step} is after the last checkpoint (step {entries[-1].step}, "
            f"{entries[-1].name}); give a step at or before it"
        )
    return kept


def _manifest_advice(folder: Path) -> str:
    return (
        f"name the files by their training step (e.g. step_0000500.pt) or write {folder / MANIFEST}: "
        f'{{"format": "{MANIFEST_FORMAT}", "checkpoints": [{{"file": "...", "step": 0}}, ...]}} in training order'
    )


def _from_manifest(path: Path) -> list[TrajectoryFile]:
    why = why_unusable(path)
    if why is not None:
        raise ValueError(f"{path} {why}; the manifest must be a JSON file (or remove it to order by the file names)")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(
            f"{path} is not a JSON manifest: it is not UTF-8 text ({describe(path)}); {_manifest_advice(path.parent)}"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not a readable JSON manifest: {e}") from None
    if not isinstance(document, dict) or document.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path}: not a manifest of format {MANIFEST_FORMAT!r}; {_manifest_advice(path.parent)}")
    entries = document.get("checkpoints")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: 'checkpoints' must be a non-empty list; {_manifest_advice(path.parent)}")
    out, seen = [], set()
    for i, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("file"), str)
            or not isinstance(entry.get("step"), int)
        ):
            raise ValueError(f'{path}: checkpoint {i} must be {{"file": NAME, "step": INTEGER}}, got {entry!r}')
        file = path.parent / entry["file"]
        why = why_unusable(file)
        if why == "does not exist":
            raise FileNotFoundError(f"{path}: checkpoint {i}, {file}, does not exist")
        if why is not None:
            raise ValueError(f"{path}: checkpoint {i}, {file}, {why}; list the checkpoint files of the run")
        if out and entry["step"] <= out[-1].step:
            raise ValueError(f"{path}: the steps must increase (checkpoint {i} has step {entry['step']})")
        if file in seen:
            raise ValueError(f"{path}: {entry['file']} is listed twice")
        seen.add(file)
        out.append(TrajectoryFile(file, entry["step"]))
    return out


def _declared_as_in_input_settings(name: str) -> Any:
    """A dataclass field carrying InputSettings' declaration of `name` (declared once, there)."""
    spec = next(s for s in declarations(InputSettings) if s.name == name)
    return dataclasses.field(default=spec.default, metadata={"setting": spec})


@settings_class
class TrajectoryInputSettings:
    """Where a trajectory evaluation's checkpoints and data come from, and the device and precision to compute in."""

    folder: str = setting(
        None,
        f"the folder of one run's checkpoints (.pt, .npz, .mat), read in training order: by its {MANIFEST} if it "
        "has one, else by the step number in the file names; or an rbms training run's HDF5 file (.h5), every "
        "update_N in it a checkpoint at step N",
        kind="path", metavar="DIR", flag="folder",
    )  # fmt: skip
    min_step_gap: Optional[int] = setting(
        None,
        "anneal through the checkpoints at least STEPS training steps apart (the first and the last always; one "
        "closer than STEPS to the last is dropped), not every one saved: a path through every checkpoint retraces "
        "the training's noise and its momentum changes, and is longer than the straight links between checkpoints "
        "far apart (docs/trajectory.md)",
        kind="count", least=1, none="every checkpoint", flag="--min-step-gap", metavar="STEPS", group="annealing",
    )  # fmt: skip
    from_step: Optional[int] = setting(
        None,
        "leave out the checkpoints saved before training step STEP: the path then reaches the first checkpoint at "
        "or after it from the independent start, through a temperature path of --start-steps sub-steps. For runs "
        "whose first phase changes the model faster than the chains can follow along the training path (where the "
        "ESS column falls): a DBM's folder starts with the composed pretrained stack at step 0 (--from-step 1 leaves "
        "it out), and the narrow MNIST DBM needed --from-step 1250 (docs/trajectory.md)",
        kind="count", least=0, none="the first checkpoint", flag="--from-step", metavar="STEP", group="annealing",
    )  # fmt: skip
    data: Optional[str] = _declared_as_in_input_settings("data")
    split: str = _declared_as_in_input_settings("split")
    pixel_order: str = _declared_as_in_input_settings("pixel_order")
    data_root: Optional[str] = _declared_as_in_input_settings("data_root")
    train_data: Optional[str] = _declared_as_in_input_settings("train_data")
    alphabet: Optional[str] = _declared_as_in_input_settings("alphabet")
    device: str = _declared_as_in_input_settings("device")
    dtype: str = _declared_as_in_input_settings("dtype")

    def _validate(self) -> None:
        if is_hdf5_name(self.folder) and Path(self.folder).is_file():
            pass  # an rbms run: its updates are the checkpoints
        elif not Path(self.folder).is_dir():
            what = "is not a folder" if Path(self.folder).exists() else "does not exist"
            raise SettingsError(f"{{folder}} {self.folder} {what}; give the folder of one run's checkpoints")
        if self.data is not None:
            InputSettings.check_data_request(self, self.data)  # the same checks as an evaluation's, on these fields

    def for_checkpoint(self, checkpoint: str, update: Optional[int] = None) -> InputSettings:
        """The `InputSettings` of one of the run's checkpoints (an rbms run's `update`) with these data options."""
        shared = {f.name for f in dataclasses.fields(InputSettings)}  # the data options, not the folder's own
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in shared}
        return InputSettings(checkpoint=checkpoint, update=update, **values)


@dataclass
class TrajectoryInputs:
    """What `load_trajectory_inputs` read: the models in training order (on the device, in the dtype), their steps
    and file names, the test vectors (N, n_visible), the base rates (None for a uniform start), the labels the
    report shows and the files read."""

    models: list
    steps: list[int]
    names: list[str]
    test: Tensor
    train_pixel_means: Optional[Tensor]
    labels: dict[str, Any]
    files: list[tuple[str, Optional[str]]] = field(default_factory=list)


def load_trajectory_inputs(inputs: TrajectoryInputSettings, init: str) -> TrajectoryInputs:
    """Read every checkpoint of the folder in order, check that they are one model's trajectory, and read the test
    data and the base rates as an evaluation of the last checkpoint would (its metadata names the dataset)."""
    from raise_eval.io.inputs import load_model
    from raise_eval.paths.trajectory import check_trajectory

    saved = list_trajectory(inputs.folder)
    entries = thin_trajectory(checkpoints_from(saved, inputs.from_step), inputs.min_step_gap)
    loaded = [load_model(inputs.for_checkpoint(str(e.path), e.update)) for e in entries]
    models = [c.model for c in loaded]
    try:
        check_trajectory(models, names=[e.name for e in entries])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{inputs.folder}: {e}") from None
    last = inputs.for_checkpoint(str(entries[-1].path), entries[-1].update)
    if models[-1].family == "fully-visible" and init == "base-rates" and not last.train_data:
        # evaluate would start from uniform fields with a note; a trajectory's start is refused, as a layered one's
        raise SettingsError(
            "{init} base-rates fits the start to the training data's site frequencies: pass {train_data} FILE (or "
            "{init} uniform)",
            ("train_data", "init"),
        )
    evaluation = load_evaluation_inputs(last, init, ckpt=loaded[-1])
    labels = dict(evaluation.labels)
    labels.pop("checkpoint", None)
    labels["folder"] = str(inputs.folder)
    labels.pop("update", None)
    labels["checkpoints"] = [e.name for e in entries]
    if inputs.from_step is not None:
        labels["from_step"] = inputs.from_step
    if inputs.min_step_gap is not None:
        labels["min_step_gap"] = inputs.min_step_gap
    if len(entries) < len(saved):
        labels["checkpoints_saved"] = len(saved)
    files = [(f"a checkpoint of {inputs.folder}", str(p)) for p in dict.fromkeys(e.path for e in entries)]
    files += [f for f in input_files(last, loaded[-1].metadata) if f[0] != "the checkpoint"]
    if (Path(inputs.folder) / MANIFEST).exists():
        files.append(("the trajectory's manifest", str(Path(inputs.folder) / MANIFEST)))
    return TrajectoryInputs(
        models=models,
        steps=[e.step for e in entries],
        names=[e.name for e in entries],
        test=evaluation.test,
        train_pixel_means=evaluation.train_pixel_means,
        labels=labels,
        files=files,
    )
