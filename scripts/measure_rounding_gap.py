"""How far rounding an RBM's weights moves its log f(v): the spread that a rounded path (`--gpu-products half-path`
or `tf32-path`) adds to the log-weights, and the shift of RAISE's limit, measured on the CPU.

    python scripts/measure_rounding_gap.py [--checkpoint RBM.npz] [--data-root ../shared/data] [--vectors 2000]

For an RBM (--checkpoint: an .npz of W (784, n), vbias and hbias; the shared 784-500 MNIST RBM by default) and each
rounding of W (float16: the half path; TF32: the TF32 path; bfloat16, for comparison), prints, in nats, the mean and
standard deviation of gap(v) = log f(v) - log f~(v) (hidden units summed out, float64) over --vectors binarized MNIST
test vectors, and over the states --sweeps block Gibbs sweeps of the model (float64) reach from them: approximate
samples of the model p, over which -log E_p[exp(-gap)] = log Z - log Z~. The test mean less that is the shift of
RAISE's limit (the model's average test log-likelihood minus the rounded model's, as `raise_eval.evaluation.rounding`
reports it). float16 and TF32 both keep 11 significant bits and round to nearest, so their rows agree wherever every
weight is within float16's range (|W| < 65504).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from raise_eval.io.datasets import read_amat
from raise_eval.kernels.split_products import half_path_weights, tf32_round

ROOT = Path(__file__).resolve().parents[1]
ROUNDINGS = {
    "float16 (half-path)": lambda w: half_path_weights(w.float()),
    "TF32 (tf32-path)": lambda w: tf32_round(w.float()),
    "bfloat16": lambda w: w.float().to(torch.bfloat16),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="an .npz of the RBM's W (784, n), vbias (784,) and hbias (n,) (default: the shared "
                        "784-500 MNIST RBM under --data-root)")  # fmt: skip
    parser.add_argument("--data-root", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the shared data folder: binarized_mnist/ (and checkpoints/) (default: ../shared/data)")
    parser.add_argument("--vectors", type=int, default=2000, help="test vectors (and Gibbs chains) (default: 2000)")
    parser.add_argument("--sweeps", type=int, default=500, help="block Gibbs sweeps from them (default: 500)")
    parser.add_argument("--seed", type=int, default=0, help="the Gibbs sweeps' seed (default: 0)")
    args = parser.parse_args(argv)
    path = args.checkpoint or args.data_root / "checkpoints" / "rbm_mnist_sgd_grosse_salakhutdinov_2015.npz"
    checkpoint = np.load(path)
    W, b, c = (torch.tensor(checkpoint[k], dtype=torch.float64) for k in ("W", "vbias", "hbias"))
    test_file = args.data_root / "binarized_mnist" / "binarized_mnist_test.amat"
    test = read_amat(test_file)[: args.vectors].double()
    g = torch.Generator().manual_seed(args.seed)
    x = test.clone()
    for _ in range(args.sweeps):  # the model's own block Gibbs sweeps, float64
        h = (torch.rand(x.shape[0], c.numel(), generator=g, dtype=torch.float64) < torch.sigmoid(x @ W + c)).double()
        x = (torch.rand(x.shape[0], b.numel(), generator=g, dtype=torch.float64) < torch.sigmoid(h @ W.T + b)).double()

    def log_f(v, weights):
        return v @ b + F.softplus(v @ weights + c).sum(-1)

    print(f"{path.name} (RBM {W.shape[0]}-{W.shape[1]}): log f(v) - log f~(v) in nats over {args.vectors} test "
          f"vectors and the model's states after {args.sweeps} sweeps from them; shift = test mean - (log Z - log Z~)")
    print(f"{'rounding':22s} {'test mean':>10s} {'test sd':>8s} {'model mean':>11s} {'model sd':>9s} {'shift':>9s}")
    for name, rounding in ROUNDINGS.items():
        rounded = rounding(W).double()
        on_test, on_model = (log_f(v, W) - log_f(v, rounded) for v in (test, x))
        log_z_shift = -float(torch.logsumexp(-on_model, 0) - np.log(on_model.numel()))  # -log E_p[exp(-gap)]
        print(f"{name:22s} {float(on_test.mean()):10.5f} {float(on_test.std()):8.5f} {float(on_model.mean()):11.5f} "
              f"{float(on_model.std()):9.5f} {float(on_test.mean()) - log_z_shift:+9.5f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
