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
import io
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
from raise_eval.models.boltzmann.units import PROTEIN_ALPHABET

from raise_eval.io.datasets import dataset_files, mnist_images, resolve_data_root
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


def fasta_text(codes: torch.Tensor, alphabet: str = PROTEIN_ALPHABET, prefix: str = "seq") -> str:
    """Integer codes (N, L) as FASTA text, one record '>{prefix}{i}' per row."""
    return "".join(f">{prefix}{i}\n{''.join(alphabet[c] for c in row)}\n" for i, row in enumerate(codes.tolist()))


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def input_files(dataset: str, split: str, root: Path) -> list[tuple[str, Path]]:
    """The (what, path) files `dataset`'s `split` is rebuilt from, under the data root `root`."""
    if dataset == "pf00014":
        return [("the PF00014 alignment", root / PF00014)]
    return [(f"the MNIST {split} images", path) for path in dataset_files("mnist", split, root)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", choices=["mnist-continuous", "pf00014"])
    parser.add_argument("--split", choices=["train", "test"], default="test")
    parser.add_argument("--out", required=True, help=".npy for mnist-continuous; .fasta or .npy for pf00014")
    parser.add_argument("--data-root", default=None, help="folder holding MNIST/ and protein/ (else $RAISE_EVAL_DATA)")
    add_overwrite_argument(parser, "the --out file")
    args = parser.parse_args(argv)
    as_npy = args.dataset == "mnist-continuous" or args.out.endswith(".npy")
    # Before any work: where the output goes, that it is none of the inputs, and that the inputs are there.
    root = resolve_data_root_first(parser, args.data_root)
    inputs = input_files(args.dataset, args.split, root)
    check_outputs_first(parser, [("--out", args.out)], inputs, args.overwrite)
    if args.dataset == "mnist-continuous" and not args.out.endswith(".npy"):
        parser.error(f"--out {args.out}: mnist-continuous is written as a .npy file; name one (nothing was computed)")
    check_inputs_first(parser, inputs)
    if args.dataset == "mnist-continuous":
        content = npy_bytes(continuous_mnist(args.split, root).numpy())
    elif as_npy:
        content = npy_bytes(pf00014_split(args.split, root).numpy())
    else:
        content = fasta_text(pf00014_split(args.split, root), prefix=f"pf00014_{args.split}_")
    # Cheap to rebuild: nothing is kept in the temporary folder when the write fails.
    if write_output(args.out, content, what="the data", keep_on_failure=False):
        print(f"wrote {args.out}")
    else:
        print(f"nothing written: --out {args.out} is the null device")


if __name__ == "__main__":
    main()
