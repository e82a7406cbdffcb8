"""What the training scripts share: the dataset choice and the training-loop hook's options.

The scripts run as `python scripts/NAME.py`, which puts this folder on sys.path, so they import this module as
`_common`.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from raise_eval.io.datasets import DATA_ROOT_ENV, load_dataset

# Short names in checkpoint file names.
SHORT_NAMES = {"binarized_mnist": "mnist", "omniglot": "omniglot"}


def add_dataset_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        choices=list(SHORT_NAMES),
        default="binarized_mnist",
        help="training data: Larochelle & Murray's binarized MNIST or the 28x28 Omniglot built from the data root "
        "(raise_eval.io.datasets documents how)",
    )
    parser.add_argument("--data-root", default=None, help="folder holding binarized_mnist/ and omniglot/")


def _number_type(accepts, wanted: str, doc: str):
    """An argparse type: float(text), refused with "must be {wanted}" unless `accepts` it (NaN for non-numbers)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    parse.__doc__ = doc
    return parse


budget_minutes = _number_type(
    lambda m: m >= 0 and math.isfinite(m), "a finite number of minutes, 0 or more",
    "argparse type of --max-minutes: a finite number of minutes, 0 or more (0: one epoch of each model).",
)  # fmt: skip
budget_fraction = _number_type(
    lambda f: 0.0 <= f <= 1.0, "a number between 0 and 1",
    "argparse type of a share of the wall-clock budget: a number between 0 and 1.",
)  # fmt: skip
positive_float = _number_type(
    lambda x: math.isfinite(x) and x > 0, "a finite number above 0",
    "argparse type of a rate or size that must be a finite number above 0.",
)  # fmt: skip
offset_rate = _number_type(
    lambda r: 0.0 < r <= 1.0, "a number above 0 and at most 1",
    "argparse type of --offset-rate: a moving-average rate in (0, 1].",
)  # fmt: skip


def positive_int(text: str) -> int:
    """argparse type of a count that must be at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def add_overwrite_argument(
    parser: argparse.ArgumentParser, what: str = "the checkpoint, and the monitor's CSV and PNG beside it"
) -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace existing output files ({what}); without it the script refuses them before any work",
    )


def check_outputs_first(parser: argparse.ArgumentParser, outputs, inputs=(), overwrite: bool = False) -> None:
    """Before any data is read or anything trained: each output (option, path) must be writable (its folder is
    created), must not be an input of the run ((what, path) pairs, e.g. the data files) and must not exist unless
    `overwrite` (`raise_eval.io.outputs.check_outputs`, the "protected" kind); else the parser's one-line error."""
    from raise_eval.io.outputs import Output, OutputError, check_outputs

    for option, path in outputs:
        if not str(path).strip():
            parser.error(f"{option} is empty; name a file (nothing was computed)")
        folder = Path(path).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            parser.error(f"{option} {path}: {folder} is a file, or lies under one, not a folder (nothing was computed)")
        except OSError as e:
            why = e.strerror or e
            parser.error(f"{option} {path}: cannot create the folder {folder} ({why}) (nothing was computed)")
    try:
        check_outputs([Output(option, path, "protected") for option, path in outputs], inputs, overwrite=overwrite)
    except OutputError as e:
        parser.error(str(e))


def check_inputs_first(parser: argparse.ArgumentParser, inputs) -> None:
    """Before any work: each (what, path) a script reads must be a file (the parser's one-line error otherwise, which
    names the data root's option)."""
    for what, path in inputs:
        path = Path(path)
        if not path.is_file():
            why = "is a folder, not a file" if path.is_dir() else "does not exist"
            parser.error(
                f"{what} {path} {why}: give the data root that holds it (--data-root or ${DATA_ROOT_ENV}) "
                "(nothing was computed)"
            )


def resolve_data_root_first(parser: argparse.ArgumentParser, data_root) -> Path:
    """The data root (`raise_eval.io.datasets.resolve_data_root`), or the parser's one-line error when there is
    none (nothing was read or written yet)."""
    from raise_eval.io.datasets import resolve_data_root

    try:
        return resolve_data_root(data_root)
    except (OSError, ValueError) as e:
        parser.error(f"{e} (nothing was computed)")


def dataset_inputs_first(parser: argparse.ArgumentParser, datasets, data_root) -> list[tuple[str, Path]]:
    """The files the named datasets' splits are read from (`data_inputs`), after refusing a missing data root or a
    missing file with the parser's one-line error."""
    if any(name != "digits" for name in datasets):
        resolve_data_root_first(parser, data_root)
    inputs = [pair for name in dict.fromkeys(datasets) for pair in data_inputs(name, data_root)]
    check_inputs_first(parser, inputs)
    return inputs


