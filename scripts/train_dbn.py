"""Train a DBN greedily, one RBM per layer, on binarized MNIST (Larochelle & Murray's binarization) or on the
28x28 Omniglot, and save it.

Default architectures are the DBNs of the RAISE paper (Burda, Grosse & Salakhutdinov, 2015): 784-500-2000 on MNIST,
784-1000-1000 on Omniglot. Each RBM is
trained with `raise_eval.models.training.rbm.train_rbm` (PCD-1 by default, `--method cd` for CD-1); the recognition
probabilities of one RBM's hidden units are the next RBM's data (see models/training/dbn.py for how the RBMs become
the DBN). Defaults: 20 epochs per layer, batch 100, learning rate 0.01 decaying linearly to 0.001, momentum
0.5 -> 0.9, weight decay 1e-4, seed 0, two threads: 454 s on the project's 2-core machine. (With CD-1, 30 epochs
and learning rate 0.05 the top RBM became a poor prior: about -290 nats against about -108 with these settings.)

    python scripts/train_dbn.py [--dataset omniglot] [--hidden 500 2000] [--epochs 20] [--max-minutes M]
                                [--monitor-every 2] [--out PATH] [--overwrite]

The output paths are checked before any data is read: an existing file (the committed checkpoints included) is
replaced only with --overwrite, and a data file never.

With --monitor-every N, the training-loop hook estimates the DBN's test log-likelihood (AIS and RAISE from the
uniform start) every N epochs of the top RBM, on the finished lower layers and the top RBM as it stands. The
checkpoint holds the training configuration, per-layer statistics, the wall time and the training set's
pixel means. With --max-minutes, training stops cleanly when the budget is spent (it is split between the layers in
proportion to their epochs' costs, timed on a few minibatches before training) and the metadata and the output say so.
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
    budget_minutes,
    check_outputs_first,
    data_inputs,
    load_splits,
    make_monitor,
    monitor_outputs,
    positive_float,
    positive_int,
    train_monitored,
)
from raise_eval.models.training.dbn import DBNTrainingConfig, reconstruction_error, train_dbn

from raise_eval import RBM, save_checkpoint


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_argument(parser)
    parser.add_argument(
        "--hidden",
        type=positive_int,
        nargs="+",
        default=None,
        help="hidden layer sizes (>= 2; default 500 2000 on MNIST, 1000 1000 on Omniglot)",
    )
    parser.add_argument("--epochs", type=positive_int, default=20, help="training epochs of each layer's RBM")
    parser.add_argument("--batch-size", type=positive_int, default=100)
    parser.add_argument("--learning-rate", type=positive_float, default=0.01)
    parser.add_argument("--method", choices=["cd", "pcd"], default="pcd")
    parser.add_argument("--gibbs-steps", type=positive_int, default=1)
    parser.add_argument("--max-minutes", type=budget_minutes, default=None, help="wall-clock budget for training")
    parser.add_argument("--train-size", type=positive_int, default=None, help="use the first N training vectors only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, choices=[1, 2], help="torch CPU threads")
    parser.add_argument("--out", default=None, help="default checkpoints/dbn_{mnist,omniglot}_SIZES.pt")
    parser.add_argument("--no-progress", action="store_true")
    add_overwrite_argument(parser)
    add_monitor_arguments(parser)
    args = parser.parse_args(argv)
    if args.hidden is None:
        args.hidden = [500, 2000] if args.dataset == "binarized_mnist" else [1000, 1000]
    if len(args.hidden) < 2:
        parser.error(f"--hidden: a DBN has at least two hidden layers, got {len(args.hidden)}")
    if args.out is None:
        args.out = f"checkpoints/dbn_{SHORT_NAMES[args.dataset]}_{'-'.join(str(n) for n in args.hidden)}.pt"
    outputs = [("--out", args.out)] + monitor_outputs(args, Path(args.out).with_suffix(""))
    check_outputs_first(parser, outputs, data_inputs(args.dataset, args.data_root), args.overwrite)
    torch.set_num_threads(args.threads)

    wall_start = time.perf_counter()
    train, test = load_splits(args.dataset, args.data_root, args.train_size)
    # The hook anneals from the uniform start, as the paper does for DBNs (it has no base-rate start for them).
    monitor = make_monitor(args, test, None, Path(args.out).with_suffix(""), init="uniform")
    config = DBNTrainingConfig(
        hidden=list(args.hidden),
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        method=args.method,
        gibbs_steps=args.gibbs_steps,
    )
    report: dict = {}
    max_seconds = None if args.max_minutes is None else 60.0 * args.max_minutes
    model, seconds = train_monitored(
        monitor,
        lambda callback: train_dbn(
            train,
            config,
            generator=torch.Generator().manual_seed(args.seed),
            progress=not args.no_progress,
            max_seconds=max_seconds,
            report=report,
            callback=callback,
        ),
    )
    for layer in report["layers"]:
        cut = " (stopped by its share of the wall-clock budget)" if layer["stopped_by_budget"] else ""
        print(
            f"layer {layer['layer']} RBM {layer['sizes'][0]}-{layer['sizes'][1]}: {layer['epochs_completed']}/"
            f"{layer['epochs_planned']} epochs in {layer['seconds']:.0f} s{cut}; reconstruction error (MSE per unit, "
            f"first 1000 vectors of its data) {layer['reconstruction_error'][-1]:.5f}"
        )
    if report["budget_exhausted"]:
        # The budget is split between the layers before any is trained, by their timed epochs' costs, and a layer
        # stops when its next epoch would overrun its share: the whole run can end well inside the budget.
        cut = [str(r["layer"]) for r in report["layers"] if r["stopped_by_budget"]]
        which = f"layer {cut[0]} before its"
        if len(cut) > 1:
            which = f"layers {', '.join(cut[:-1])} and {cut[-1]} before their"
        print(
            f"the budget of {args.max_minutes:g} minutes (split between the layers by their timed epochs) stopped "
            f"{which} planned epochs; the whole run took {report['seconds'] / 60:.1f} minutes"
        )
    # The bottom RBM as trained (its hidden biases are the DBN's recognition biases of layer 1).
    v_error = reconstruction_error(RBM(model.weights[0], model.biases[0], model.recognition_biases[0]), train[:1000])
    metadata = {
        "dataset": args.dataset,
        "trained_by": "scripts/train_dbn.py",
        "architecture": "-".join(str(n) for n in model.layer_sizes),
        "training": {
            **asdict(config),
            "seed": args.seed,
            "threads": args.threads,
            "max_minutes": args.max_minutes,
            "train_size": len(train),
        },
        "training_seconds": seconds,
        "budget_exhausted": report["budget_exhausted"],
        "training_report": report,
        "train_reconstruction_error": v_error,
        "torch_version": str(torch.__version__),
    }
    if monitor is not None:
        metadata["monitor_history"] = [r.to_dict() for r in monitor.history]
    save_checkpoint(args.out, model, metadata=metadata, train_pixel_means=train.mean(0))
    print(
        f"trained in {seconds:.0f} s (wall time with data loading {time.perf_counter() - wall_start:.0f} s); "
        f"layer-1 reconstruction error on 1000 training vectors {v_error:.5f}"
    )
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
