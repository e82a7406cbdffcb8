"""Train the embedded default model: a 64-16 RBM on the binarized 8x8 digits, saved to checkpoints/.

With 16 hidden units the exact log-likelihood is tractable (2^16 hidden states), so `raise-eval evaluate` on this
checkpoint shows AIS and RAISE next to the truth. CD-5, 300 epochs, batch 50, learning rate 0.05 (decaying to
0.005), momentum 0.5 -> 0.9, weight decay 1e-4, seed 0: a few seconds on a CPU.

    python scripts/train_rbm_digits.py [--out checkpoints/rbm_digits_64-16.pt]
                                       [--save-trajectory DIR --trajectory-every N]

With --save-trajectory DIR the run's trajectory is saved too (a checkpoint every --trajectory-every updates and a
manifest): `raise-eval trajectory DIR` then gives log Z and the sandwich at every checkpoint, exact values beside.
"""

import argparse
import time
from dataclasses import asdict

import torch
from _common import add_trajectory_arguments, make_trajectory_saver
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm

from raise_eval import exact, save_checkpoint
from raise_eval.io.datasets import load_dataset

CONFIG = RBMTrainingConfig(n_hidden=16, epochs=300, batch_size=50, learning_rate=0.05, method="cd", gibbs_steps=5)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="checkpoints/rbm_digits_64-16.pt", help="where to write the checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    add_trajectory_arguments(parser)
    args = parser.parse_args(argv)
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
    save_checkpoint(args.out, model, metadata=metadata, train_pixel_means=train.mean(0))
    print(f"trained in {seconds:.1f} s; exact average log-likelihood: train {train_ll:.4f}, test {test_ll:.4f} nats")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
