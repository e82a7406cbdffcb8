"""Train the project's MNIST VAE and save it to checkpoints/ (the model `raise-eval bdmc` is demonstrated on).

784-200-200-10 encoder and 10-200-200-784 decoder, tanh units, Bernoulli likelihood, trained on the 50,000
training images of Larochelle's binarized MNIST with Adam (learning rate 1e-3, batch 100) on the single-sample
ELBO. Reports the test ELBO and IWAE-1000 on 1,000 test images. About a minute per 20 epochs on 2 CPU cores.

    python scripts/train_vae_mnist.py [--epochs 30] [--latent-dim 10] [--out checkpoints/vae_mnist_z10.pt]
"""

import argparse
import time

import torch
from _common import add_overwrite_argument, check_outputs_first, dataset_inputs_first, save_checkpoint_or_exit
from raise_eval.models.training.vae import train_vae

from raise_eval import VAE, VAEConfig, elbo, iwae
from raise_eval.io.datasets import load_dataset


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--latent-dim", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--out", default="checkpoints/vae_mnist_z10.pt")
    add_overwrite_argument(parser, "the checkpoint")
    args = parser.parse_args(argv)
    inputs = dataset_inputs_first(parser, ["binarized_mnist"], args.data_root)
    check_outputs_first(parser, [("--out", args.out)], inputs, args.overwrite)
    train = load_dataset("binarized_mnist", "train", args.data_root)
    test = load_dataset("binarized_mnist", "test", args.data_root)
    torch.manual_seed(args.seed)  # nn.Linear's initialization uses the global RNG; training uses `g` below
    config = VAEConfig(data_dim=784, latent_dim=args.latent_dim, hidden=[200, 200], activation="tanh")
    model = VAE(config)
    g = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    history = train_vae(model, train, epochs=args.epochs, generator=g, progress=True)
    seconds = time.perf_counter() - start
    model.requires_grad_(False).eval()
    subset = test[torch.randperm(len(test), generator=torch.Generator().manual_seed(1))[:1000]]
    q = model.posterior_approximation()
    test_elbo = elbo(model, subset, q, 10, generator=g).mean().item()
    test_iwae = iwae(model, subset, q, 1000, generator=g).mean().item()
    save_checkpoint_or_exit(
        args.out,
        model,
        metadata={
            "dataset": "binarized_mnist",
            "trained_by": "scripts/train_vae_mnist.py",
            "architecture": f"784-200-200-{args.latent_dim}",
            "training": {
                "epochs": args.epochs,
                "seed": args.seed,
                "optimizer": "adam",
                "learning_rate": 1e-3,
                "batch_size": 100,
                "objective": "single-sample ELBO",
                "threads": torch.get_num_threads(),
                "train_size": len(train),
            },
            "training_seconds": seconds,
            "torch_version": str(torch.__version__),
            "train_elbo_last_epoch": history["elbo"][-1],
            "test_elbo_1000_images": test_elbo,
            "test_iwae1000_1000_images": test_iwae,
        },
        train_pixel_means=train.mean(0),
    )
    print(f"trained {args.epochs} epochs in {seconds:.0f} s; final training ELBO {history['elbo'][-1]:.2f}")
    print(f"1,000 test images: ELBO {test_elbo:.2f}, IWAE-1000 {test_iwae:.2f} nats")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
