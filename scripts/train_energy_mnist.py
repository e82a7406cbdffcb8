"""Train a small neural energy on MNIST with short-run MCMC, for `raise-eval evaluate --model` (docs/energy.md).

    python scripts/train_energy_mnist.py [--data-root DIR] [--out runs/energy_mnist] [--iterations 1500]
        [--langevin-steps 30] [--threads 1] [--overwrite]

The energy is examples/energy_mnist_factory.py's MLP 784-256-256-1 (SiLU) on the box [0, 1]. The data: MNIST's
grey levels dequantized, x = (pixel + u) / 256 with u ~ U(0, 1) (a fixed seed), so that a density on [0, 1]^784 is
meaningful. Each iteration draws a batch of training images and as many negative samples by short-run Langevin
dynamics (`--langevin-steps` steps of x <- clamp(x - step grad E(x) + noise, 0, 1)) started from uniform noise (a
fresh start each iteration: short-run MCMC in the manner of Nijkamp et al. 2019), and takes an Adam step on
mean E(data) - mean E(samples) + alpha (mean E(data)^2 + mean E(samples)^2), the square keeping the energies near 0.

Writes under --out: energy.pt (the state_dict), train.npy (the first 5,000 training images, for the base),
test.npy (--num-test test images, a fixed-seed shuffle: the test file is in the idx order), log.json (settings,
losses, seconds), through raise-eval's output checks and writer: existing files are refused before any work without
--overwrite. The data root: --data-root, else $RAISE_EVAL_DATA or ../shared/data (MNIST/raw/*.gz).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _common import (
    add_overwrite_argument,
    check_inputs_first,
    check_outputs_first,
    resolve_data_root_first,
    write_output,
)

ROOT = Path(__file__).resolve().parents[1]
FACTORY = ROOT / "examples" / "energy_mnist_factory.py"
OUTPUTS = ("energy.pt", "train.npy", "test.npy", "log.json")


def dequantized(path: Path, generator: torch.Generator) -> torch.Tensor:
    """The MNIST idx images at `path` as (N, 784) float32 in (0, 1): (pixel + u) / 256, u ~ U(0, 1)."""
    from raise_eval.io.datasets import read_idx

    grey = torch.from_numpy(read_idx(path).reshape(-1, 784).astype(np.float32))
    return (grey + torch.rand(grey.shape, generator=generator)) / 256.0


def _save_npy(path: str, examples: torch.Tensor) -> None:
    with open(path, "wb") as f:  # a handle: np.save would add .npy to the writer's temporary name
        np.save(f, examples.numpy())


def short_run_samples(energy, n: int, steps: int, step_size: float, noise: float, g: torch.Generator):
    """`n` samples (n, 784) by `steps` clamped Langevin steps on E from uniform noise (no gradient to the energy)."""
    x = torch.rand(n, 784, generator=g)
    for _ in range(steps):
        x.requires_grad_(True)
        (grad,) = torch.autograd.grad(energy(x).sum(), x)
        x = (x.detach() - step_size * grad + noise * torch.randn(n, 784, generator=g)).clamp_(0.0, 1.0)
    return x.detach()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "energy_mnist")
    parser.add_argument("--iterations", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--langevin-steps", type=int, default=30)
    parser.add_argument("--step-size", type=float, default=1.0, help="Langevin step on -grad E (default 1.0)")
    parser.add_argument("--noise", type=float, default=0.01, help="Langevin noise's standard deviation")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--alpha", type=float, default=0.1, help="weight of the energies' square")
    parser.add_argument("--num-test", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", default=None)
    add_overwrite_argument(parser, "the four files under --out")
    args = parser.parse_args(argv)
    for name in ("iterations", "batch", "langevin_steps", "num_test", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    raw = resolve_data_root_first(parser, args.data_root) / "MNIST" / "raw"
    inputs = [("the MNIST training images", raw / "train-images-idx3-ubyte.gz"),
              ("the MNIST test images", raw / "t10k-images-idx3-ubyte.gz")]  # fmt: skip
    check_inputs_first(parser, inputs)
    check_outputs_first(parser, [("--out", args.out / name) for name in OUTPUTS], inputs, args.overwrite)
    torch.set_num_threads(args.threads)
    spec = importlib.util.spec_from_file_location("energy_mnist_factory", FACTORY)
    factory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(factory)

    g = torch.Generator().manual_seed(args.seed)
    train = dequantized(inputs[0][1], g)
    test = dequantized(inputs[1][1], g)
    test = test[torch.randperm(test.shape[0], generator=g)[: args.num_test]]
    torch.manual_seed(args.seed)  # the energy's initialization
    energy = factory.MLPEnergy()
    optimizer = torch.optim.Adam(energy.parameters(), lr=args.lr, betas=(0.0, 0.999))
    losses, start = [], time.perf_counter()
    for it in range(args.iterations):
        batch = train[torch.randint(0, train.shape[0], (args.batch,), generator=g)]
        samples = short_run_samples(energy, args.batch, args.langevin_steps, args.step_size, args.noise, g)
        e_data, e_samples = energy(batch), energy(samples)
        loss = e_data.mean() - e_samples.mean() + args.alpha * (e_data.square().mean() + e_samples.square().mean())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        e_data_mean = float(e_data.mean().detach())
        losses.append(e_data_mean - float(e_samples.mean().detach()))
        if (it + 1) % 50 == 0:
            print(f"iteration {it + 1}: E(data) - E(samples) = {losses[-1]:.3f}, E(data) = {e_data_mean:.3f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
    seconds = time.perf_counter() - start
    state = energy.state_dict()
    write_output(args.out / "energy.pt", lambda path: torch.save(state, path), what="the trained energy")
    for name, examples in (("train.npy", train[:5000]), ("test.npy", test)):
        write_output(args.out / name, lambda path, e=examples: _save_npy(path, e), what=f"the {name} examples")
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    write_output(args.out / "log.json", json.dumps({"settings": settings, "seconds": seconds, "losses": losses}),
                 what="the training log")  # fmt: skip
    print(f"trained in {seconds:.0f} s; wrote {', '.join(str(args.out / n) for n in OUTPUTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
