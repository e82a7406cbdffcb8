"""The data of the committed typed-layer models, rebuilt deterministically from the shared data root.

- mnist-continuous: MNIST grey levels dequantized to real numbers in (0, 1): x = (g + u) / 256, g the grey level
  (0..255) and u ~ Uniform[0, 1) from a fixed seed per split (train 11, test 12), float32 (N, 784), row-major pixels.
  A density over these vectors is in units of the (0, 1) scale: read on the grey-level scale 0..256 it shifts by
  -784 log 256 = -4347.4 nats (docs/units.md).
- pf00014: the Pfam PF00014 (Kunitz/BPTI) alignment of ../shared/data/protein (13,600 sequences of length 53),
  deduplicated (8,871 distinct sequences, in their order of first appearance), then split by a fixed-seed
  permutation (numpy's legacy RandomState(0)) into 90% train and 10% test; as integer codes with the protein alphabet
  -ACDEFGHIKLMNPQRSTVWY. No reweighting by similarity.

    python scripts/unit_data.py mnist-continuous --split test --out mnist_continuous_test.npy
    python scripts/unit_data.py pf00014 --split test --out pf00014_test.fasta
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from raise_eval.models.boltzmann.units import PROTEIN_ALPHABET

from raise_eval.io.datasets import mnist_images, resolve_data_root
from raise_eval.io.sequences import read_alignment

DEQUANTIZATION_SEEDS = {"train": 11, "test": 12}
PF00014 = Path("protein") / "PF00014_mgap6.fasta.gz"
PF00014_TEST_FRACTION = 0.1


def continuous_mnist(split: str, data_root=None) -> torch.Tensor:
    """Dequantized MNIST in (0, 1), float32 (N, 784) (see the module docstring)."""
    grey = mnist_images(split, data_root).reshape(-1, 784).astype(np.float64)
    u = np.random.default_rng(DEQUANTIZATION_SEEDS[split]).random(grey.shape)
    return torch.from_numpy(((grey + u) / 256.0).astype(np.float32))


def pf00014_split(split: str, data_root=None) -> torch.Tensor:
    """Integer codes (N, 53) of the deduplicated PF00014 family's train or test part (see the module docstring)."""
    codes = read_alignment(resolve_data_root(data_root) / PF00014, PROTEIN_ALPHABET).numpy()
    _, first = np.unique(codes, axis=0, return_index=True)
    distinct = codes[np.sort(first)]
    perm = np.random.RandomState(0).permutation(len(distinct))
    n_test = int(round(PF00014_TEST_FRACTION * len(distinct)))
    part = perm[:n_test] if split == "test" else perm[n_test:]
    return torch.from_numpy(distinct[np.sort(part)])


def write_fasta(path, codes: torch.Tensor, alphabet: str = PROTEIN_ALPHABET, prefix: str = "seq") -> None:
    with open(path, "w", encoding="ascii") as f:
        for i, row in enumerate(codes.tolist()):
            f.write(f">{prefix}{i}\n{''.join(alphabet[c] for c in row)}\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", choices=["mnist-continuous", "pf00014"])
    parser.add_argument("--split", choices=["train", "test"], default="test")
    parser.add_argument("--out", required=True, help=".npy for mnist-continuous; .fasta or .npy for pf00014")
    parser.add_argument("--data-root", default=None)
    args = parser.parse_args(argv)
    if args.dataset == "mnist-continuous":
        np.save(args.out, continuous_mnist(args.split, args.data_root).numpy())
    elif args.out.endswith(".npy"):
        np.save(args.out, pf00014_split(args.split, args.data_root).numpy())
    else:
        write_fasta(args.out, pf00014_split(args.split, args.data_root), prefix=f"pf00014_{args.split}_")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
