"""Train the RBMs of the RAISE paper's Table 1 (Burda, Grosse & Salakhutdinov, 2015) and save them to checkpoints/.

Models are named as in the paper: dataset, training algorithm, hidden units.

    model          data                         algorithm  hidden  epochs  batch  learning rate
    mnistCD1-20    binarized_mnist (50,000)     CD-1       20      30      100    0.05
    mnistPCD-20    binarized_mnist              PCD-1      20      30      100    0.01
    mnistCD1-500   binarized_mnist              CD-1       500     20      100    0.05
    mnistPCD-500   binarized_mnist              PCD-1      500     20      100    0.01
    mnistCD25-500  binarized_mnist              CD-25      500     4       100    0.05
    omniPCD-1000   omniglot 28x28 (24,345)      PCD-1      1000    20      100    0.01

All: learning rate decaying linearly to a tenth of itself, momentum 0.5 -> 0.9 after 5 epochs, weight decay 1e-4,
visible biases initialized to the training pixel log-odds, seed 0 (see models/training/rbm.py). The paper's RBMs
(those of Grosse et al., 2013) were trained for far longer; these are CPU-minute versions with the same
architectures and algorithms. Epoch counts keep each run within a few minutes on two CPU cores (CD-25 costs 13
times a CD-1 epoch).

Every checkpoint holds the training configuration, the training pixel means, the wall time, and, when monitoring
is on, the sandwich history of the training-loop hook (`raise_eval.integrations.hooks.LikelihoodMonitor`): every
`--monitor-every` epochs a cheap AIS + RAISE run (and the exact value for the 20-hidden RBMs) on a fixed random
subset of the test set, logged to the console, a CSV history and a PNG of the sandwich over epochs. With
--save-trajectory DIR the run's trajectory is saved too (a checkpoint every --trajectory-every updates and a
manifest), for `raise-eval trajectory DIR`.

    python scripts/train_rbm_paper.py mnistCD1-20 [--monitor-every 5] [--epochs N] [--out-dir checkpoints]
                                      [--save-trajectory DIR --trajectory-every N]
    python scripts/train_rbm_paper.py all
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from _common import (
    add_monitor_arguments,
    add_overwrite_argument,
    add_trajectory_arguments,
    budget_minutes,
    check_outputs_first,
    dataset_inputs_first,
    load_splits,
    make_monitor,
    make_trajectory_saver,
    monitor_outputs,
    save_checkpoint_or_exit,
    train_monitored,
)
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm


@dataclass(frozen=True)
class PaperRBM:
    dataset: str
    config: RBMTrainingConfig


MODELS = {
    "mnistCD1-20": PaperRBM("binarized_mnist", RBMTrainingConfig(20, epochs=30, learning_rate=0.05, method="cd")),
    "mnistPCD-20": PaperRBM("binarized_mnist", RBMTrainingConfig(20, epochs=30, learning_rate=0.01, method="pcd")),
    "mnistCD1-500": PaperRBM("binarized_mnist", RBMTrainingConfig(500, epochs=20, learning_rate=0.05, method="cd")),
    "mnistPCD-500": PaperRBM("binarized_mnist", RBMTrainingConfig(500, epochs=20, learning_rate=0.01, method="pcd")),
    "mnistCD25-500": PaperRBM(
        "binarized_mnist", RBMTrainingConfig(500, epochs=4, learning_rate=0.05, method="cd", gibbs_steps=25)
    ),
    "omniPCD-1000": PaperRBM("omniglot", RBMTrainingConfig(1000, epochs=20, learning_rate=0.01, method="pcd")),
}


def checkpoint_name(name: str) -> str:
    return f"rbm_{name}.pt"


def train_one(name: str, args) -> None:
    spec = MODELS[name]
    config = spec.config if args.epochs is None else RBMTrainingConfig(**{**asdict(spec.config), "epochs": args.epochs})
    train, test = load_splits(spec.dataset, args.data_root, args.train_size)
    out_dir = Path(args.out_dir)
    out = out_dir / checkpoint_name(name)

    monitor = make_monitor(args, test, train.mean(0), out_dir / f"rbm_{name}", init="base-rates")

    max_seconds = None if args.max_minutes is None else 60.0 * args.max_minutes
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    trajectory = make_trajectory_saver(
        args, {"name": name, "dataset": spec.dataset, "trained_by": "scripts/train_rbm_paper.py"}, train.mean(0)
    )
    model, seconds = train_monitored(
        monitor,
        lambda callback: train_rbm(
            train,
            config,
            generator=torch.Generator().manual_seed(args.seed),
            progress=not args.no_progress,
            callback=callback,
            deadline=deadline,
            **trajectory,
        ),
    )
    metadata = {
        "name": name,
        "dataset": spec.dataset,
        "trained_by": "scripts/train_rbm_paper.py",
        "architecture": f"{model.n_visible}-{model.n_hidden}",
        "training": {
            **asdict(config),
            "seed": args.seed,
            "threads": torch.get_num_threads(),
            "max_minutes": args.max_minutes,
            "train_size": len(train),
        },
        "training_seconds": seconds,
        "torch_version": str(torch.__version__),
    }
    if monitor is not None:
        metadata["monitor_history"] = [r.to_dict() for r in monitor.history]
    if trajectory:
        saver = trajectory["snapshot"]
        metadata["trajectory"] = {"folder": str(saver.folder), "checkpoints": len(saver.entries)}
        print(
            f"{name}: saved {len(saver.entries)} checkpoints of the trajectory to {saver.folder} "
            f"({saver.seconds:.1f} s)"
        )
    save_checkpoint_or_exit(out, model, metadata=metadata, train_pixel_means=train.mean(0))
    print(f"{name}: trained in {seconds:.0f} s; wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB)", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", choices=[*MODELS, "all"], help="which RBMs to train ('all': every one)")
    parser.add_argument("--data-root", default=None, help="folder holding binarized_mnist/ and omniglot/")
    parser.add_argument("--epochs", type=int, default=None, help="override the table's epoch count")
    parser.add_argument("--train-size", type=int, default=None, help="use the first N training vectors only")
    parser.add_argument("--max-minutes", type=budget_minutes, default=None, help="wall-clock budget per model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out-dir", default="checkpoints")
    parser.add_argument("--no-progress", action="store_true")
    add_overwrite_argument(parser, "the checkpoints, and the monitor's CSV and PNG beside them")
    add_monitor_arguments(parser)
    add_trajectory_arguments(parser)
    args = parser.parse_args(argv)
    if args.save_trajectory is not None and (len(args.models) > 1 or "all" in args.models):
        parser.error("--save-trajectory saves one run: name one model")
    names = list(dict.fromkeys(MODELS if "all" in args.models else args.models))
    # Before any model is trained: every model's outputs, and the data they all read.
    inputs = dataset_inputs_first(parser, [MODELS[name].dataset for name in names], args.data_root)
    outputs = []
    for name in names:
        out = Path(args.out_dir) / checkpoint_name(name)
        outputs += [("--out-dir", out)] + monitor_outputs(args, Path(args.out_dir) / f"rbm_{name}")
    check_outputs_first(parser, outputs, inputs, args.overwrite)
    torch.set_num_threads(args.threads)
    for name in names:
        train_one(name, args)


if __name__ == "__main__":
    main()
