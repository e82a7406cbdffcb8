"""Train the embedded default model: a 64-16 RBM on the binarized 8x8 digits, saved to checkpoints/.

With 16 hidden units the exact log-likelihood is tractable (2^16 hidden states), so `raise-eval evaluate` on this
checkpoint shows AIS and RAISE next to the truth. CD-5, 300 epochs, batch 50, learning rate 0.05 (decaying to
0.005), momentum 0.5 -> 0.9, weight decay 1e-4, seed 0: 7.1 s of training (9.6 s in all) with --threads 1 on one
core of a 2-core Intel Xeon (raise-eval 0.3.0); more on a busy machine or with several threads competing.

    python scripts/train_rbm_digits.py [--out checkpoints/rbm_digits_64-16.pt] [--overwrite] [--threads N]
                                       [--save-trajectory DIR --trajectory-every N]

An existing --out is replaced only with --overwrite (the committed checkpoint too).

With --save-trajectory DIR the run's trajectory is saved too (a checkpoint every --trajectory-every updates and a
manifest): `raise-eval trajectory DIR` then gives log Z and the sandwich at every checkpoint, exact values beside.
"""

import argparse
import time
from dataclasses import asdict

import torch
from _common import (
    add_overwrite_argument,
    add_trajectory_arguments,
    check_outputs_first,
    dataset_inputs_first,
    make_trajectory_saver,
    save_checkpoint_or_exit,
)
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm

from raise_eval import exact
from raise_eval.io.datasets import load_dataset

CONFIG = RBMTrainingConfig(n_hidden=16, epochs=300, batch_size=50, learning_rate=0.05, method="cd", gibbs_steps=5)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="checkpoints/rbm_digits_64-16.pt", help="where to write the checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    add_overwrite_argument(parser, "the checkpoint")
    add_trajectory_arguments(parser)
    args = parser.parse_args(argv)
    check_outputs_first(parser, [("--out", args.out)], dataset_inputs_first(parser, ["digits"], None), args.overwrite)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    trajectory = make_trajectory_saver(
        args, {"dataset": "digits", "trained_by": "scripts/train_rbm_digits.py"}, train.mean(0)
    )
    start = time.perf_counter()
    model = train_rbm(train, CONFIG, generator=torch.Generator().manual_seed(args.seed), progress=True, **trajectory)
    seconds = time.perf_counter() - start
    train_ll = exact.log_likelihood(model, train).mean().item()
    test_ll = exact.log_likelihood(model, test).mean().item()
    metadata = {
        "dataset": "digits",
        "trained_by": "scripts/train_rbm_digits.py",
        "training": {**asdict(CONFIG), "seed": args.seed},
        "exact_log_z": exact.log_partition(model),
        "exact_train_log_likelihood": train_ll,
        "exact_test_log_likelihood": test_ll,
    }
    save_checkpoint_or_exit(args.out, model, metadata=metadata, train_pixel_means=train.mean(0))
    print(f"trained in {seconds:.1f} s; exact average log-likelihood: train {train_ll:.4f}, test {test_ll:.4f} nats")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
