"""Train a VAE the way a researcher's own code would: plain PyTorch, no raise-eval classes (the model that
`examples/plain_vae_factory.py` wraps to evaluate it with `raise-eval bdmc --model`).

784-200-200-50 encoder (it outputs [mean | log-variance]) and 50-200-200-784 decoder, ELU units, Adam (learning
rate 1e-3, batch 100) on the single-sample ELBO with the analytic KL; the file saved is the model's plain
`state_dict` (keys encoder.*, decoder.* and, for the Gaussian head, log_scale).

--likelihood bernoulli (default): Larochelle & Murray's binarized MNIST (50,000 training images), decoder logits.
--likelihood gaussian: MNIST grey levels as intensities in [0, 1], dequantized (x = (pixel + u) / 256, u uniform,
    fresh every epoch; the test images use one fixed draw), so that a density on [0, 1] is well defined; the decoder
    outputs means through a sigmoid and the model learns one log standard deviation per pixel (`log_scale`).

The data are read with numpy from the data root ($RAISE_EVAL_DATA, else ../shared/data): binarized_mnist/*.amat
and MNIST/raw/*.gz. Prints the test ELBO and IWAE-100 on 1,000 test images (computed here, in plain PyTorch).

    python scripts/train_vae_plain.py [--likelihood bernoulli] [--epochs 40] [--out checkpoints/plain_vae_mnist_z50.pt]
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _common import add_overwrite_argument, check_inputs_first, check_outputs_first, write_output
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = {
    "bernoulli": "checkpoints/plain_vae_mnist_z50.pt",
    "gaussian": "checkpoints/plain_vae_mnist_gaussian_z50.pt",
}


def data_root(arg: str | None) -> Path:
    return Path(arg or os.environ.get("RAISE_EVAL_DATA") or ROOT.parent / "shared" / "data")


def input_files(likelihood: str, root: Path) -> list[tuple[str, Path]]:
    """The (what, path) data files the script reads for `likelihood`."""
    if likelihood == "bernoulli":
        folder, names = root / "binarized_mnist", ["binarized_mnist_train.amat", "binarized_mnist_test.amat"]
    else:
        folder, names = root / "MNIST" / "raw", ["train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"]
    return [("the data file", folder / name) for name in names]


def read_amat(path: Path) -> np.ndarray:
    """Rows of 784 space-separated '0'/'1' characters -> float32 (N, 784)."""
    raw = np.fromfile(path, dtype=np.uint8).reshape(-1, 2 * 784)  # digit, separator (space or newline)
    return (raw[:, 0::2] - ord("0")).astype(np.float32)


def read_mnist_grey(path: Path) -> np.ndarray:
    """An MNIST idx3 image file -> uint8 (N, 784)."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[4:8], "big")
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 784).copy()  # writable, for torch


def mlp(*sizes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ELU()]
    return nn.Sequential(*layers[:-1])


class PlainVAE(nn.Module):
    def __init__(self, likelihood: str, latent_dim: int = 50):
        super().__init__()
        self.likelihood, self.latent_dim = likelihood, latent_dim
        self.encoder = mlp(784, 200, 200, 2 * latent_dim)
        self.decoder = mlp(latent_dim, 200, 200, 784)
        if likelihood == "gaussian":
            self.decoder.append(nn.Sigmoid())
            self.log_scale = nn.Parameter(torch.full((784,), math.log(0.1)))

    def log_px_given_z(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        out = self.decoder(z)
        if self.likelihood == "bernoulli":
            return -F.binary_cross_entropy_with_logits(out, x.expand_as(out), reduction="none").sum(-1)
        var = torch.exp(2 * self.log_scale)
        return (-0.5 * (x - out) ** 2 / var - self.log_scale - 0.5 * math.log(2 * math.pi)).sum(-1)

    def elbo(self, x: torch.Tensor) -> torch.Tensor:
        mu, logvar = self.encoder(x).chunk(2, dim=-1)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        kl = 0.5 * (mu**2 + logvar.exp() - 1 - logvar).sum(-1)
        return self.log_px_given_z(x, z) - kl

    @torch.no_grad()
    def iwae(self, x: torch.Tensor, k: int) -> torch.Tensor:
        mu, logvar = self.encoder(x).chunk(2, dim=-1)
        std = torch.exp(0.5 * logvar)
        z = mu + std * torch.randn(k, *mu.shape)  # (k, N, d)
        log_q = (-0.5 * ((z - mu) / std) ** 2 - 0.5 * logvar - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prior = (-0.5 * z**2 - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_w = self.log_px_given_z(x, z) + log_prior - log_q
        return torch.logsumexp(log_w.double(), 0) - math.log(k)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--likelihood", choices=["bernoulli", "gaussian"], default="bernoulli")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-size", type=int, default=None, help="first N training images only (default: all)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--out", default=None, help="default: checkpoints/plain_vae_mnist[_gaussian]_z50.pt")
    # The model is plain PyTorch; its file goes through raise-eval's output checks and writer, like every script's.
    add_overwrite_argument(parser, "the state_dict file")
    args = parser.parse_args(argv)
    out = Path(args.out or ROOT / DEFAULT_OUT[args.likelihood])
    root = data_root(args.data_root)
    if not root.is_dir():
        parser.error(f"data root {root} not found: pass --data-root or set $RAISE_EVAL_DATA (nothing was computed)")
    inputs = input_files(args.likelihood, root)
    check_outputs_first(parser, [("--out", out)], inputs, args.overwrite)
    check_inputs_first(parser, inputs)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if args.likelihood == "bernoulli":
        train = torch.from_numpy(read_amat(root / "binarized_mnist" / "binarized_mnist_train.amat"))
        test = torch.from_numpy(read_amat(root / "binarized_mnist" / "binarized_mnist_test.amat"))
    else:
        train_grey = torch.from_numpy(read_mnist_grey(root / "MNIST" / "raw" / "train-images-idx3-ubyte.gz"))
        test_grey = read_mnist_grey(root / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz")
        test = torch.from_numpy(((test_grey + rng.random(test_grey.shape)) / 256).astype(np.float32))
    model = PlainVAE(args.likelihood)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = time.perf_counter()
    n = min(args.train_size or len(train if args.likelihood == "bernoulli" else train_grey), 60_000)
    for epoch in range(args.epochs):
        if args.likelihood == "gaussian":
            train = (train_grey.float() + torch.rand(train_grey.shape)) / 256  # fresh dequantization noise
        order = torch.randperm(n)  # a permutation of the first n training images
        total = 0.0
        for i in range(0, n, 100):
            batch = train[order[i : i + 100]]
            loss = -model.elbo(batch).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        print(f"epoch {epoch + 1}: training ELBO {-total / n:.2f} ({time.perf_counter() - start:.0f} s)", flush=True)
    seconds = time.perf_counter() - start
    model.eval()
    subset = test[torch.from_numpy(np.random.default_rng(1).permutation(len(test))[:1000])]
    with torch.no_grad():
        test_elbo = torch.stack([model.elbo(subset) for _ in range(10)]).mean().item()
    test_iwae = torch.cat([model.iwae(subset[i : i + 100], 100) for i in range(0, 1000, 100)]).mean().item()
    state = model.state_dict()
    write_output(out, lambda path: torch.save(state, path), what="the trained model")
    print(f"trained {args.epochs} epochs in {seconds:.0f} s on {torch.get_num_threads()} thread(s)")
    print(f"1,000 test images: ELBO {test_elbo:.2f}, IWAE-100 {test_iwae:.2f} nats")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
