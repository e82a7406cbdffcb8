"""Train the committed RBMs of typed layers, each on real data within a few CPU minutes, with 20 hidden units so that
the exact log-likelihood is tractable (2^20 hidden states) next to AIS and RAISE:

- gaussian: a 784-20 Gaussian-Bernoulli RBM on dequantized MNIST pixels in [0, 1] (scripts/unit_data.py), each
  pixel's standard deviation fixed to its standard deviation in the training data, at least 0.1;
- potts: a 53x21-20 Potts-Bernoulli RBM on the deduplicated Pfam PF00014 family (90% train split);
- spin: a 784-20 spin-spin RBM on Larochelle's binarized MNIST read as spins (0 -> -1).

PCD-1 (CD-5 for the Potts model), Adam, batch 100, learning rate decaying linearly to a tenth, weight decay 1e-4,
seed 0; one thread. The checkpoint (.pt) keeps the training configuration, the visible layer's training statistics
(the data base rates of `--init base-rates`) and the exact test log-likelihood.

    python scripts/train_units.py gaussian [--out checkpoints/grbm_mnist_784-20.pt]
    python scripts/train_units.py potts
    python scripts/train_units.py spin
    python scripts/train_units.py potts --out runs/potts.pt --save-trajectory runs/potts_traj --trajectory-every 250

--save-trajectory DIR saves the training run's trajectory too (a checkpoint every --trajectory-every updates, the
first and the last, and the manifest) for `raise-eval trajectory DIR`.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict

import torch
from _common import (
    add_overwrite_argument,
    add_trajectory_arguments,
    check_inputs_first,
    check_outputs_first,
    dataset_inputs_first,
    make_trajectory_saver,
    resolve_data_root_first,
    save_checkpoint_or_exit,
)
from raise_eval.models.boltzmann.units import PROTEIN_ALPHABET, CategoricalLayer, GaussianLayer, SpinLayer
from raise_eval.models.training.mixed import MixedRBMTrainingConfig, train_mixed_rbm

from raise_eval import exact, visible_statistics
from raise_eval.io.datasets import load_dataset

KINDS = {
    "gaussian": dict(
        out="checkpoints/grbm_mnist_784-20.pt",
        config=MixedRBMTrainingConfig(n_hidden=20, epochs=20, learning_rate=3e-3, sigma_floor=0.1),
        data="mnist-continuous (scripts/unit_data.py)",
    ),
    "potts": dict(
        out="checkpoints/potts_pf00014_53x21-20.pt",
        config=MixedRBMTrainingConfig(n_hidden=20, epochs=100, learning_rate=1e-2, method="cd", gibbs_steps=5),
        data="pf00014 (scripts/unit_data.py)",
    ),
    "spin": dict(
        out="checkpoints/spin_binarized_mnist_784-20.pt",
        config=MixedRBMTrainingConfig(n_hidden=20, hidden="spin", epochs=60, learning_rate=3e-4),
        data="binarized_mnist",
    ),
}


def load(kind: str, data_root=None):
    """(visible layer, train states, test states) of `kind`, the states prepared by the layer."""
    import unit_data

    if kind == "gaussian":
        layer = GaussianLayer(784)
        train, test = unit_data.continuous_mnist("train", data_root), unit_data.continuous_mnist("test", data_root)
    elif kind == "potts":
        layer = CategoricalLayer(53, 21, PROTEIN_ALPHABET)
        train, test = unit_data.pf00014_split("train", data_root), unit_data.pf00014_split("test", data_root)
    else:
        layer = SpinLayer(784)
        train, test = (
            load_dataset("binarized_mnist", "train", data_root),
            load_dataset("binarized_mnist", "test", data_root),
        )
    return layer, layer.prepare(train).float(), layer.prepare(test).float()


def input_files(parser: argparse.ArgumentParser, kind: str, data_root) -> list:
    """The (what, path) files `kind`'s data is read from, each checked to be there (the parser's error otherwise)."""
    if kind == "spin":
        return dataset_inputs_first(parser, ["binarized_mnist"], data_root)
    import unit_data

    root = resolve_data_root_first(parser, data_root)
    dataset = "mnist-continuous" if kind == "gaussian" else "pf00014"
    inputs = list(
        dict.fromkeys(unit_data.input_files(dataset, "train", root) + unit_data.input_files(dataset, "test", root))
    )
    check_inputs_first(parser, inputs)
    return inputs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=list(KINDS))
    parser.add_argument("--out", default=None, help="where to write the checkpoint (default: the committed one)")
    parser.add_argument("--epochs", type=int, default=None, help="override the number of epochs")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_overwrite_argument(parser, "the checkpoint")
    add_trajectory_arguments(parser)
    args = parser.parse_args(argv)
    if args.save_trajectory is not None and args.trajectory_every < 1:
        parser.error(f"--trajectory-every must be a positive number of updates, got {args.trajectory_every}")
    out = args.out or KINDS[args.kind]["out"]
    inputs = input_files(parser, args.kind, args.data_root)
    check_outputs_first(parser, [("--out", out)], inputs, args.overwrite)
    torch.set_num_threads(args.threads)
    spec = KINDS[args.kind]
    config = (
        spec["config"]
        if args.epochs is None
        else MixedRBMTrainingConfig(**{**asdict(spec["config"]), "epochs": args.epochs})
    )
    layer, train, test = load(args.kind, args.data_root)
    print(f"{args.kind}: train {tuple(train.shape)}, test {tuple(test.shape)}", flush=True)
    named = {"dataset": "binarized_mnist"} if args.kind == "spin" else {}  # what `trajectory` reads test data from
    trajectory = make_trajectory_saver(
        args,
        {
            "trained_by": f"scripts/train_units.py {args.kind}",
            "data": spec["data"],
            "training": asdict(config),
            **named,
        },
        layer.statistics(train).to(torch.float64),
    )
    start = time.perf_counter()
    model, report = train_mixed_rbm(
        train,
        layer,
        config,
        generator=torch.Generator().manual_seed(args.seed),
        progress=not args.no_progress,
        **trajectory,
    )
    seconds = time.perf_counter() - start
    t0 = time.perf_counter()
    log_z = exact.log_partition(model)
    exact_seconds = time.perf_counter() - t0
    test_ll = float(exact.log_unnormalized_visible(model, test).mean()) - log_z
    train_ll = float(exact.log_unnormalized_visible(model, train).mean()) - log_z
    metadata = {
        "trained_by": f"scripts/train_units.py {args.kind}",
        "data": spec["data"],
        "training": {**asdict(config), "seed": args.seed, "threads": args.threads},
        "training_seconds": seconds,
        "training_report": {k: v for k, v in report.items() if k != "log_f_gap"},
        "exact_log_z": log_z,
        "exact_log_z_seconds": exact_seconds,
        "exact_train_log_likelihood": train_ll,
        "exact_test_log_likelihood": test_ll,
        "likelihood": "density" if model.continuous else "probability",
    }
    metadata.update(named)
    if trajectory:
        saver = trajectory["snapshot"]
        metadata["trajectory"] = {"folder": str(saver.folder), "checkpoints": len(saver.entries)}
        print(f"saved {len(saver.entries)} checkpoints of the trajectory to {saver.folder} ({saver.seconds:.1f} s)")
    save_checkpoint_or_exit(out, model, metadata=metadata, train_pixel_means=visible_statistics(model, train))
    print(
        f"trained in {seconds:.1f} s; exact log Z {log_z:.4f} ({exact_seconds:.1f} s); exact average "
        f"log-likelihood: train {train_ll:.4f}, test {test_ll:.4f} nats"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