def write_output(path, content, what: str = "the result", keep_on_failure: bool = True) -> bool:
    """`content` (text, bytes, or a function that writes a file at the path it is given) written to `path` whole or
    not at all (`raise_eval.io.writing.write_file`); a failed write (a full disk, ...) ends the script with its one
    line, the file at `path` left as it was (and the content kept in the temporary folder when `keep_on_failure`).
    Returns False when `path` is the null device (nothing written)."""
    from raise_eval.io.outputs import OutputError, OutputWriteError
    from raise_eval.io.writing import write_file

    try:
        written = write_file(path, content, what=what, keep_on_failure=keep_on_failure)
    except (OutputError, OutputWriteError) as e:
        raise SystemExit(f"error: {e}") from None
    return written is not None


def save_checkpoint_or_exit(path, model, **kwargs) -> None:
    """raise_eval.save_checkpoint (which writes whole or not at all, and keeps the checkpoint in the temporary folder
    when it cannot write it); a failed write ends the script with its one line instead of a traceback."""
    from raise_eval import save_checkpoint
    from raise_eval.io.outputs import OutputError, OutputWriteError

    try:
        save_checkpoint(path, model, **kwargs)
    except (OutputError, OutputWriteError) as e:
        raise SystemExit(f"error: {e}") from None


def data_inputs(dataset: str, data_root) -> list[tuple[str, Path]]:
    """The files a training script reads (both splits), as `check_outputs_first`'s inputs."""
    from raise_eval.io.datasets import dataset_files

    try:
        files = dataset_files(dataset, "train", data_root) + dataset_files(dataset, "test", data_root)
    except ValueError:
        return []
    return [(f"a {dataset} data file", path) for path in files]


def monitor_outputs(args, stem: Path) -> list[tuple[str, Path]]:
    """The monitor's CSV history and PNG beside the checkpoint (none when monitoring is off)."""
    if args.monitor_every <= 0:
        return []
    return [("--monitor-every (its CSV history)", Path(f"{stem}_sandwich.csv")),
            ("--monitor-every (its plot)", Path(f"{stem}_sandwich.png"))]  # fmt: skip


def add_monitor_arguments(parser: argparse.ArgumentParser, default_steps: int = 200) -> None:
    group = parser.add_argument_group(
        "monitoring",
        "the training-loop hook raise_eval.integrations.hooks.LikelihoodMonitor: every N epochs a cheap AIS + RAISE run (and the "
        "exact value when tractable) on a fixed random subset of the test set, printed, written to a CSV history "
        "and drawn as a PNG beside the checkpoint (0 turns it off)",
    )
    group.add_argument("--monitor-every", type=int, default=0, help="epochs between sandwich estimates (0: off)")
    group.add_argument("--monitor-steps", type=positive_int, default=default_steps, help="K of each monitoring run")
    group.add_argument("--monitor-ais-chains", type=positive_int, default=100)
    group.add_argument("--monitor-raise-examples", type=positive_int, default=20)
    group.add_argument("--monitor-raise-chains", type=positive_int, default=5)
    group.add_argument(
        "--monitor-exact",
        choices=["auto", "never"],
        default="auto",
        help="exact values by enumeration when tractable (auto: up to 2^25 states, seconds per check) or never",
    )
    group.add_argument(
        "--monitor-test-size", type=positive_int, default=1000, help="test vectors the estimates average over"
    )


def add_trajectory_arguments(parser: argparse.ArgumentParser, what: str = "training") -> None:
    group = parser.add_argument_group(
        "trajectory",
        f"save the {what}'s trajectory, a checkpoint every N parameter updates (and the first and last), to a folder "
        "that `raise-eval trajectory DIR` reads: log Z and the test log-likelihood sandwich at every checkpoint "
        "from one annealing pass along the training run",
    )
    group.add_argument("--save-trajectory", metavar="DIR", default=None, help="folder for the checkpoints (created)")
    group.add_argument("--trajectory-every", metavar="N", type=int, default=100, help="updates between checkpoints")


