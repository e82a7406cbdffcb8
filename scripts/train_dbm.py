"""Train a DBM on binarized MNIST (Larochelle & Murray's binarization) or on the 28x28 Omniglot and save it.

Default architectures are the DBMs of the RAISE paper: 784-500-1000 on MNIST (that of Salakhutdinov & Hinton,
2009), 784-1000-1000 on Omniglot. Greedy
pretraining with doubled-input RBMs, composition, then joint training with a mean-field positive phase and
persistent Gibbs chains (models/training/dbm.py documents each step). Defaults: pretraining 20 epochs per RBM
(CD-1, learning rate 0.05 -> 0.005); joint training 16 epochs, batch 100, 100 persistent chains with 5 Gibbs
sweeps per update, 10 mean-field sweeps, learning rate 0.002 -> 0.0002, momentum 0.5 -> 0.9 (after 5 epochs),
weight decay 2e-4; seed 0, one thread (750 s on one shared core for MNIST). A learning rate of 0.01 trained well
at momentum 0.5 but broke down at the switch to 0.9 (the reconstruction error doubled). Salakhutdinov & Hinton
pretrain for 100 epochs per RBM and train jointly for 300 epochs (learning rate 0.001, momentum 0.9); this much
shorter schedule gives a usable but weaker model.

    python scripts/train_dbm.py [--recipe certifiable] [--dataset omniglot] [--hidden 500 1000] [--centering]
                                [--chains 100] [--pretrain-epochs 20] [--epochs 16] [--max-minutes M]
                                [--monitor-every 4] [--out PATH] [--save-trajectory DIR --trajectory-every N]

Recipes (an option given explicitly overrides its recipe's value):
  paper        the architecture above, 100 persistent chains, plain parameters (the default).
  certifiable  784-100-100 on MNIST, joint training in the centered parametrization (--centering, Montavon &
               Mueller 2012) with 300 persistent chains: a DBM whose sandwich a certified run closes on a CPU
               (checkpoints/dbm_mnist_100-100_centered.pt, trained in 227 s on one core: `raise-eval evaluate ... --data
               binarized_mnist --until-gap 1 --steps 1000` closed within 1 nat at K = 8,000 in 601 s).
               The paper's 784-500-1000 trained this briefly defeats AIS (its log Z lands below the test set's
               own mass). What made the difference was the size and the chains, not centering: the same
               784-100-100 with 300 chains and plain parameters closed too (K = 4,000, on 1,000 test vectors),
               while 784-20-500 DBMs, centered or not, with 100 or 1,000 chains, stay open (their peaked first
               hidden layer leaves AIS an ESS of 8 to 44 of 1,000 chains at K = 2,000). Centering stays in the
               recipe as a better-conditioned gradient at no cost; its effect on certifiability was not isolated.

With --monitor-every N, the training-loop hook estimates the test log-likelihood (AIS and RAISE from the data base
rates, log f(v) by importance sampling) every N joint epochs. With --save-trajectory DIR the joint training's
trajectory is saved (the composed pretrained DBM, a checkpoint every --trajectory-every updates, the last one, and a
manifest) for `raise-eval trajectory DIR`.

The checkpoint holds the training configuration, the training statistics (reconstruction error and mean-field
bound per joint epoch), the wall time and the training set's pixel means. With --max-minutes, training stops
cleanly when the budget is spent (pretraining may use --pretrain-budget-fraction of it) and the metadata and the
output say so.
"""

import argparse
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from _common import (
    SHORT_NAMES,
    add_dataset_argument,
    add_monitor_arguments,
    add_overwrite_argument,
    add_trajectory_arguments,
    budget_fraction,
    budget_minutes,
    check_outputs_first,
    data_inputs,
    load_splits,
    make_monitor,
    make_trajectory_saver,
    monitor_outputs,
    offset_rate,
    positive_float,
    positive_int,
    train_monitored,
)
from raise_eval.models.training.dbm import DBMTrainingConfig, mean_field_fixed, train_dbm

from raise_eval import save_checkpoint


