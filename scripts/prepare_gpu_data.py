"""Write the DATA_DIR that `scripts/check_gpu.sh DATA_DIR OUT_DIR` reads, from the shared data folder.

    python scripts/prepare_gpu_data.py [--data-root ../shared/data] [--out .gpu] [--ising]

A lent GPU machine sees the working tree and the paths named in `carry` only (64 MiB in all), so the checks' data
travel as a small folder of their own (about 19 MB; 28 MB with --ising):

- mnist_test.npz, mnist_train.npz: Larochelle and Murray's binarized MNIST (test 10,000 and train 50,000 rows of
  784 zeros and ones, uint8, compressed), from binarized_mnist/*.amat;
- rbm_mnist_sgd_grosse_salakhutdinov_2015.npz: the shared 784-500 RBM of the paper-scale run (a copy);
- data/binarized_mnist/binarized_mnist_test.amat: for the cost model's cases (a copy; RAISE_EVAL_DATA=DATA_DIR/data);
- with --ising, ising_torus/: the 32 x 32 Ising torus and its test states (`scripts/examples/ising_torus.py`, its
  own evaluate run cut to a few steps, since the checks run theirs on CUDA).

Nothing is written outside --out; an existing --out is filled in (files already there are replaced).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from raise_eval.io.datasets import read_amat

ROOT = Path(__file__).resolve().parents[1]
RBM = "rbm_mnist_sgd_grosse_salakhutdinov_2015.npz"


def read_binary_rows(path: Path) -> np.ndarray:
    """The rows of a binarized MNIST .amat file as uint8 (N, 784) (`raise_eval.io.datasets.read_amat`)."""
    rows = read_amat(path).numpy()
    if rows.ndim != 2 or rows.shape[1] != 784 or rows.max() > 1:
        raise SystemExit(f"{path}: expected rows of 784 zeros and ones, got an array shaped {rows.shape}")
    return rows.astype(np.uint8)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--data-root", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the shared data folder (binarized_mnist/, checkpoints/)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / ".gpu", help="the DATA_DIR to write")
    parser.add_argument("--ising", action="store_true", help="also write ising_torus/ (about 20 s on 2 cores)")
    args = parser.parse_args(argv)
    source = args.data_root / "binarized_mnist"
    rbm = args.data_root / "checkpoints" / RBM
    for needed in (source / "binarized_mnist_test.amat", source / "binarized_mnist_train.amat", rbm):
        if not needed.is_file():
            parser.error(f"{needed} is missing: point --data-root at the shared data folder")
    out = args.out
    (out / "data" / "binarized_mnist").mkdir(parents=True, exist_ok=True)
    for split in ("test", "train"):
        np.savez_compressed(out / f"mnist_{split}.npz", data=read_binary_rows(source / f"binarized_mnist_{split}.amat"))
    shutil.copyfile(rbm, out / RBM)
    amat = "binarized_mnist_test.amat"
    shutil.copyfile(source / amat, out / "data" / "binarized_mnist" / amat)
    if args.ising:
        command = [sys.executable, str(ROOT / "scripts" / "examples" / "ising_torus.py"), "--out",
                   str(out / "ising_torus"), "--overwrite", "--steps", "10", "--ais-chains", "10",
                   "--raise-examples", "2", "--raise-chains", "2", "--certify-steps", "10",
                   "--certify-max-steps", "10"]  # fmt: skip
        subprocess.run(command, check=True)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({total / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