class TrajectorySaver:
    """The training loop's `snapshot(updates, model)`: writes DIR/step_<updates>.pt (with `metadata` and the step)
    and rewrites DIR/trajectory.json, the manifest `raise-eval trajectory` reads the run's order from."""

    def __init__(self, folder, metadata: dict, train_pixel_means: Optional[torch.Tensor]) -> None:
        from raise_eval.io.trajectory_files import MANIFEST

        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SystemExit(f"error: --save-trajectory {folder}: cannot create the folder ({e.strerror or e})") from None
        stale = sorted(self.folder.glob("step_*.pt")) + [p for p in [self.folder / MANIFEST] if p.exists()]
        if stale:
            raise SystemExit(f"{self.folder} already holds a trajectory ({stale[0].name}, ...): choose an empty folder")
        self.metadata = dict(metadata)
        self.train_pixel_means = train_pixel_means
        self.entries: list[tuple[str, int]] = []
        self.seconds = 0.0

    def __call__(self, updates: int, model) -> None:
        from raise_eval import save_checkpoint
        from raise_eval.io.trajectory_files import write_manifest

        start = time.perf_counter()
        name = f"step_{updates:07d}.pt"
        save_checkpoint(self.folder / name, model, {**self.metadata, "step": updates}, self.train_pixel_means)
        self.entries.append((name, updates))
        write_manifest(self.folder, self.entries, self.metadata)
        self.seconds += time.perf_counter() - start


def make_trajectory_saver(args, metadata: dict, train_pixel_means: Optional[torch.Tensor]) -> dict:
    """The training function's keywords (snapshot, snapshot_every) for --save-trajectory, or none without it."""
    if args.save_trajectory is None:
        return {}
    if args.trajectory_every < 1:
        raise SystemExit(f"--trajectory-every must be a positive number of updates, got {args.trajectory_every}")
    saver = TrajectorySaver(args.save_trajectory, metadata, train_pixel_means)
    return {"snapshot": saver, "snapshot_every": args.trajectory_every}


def make_monitor(args, test: torch.Tensor, train_means: Optional[torch.Tensor], stem: Path, init: str):
    """A LikelihoodMonitor configured from the monitoring options, or None when they turn it off.

    `stem` is the path without extension of the CSV history and the PNG; `init` the annealing start
    ('base-rates' with `train_means`, or 'uniform').
    """
    if args.monitor_every <= 0:
        return None
    from raise_eval.integrations.hooks import LikelihoodMonitor

    # A fixed random subset of the test set keeps each check cheap and comparable across epochs.
    order = torch.randperm(len(test), generator=torch.Generator().manual_seed(0))
    subset = test[order[: args.monitor_test_size]]

    def log_to_console(metrics: dict, step: int) -> None:
        print(
            f"  [monitor] epoch {step} (from 0): " + ", ".join(f"{k} {v:.2f}" for k, v in metrics.items()), flush=True
        )

    return LikelihoodMonitor(
        subset,
        every=args.monitor_every,
        init=init,
        train_pixel_means=train_means,
        steps=args.monitor_steps,
        ais_chains=args.monitor_ais_chains,
        raise_examples=args.monitor_raise_examples,
        raise_chains=args.monitor_raise_chains,
        seed=0,
        exact=args.monitor_exact,
        logger=log_to_console,
        history_path=f"{stem}_sandwich.csv",
        plot_path=f"{stem}_sandwich.png",
    )


class MonitorCallback:
    """The training loop's epoch callback: the monitor on its schedule, and `finish` after training, which evaluates
    the final model unless its epoch was just recorded (also when a time budget stopped training early)."""

    def __init__(self, monitor) -> None:
        self.monitor = monitor
        self.last_epoch = -1

    def __call__(self, epoch: int, model) -> None:
        self.last_epoch = epoch
        self.monitor(epoch, model)

    def finish(self, model) -> None:
        if self.last_epoch >= 0:
            self.monitor.final(self.last_epoch, model)


def load_splits(dataset: str, data_root, train_size: Optional[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, test) of a named dataset, the training set cut to its first `train_size` vectors; prints the sizes."""
    start = time.perf_counter()
    try:
        train = load_dataset(dataset, "train", data_root)
        test = load_dataset(dataset, "test", data_root)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise SystemExit(f"error: cannot load {dataset}: {e}") from None
    if train_size is not None:
        train = train[:train_size]
    seconds = time.perf_counter() - start
    print(f"{dataset}: train {tuple(train.shape)}, test {tuple(test.shape)} ({seconds:.1f} s to load)", flush=True)
    return train, test


def train_monitored(monitor, train: Callable[[Optional[MonitorCallback]], object]) -> tuple[object, float]:
    """Run `train(callback)` with the monitor's epoch callback (None without a monitor), then evaluate the returned
    model unless its epoch was just recorded (also when a budget cut training short). Returns (model, seconds of
    training, the final evaluation excluded)."""
    callback = None if monitor is None else MonitorCallback(monitor)
    start = time.perf_counter()
    model = train(callback)
    seconds = time.perf_counter() - start
    if callback is not None:
        callback.finish(model)
    return model, seconds