RECIPES = {
    "paper": {"hidden": {"binarized_mnist": [500, 1000], "omniglot": [1000, 1000]}, "chains": 100, "centering": False},
    "certifiable": {"hidden": {"binarized_mnist": [100, 100]}, "chains": 300, "centering": True},
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_argument(parser)
    parser.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="paper",
        help="a set of defaults (see above); options given explicitly override it",
    )
    parser.add_argument(
        "--hidden",
        type=positive_int,
        nargs="+",
        default=None,
        help="hidden layer sizes (>= 2; default: the recipe's, 500 1000 on MNIST and 1000 1000 on Omniglot for paper, "
        "100 100 for certifiable)",
    )
    parser.add_argument("--pretrain-epochs", type=positive_int, default=20, help="epochs of each pretraining RBM")
    parser.add_argument("--epochs", type=positive_int, default=16, help="joint training epochs")
    parser.add_argument("--pretrain-learning-rate", type=positive_float, default=0.05)
    parser.add_argument("--learning-rate", type=positive_float, default=0.002, help="joint training learning rate")
    parser.add_argument("--batch-size", type=positive_int, default=100)
    parser.add_argument("--chains", type=positive_int, default=None, help="persistent chains (default: the recipe's)")
    parser.add_argument("--gibbs-steps", type=positive_int, default=5, help="Gibbs sweeps of the chains per update")
    parser.add_argument("--mean-field-iterations", type=positive_int, default=10)
    parser.add_argument(
        "--centering",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="joint training in the centered parametrization (Montavon & Mueller 2012): a better-conditioned "
        "gradient; the saved model is a plain DBM (default: the recipe's)",
    )
    parser.add_argument(
        "--offset-rate", type=offset_rate, default=0.01, help="with --centering: moving-average rate of the offsets"
    )
    parser.add_argument("--max-minutes", type=budget_minutes, default=None, help="wall-clock budget for training")
    parser.add_argument(
        "--pretrain-budget-fraction",
        type=budget_fraction,
        default=0.2,
        help="share of --max-minutes that greedy pretraining may use, 0 to 1 (default 0.2)",
    )
    parser.add_argument("--train-size", type=positive_int, default=None, help="use the first N training vectors only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, choices=[1, 2], help="torch CPU threads")
    parser.add_argument("--out", default=None, help="default checkpoints/dbm_{mnist,omniglot}_SIZES.pt")
    parser.add_argument("--no-progress", action="store_true")
    add_overwrite_argument(parser)
    add_monitor_arguments(parser, default_steps=100)
    add_trajectory_arguments(parser, what="joint training")
    args = parser.parse_args(argv)
    recipe = RECIPES[args.recipe]
    for name in ("chains", "centering"):
        if getattr(args, name) is None:
            setattr(args, name, recipe[name])
    if args.hidden is None:
        args.hidden = recipe["hidden"].get(args.dataset, recipe["hidden"]["binarized_mnist"])
    if args.out is None and args.centering:
        args.out = f"checkpoints/dbm_{SHORT_NAMES[args.dataset]}_{'-'.join(str(n) for n in args.hidden)}_centered.pt"
    if args.out is None:
        args.out = f"checkpoints/dbm_{SHORT_NAMES[args.dataset]}_{'-'.join(str(n) for n in args.hidden)}.pt"
    if len(args.hidden) < 2:
        parser.error(f"--hidden: a DBM here has at least two hidden layers, got {len(args.hidden)}")
    outputs = [("--out", args.out)] + monitor_outputs(args, Path(args.out).with_suffix(""))
    check_outputs_first(parser, outputs, data_inputs(args.dataset, args.data_root), args.overwrite)
    trajectory_folder = args.save_trajectory and Path(args.save_trajectory)
    if trajectory_folder and trajectory_folder.exists() and not trajectory_folder.is_dir():
        parser.error(f"--save-trajectory {args.save_trajectory} is a file; name a folder (nothing was trained)")
    torch.set_num_threads(args.threads)

    wall_start = time.perf_counter()
    train, test = load_splits(args.dataset, args.data_root, args.train_size)
    monitor = make_monitor(args, test, train.mean(0), Path(args.out).with_suffix(""), init="base-rates")
    config = DBMTrainingConfig(
        hidden=list(args.hidden),
        pretrain_epochs=args.pretrain_epochs,
        pretrain_batch_size=args.batch_size,
        pretrain_learning_rate=args.pretrain_learning_rate,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        num_chains=args.chains,
        gibbs_steps=args.gibbs_steps,
        mean_field_iterations=args.mean_field_iterations,
        pretrain_budget_fraction=args.pretrain_budget_fraction,
        centering=args.centering,
        offset_rate=args.offset_rate,
    )
    report: dict = {}
    max_seconds = None if args.max_minutes is None else 60.0 * args.max_minutes
    trajectory = make_trajectory_saver(
        args, {"dataset": args.dataset, "trained_by": "scripts/train_dbm.py", "phase": "joint training"}, train.mean(0)
    )
    model, seconds = train_monitored(
        monitor,
        lambda callback: train_dbm(
            train,
            config,
            generator=torch.Generator().manual_seed(args.seed),
            progress=not args.no_progress,
            max_seconds=max_seconds,
            report=report,
            callback=callback,
            **trajectory,
        ),
    )
    for layer in report["pretraining"]["layers"]:
        cut = " (stopped by the wall-clock budget)" if layer["stopped_by_budget"] else ""
        print(
            f"pretraining RBM {layer['layer']} {layer['sizes'][0]}-{layer['sizes'][1]} (up x{layer['up']:g}, down "
            f"x{layer['down']:g}): {layer['epochs_completed']:.2f}/{layer['epochs_planned']} epochs in "
            f"{layer['seconds']:.0f} s{cut}; reconstruction error {layer['reconstruction_error'][-1]:.5f}"
        )
    joint = report["joint"]
    if joint:
        cut = " (stopped by the wall-clock budget)" if joint["stopped_by_budget"] else ""
        print(
            f"joint training: {joint['epochs_completed']:.2f}/{joint['epochs_planned']} epochs in "
            f"{joint['seconds']:.0f} s{cut}; reconstruction error {joint['reconstruction_error'][-1]:.5f}, "
            f"mean-field bound on log f(v) (first 200 vectors) {joint['mean_field_bound'][-1]:.2f}"
        )
    if report["budget_exhausted"]:
        print(f"training stopped at the wall-clock budget of {args.max_minutes:g} minutes")

    sample = train[:1000]
    bound = model.mean_field_bound(sample).mean().item()
    mu = mean_field_fixed(model, sample, config.mean_field_iterations)
    recon = float((model.layer_probs(mu, 0) - sample).pow(2).mean())
    metadata = {
        "dataset": args.dataset,
        "trained_by": "scripts/train_dbm.py",
        "architecture": "-".join(str(n) for n in model.layer_sizes),
        "training": {
            "recipe": args.recipe,
            **asdict(config),
            "seed": args.seed,
            "threads": args.threads,
            "max_minutes": args.max_minutes,
            "train_size": len(train),
        },
        "training_seconds": seconds,
        "budget_exhausted": report["budget_exhausted"],
        "training_report": report,
        "train_mean_field_bound_first_1000": bound,
        "train_reconstruction_error_first_1000": recon,
        "torch_version": str(torch.__version__),
    }
    if monitor is not None:
        metadata["monitor_history"] = [r.to_dict() for r in monitor.history]
    if trajectory:
        saver = trajectory["snapshot"]
        metadata["trajectory"] = {"folder": str(saver.folder), "checkpoints": len(saver.entries)}
        print(f"saved {len(saver.entries)} checkpoints of the joint training to {saver.folder} ({saver.seconds:.1f} s)")
    save_checkpoint(args.out, model, metadata=metadata, train_pixel_means=train.mean(0))
    print(
        f"trained in {seconds:.0f} s (wall time with data loading {time.perf_counter() - wall_start:.0f} s); first "
        f"1000 training vectors: mean-field bound on log f(v) {bound:.2f} (unnormalized), reconstruction error "
        f"{recon:.5f}"
    )
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
