"""DsysDML/rbms training runs read by raise-eval from their HDF5 files, every saved update against exact values.

    pip install rbms h5py && RAISE_EVAL_DATA=../shared/data python scripts/examples/rbms_runs.py [--out runs/rbms]

On COLUMNS (4 sites, q = 21: 194,481 sequences, so every log Z is enumerated) of PF00014's alignment, a fixed split:

1. A Potts RBM (rbms' PBRBM) trained by rbms' own PCD (`rbms.training.pcd.train`), its updates saved by rbms
   (exponentially spaced) in pbrbm.h5.
2. A Potts Boltzmann machine in rbms' PBM parametrization (W (L, q, L, q), bias (L, q), E = -bias.x - x'Wx / 2):
   rbms 0.5.0, the latest on PyPI, has no PBM class, so this script fits one itself (likelihood ascent with the exact
   gradient, model moments by enumeration) and writes each saved update with rbms' own writer, `rbms.io.save_model`,
   in pbm.h5: the file is rbms' layout, the training is not rbms'.
3. raise-eval reads both: log f of every update read against rbms' own `compute_energy_visibles` (Potts RBM) and
   against the PBM energy above (every configuration); `raise-eval evaluate pbrbm.h5` (the last update) and AIS and
   RAISE on the PBM's last update (Python, `FullyVisiblePath`) against exact; then `raise-eval trajectory` over each
   run, every update's log Z and test log-likelihood against exact.

One thread. Without rbms or h5py it says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALIGNMENT = Path("protein") / "PF00014_mgap6.fasta.gz"
COLUMNS = (16, 17, 18, 19)  # site entropies 1.27, 1.07, 1.51, 0.89 nats: neither conserved nor near uniform
Q = 21


def load_columns(data_root: Path, seed: int):
    """Site codes (N, 4) of COLUMNS, shuffled with `seed` and split 80 / 20 into (train, test)."""
    import torch

    from raise_eval.io.sequences import read_alignment

    codes = read_alignment(data_root / ALIGNMENT, "protein")[:, list(COLUMNS)]
    order = torch.randperm(codes.shape[0], generator=torch.Generator().manual_seed(seed))
    codes = codes[order]
    cut = int(0.8 * codes.shape[0])
    return codes[:cut], codes[cut:]


def train_potts_rbm(path: Path, train, test, hidden: int, updates: int, saves: int, seed: int):
    """rbms' own training of a PBRBM (PCD, its defaults otherwise), `saves` updates kept in `path`."""
    import numpy as np
    import torch
    from rbms.dataset.dataset_class import RBMDataset
    from rbms.training.pcd import train as rbms_train
    from rbms.training.utils import get_checkpoints

    def dataset(codes, name):
        n = codes.shape[0]
        return RBMDataset(codes.numpy().astype(np.float32), np.zeros(n, np.int64), np.ones(n, np.float32),
                          np.array([str(i) for i in range(n)], dtype=object), name, False, "cpu",
                          torch.float32)  # fmt: skip

    torch.manual_seed(seed)  # rbms samples with torch's global generator
    args = {"filename": str(path), "num_hiddens": hidden, "batch_size": 500, "gibbs_steps": 10, "learning_rate": 0.05,
            "num_chains": 500, "num_updates": updates, "beta": 1.0, "restore": False, "overwrite": True, "seed": seed,
            "no_center": False, "L1": 0.0, "L2": 0.0, "log": False, "device": "cpu", "dtype": torch.float32,
            "training_type": "pcd", "train_size": 0.8, "test_size": 0.2}  # fmt: skip
    rbms_train(dataset(train, "train"), dataset(test, "test"), "PBRBM", args, torch.float32,
               get_checkpoints(updates, saves, "exp"))  # fmt: skip


class PBMParameters:
    """What `rbms.io.save_model` asks of a model: its name and named parameters (rbms' PBM names)."""

    name = "PBM"

    def __init__(self, weight_matrix, bias):
        self.weight_matrix, self.bias = weight_matrix, bias

    def named_parameters(self):
        return {"weight_matrix": self.weight_matrix, "bias": self.bias}


def pbm_log_f(weight_matrix, bias, one_hot):
    """-E = bias.x + x'Wx / 2 of one-hot rows x (M, L q), float64 (M,)."""
    flat = weight_matrix.reshape(one_hot.shape[1], one_hot.shape[1])
    return one_hot @ bias.reshape(-1) + 0.5 * ((one_hot @ flat) * one_hot).sum(1)


def train_pbm(path: Path, train, updates: int, saves, learning_rate: float, l2: float):
    """Likelihood ascent on rbms' PBM parameters with the exact gradient (data moments against the model's, by
    enumeration), from the independent model (bias = log of the training frequencies, W = 0), each update in `saves`
    written by rbms' save_model."""
    import torch
    from rbms.io import save_model

    size = train.shape[1]
    states = torch.tensor(list(itertools.product(range(Q), repeat=size)))
    everything = torch.nn.functional.one_hot(states, Q).double().reshape(len(states), size * Q)
    data = torch.nn.functional.one_hot(train, Q).double().reshape(len(train), size * Q)
    data_mean, data_second = data.mean(0), data.T @ data / len(data)
    frequencies = (0.999 * data_mean + 0.001 / Q).reshape(size, Q)
    bias, weights = frequencies.log(), torch.zeros(size * Q, size * Q, dtype=torch.float64)
    chains = {"visible": train[:100].double()}
    for update in range(1, updates + 1):
        p = torch.softmax(pbm_log_f(weights, bias, everything), 0)
        model_mean, model_second = p @ everything, everything.T @ (everything * p[:, None])
        bias = bias + learning_rate * (data_mean - model_mean).reshape(size, Q)
        # d(-E)/dW = x x' / 2 for each entry of a symmetric W; the L2 penalty keeps unseen pairs' couplings bounded
        weights = weights + learning_rate * (0.5 * (data_second - model_second) - l2 * weights)
        if update in saves:
            params = PBMParameters(weights.reshape(size, Q, size, Q).clone(), bias.clone())
            save_model(str(path), params, chains, num_updates=update, time=0.0)


def read_and_check(pbrbm: Path, pbm: Path) -> None:
    """raise-eval's log f of every saved update against rbms' own energy (Potts RBM) and the PBM energy."""
    import torch
    from raise_eval.models.io import load_checkpoint
    from raise_eval.models.io.rbms_files import rbms_updates
    from rbms.io import load_params

    states = torch.tensor(list(itertools.product(range(Q), repeat=len(COLUMNS))))
    for update in rbms_updates(pbrbm):
        ours = load_checkpoint(pbrbm, update=update, dtype=torch.float64).model
        theirs = load_params(str(pbrbm), update, torch.device("cpu"), torch.float64)
        sample = states[::97]
        gap = ours.log_unnormalized_prob(ours.prepare_visible(sample)) + theirs.compute_energy_visibles(sample.double())
        print(f"pbrbm.h5 update_{update}: max |log f - (-E_rbms)| over {len(sample)} sequences "
              f"{float(gap.abs().max()):.1e}")  # fmt: skip
    one_hot = torch.nn.functional.one_hot(states, Q).double().reshape(len(states), -1)
    for update in rbms_updates(pbm):
        import h5py

        with h5py.File(pbm, "r") as f:
            weight_matrix = torch.from_numpy(f[f"update_{update}/params/weight_matrix"][()])
            bias = torch.from_numpy(f[f"update_{update}/params/bias"][()])
        ours = load_checkpoint(pbm, update=update, dtype=torch.float64).model
        gap = ours.log_unnormalized(states).double() - pbm_log_f(weight_matrix, bias, one_hot)
        print(f"pbm.h5 update_{update}: max |log f - (-E_PBM)| over all {len(states):,} sequences "
              f"{float(gap.abs().max()):.1e}")  # fmt: skip


def pbm_sandwich(pbm: Path, train, test, steps: int, seed: int) -> None:
    """AIS and RAISE on the PBM's last update from Python (evaluate runs RBMs here), against exact."""
    import torch
    from raise_eval.models.io import load_checkpoint

    from raise_eval import ais, exact, raise_log_likelihood
    from raise_eval.paths.fully_visible import FullyVisiblePath, data_base_fields
    from raise_eval.schedules import sigmoid_schedule

    model = load_checkpoint(pbm, dtype=torch.float64).model
    path = FullyVisiblePath(model, data_base_fields(model, train))
    betas = sigmoid_schedule(steps)
    start = time.perf_counter()
    forward = ais(path, betas, 1000, generator=torch.Generator().manual_seed(seed))
    subset = test[:100]
    reverse = raise_log_likelihood(path, subset, betas, 20, generator=torch.Generator().manual_seed(seed + 1))
    seconds = time.perf_counter() - start
    log_z = float(exact.log_partition(model))
    log_f = model.log_unnormalized(test).double()
    print(f"\nPBM, last update (K = {steps}, 1,000 AIS chains, RAISE 100 x 20; {seconds:.1f} s)")
    print(f"  log Z: AIS {float(forward.log_normalizer):.4f} +- {float(forward.stderr):.4f}, exact {log_z:.4f}")
    ais_mean = float((log_f - forward.log_normalizer).mean())
    exact_mean = float((log_f - log_z).mean())
    print(f"  test log-likelihood ({len(test):,} sequences): AIS {ais_mean:.4f}, exact {exact_mean:.4f}")
    cv = reverse.control_variate_mean(log_f, log_f[:100])
    print(f"  RAISE (control variate over all test sequences) {cv.mean:.4f} +- {cv.stderr:.4f}")


def _save_npy(path, array) -> None:
    """numpy.save through an open file: given a path without .npy (the writer's temporary file), it adds one."""
    import numpy as np

    with open(path, "wb") as file:
        np.save(file, array)


def run(command: list[str]) -> dict:
    print("$", " ".join(command[1:]).replace("-m raise_eval", "raise-eval", 1))
    if subprocess.run(command).returncode not in (0, 3):
        raise SystemExit(1)
    return json.loads(Path(command[command.index("--json") + 1]).read_text())


def main(argv=None) -> int:
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    from _common import add_overwrite_argument, check_outputs_first, positive_int, write_output

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "runs" / "rbms"), help="folder of the files written")
    parser.add_argument("--data-root", default=os.environ.get("RAISE_EVAL_DATA", str(ROOT.parent / "shared" / "data")),
                        help="folder holding protein/PF00014_mgap6.fasta.gz ($RAISE_EVAL_DATA)")  # fmt: skip
    parser.add_argument("--updates", type=positive_int, default=200, help="training updates of each run")
    parser.add_argument("--hidden", type=positive_int, default=6, help="the Potts RBM's hidden units")
    parser.add_argument("--steps", type=positive_int, default=200, help="raise-eval's K (per link for a trajectory)")
    parser.add_argument("--seed", type=int, default=0)
    add_overwrite_argument(parser, "the .h5 runs, the .npy codes and the JSON reports under --out")
    args = parser.parse_args(argv)
    missing = [name for name in ("rbms", "h5py") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"{' and '.join(missing)} not installed (pip install rbms h5py): nothing to do")
        return 0
    out = Path(args.out)
    names = ("pbrbm.h5", "pbm.h5", "train.npy", "test.npy", "evaluate_pbrbm.json", "trajectory_pbrbm.json",
             "trajectory_pbm.json", "trajectory_pbrbm.png", "trajectory_pbm.png")  # fmt: skip
    files = {name: out / name for name in names}
    alignment = Path(args.data_root) / ALIGNMENT
    if not alignment.is_file():
        parser.error(f"{alignment} does not exist: give --data-root (or $RAISE_EVAL_DATA) the folder holding it")
    check_outputs_first(parser, [(f"--out {n}", p) for n, p in files.items()], [("the alignment", alignment)],
                        overwrite=args.overwrite)  # fmt: skip

    import torch

    torch.set_num_threads(1)
    train, test = load_columns(Path(args.data_root), args.seed)
    for name, codes in (("train.npy", train), ("test.npy", test)):
        write_output(files[name], lambda p, c=codes: _save_npy(p, c.numpy()), what=name)
    for name in ("pbrbm.h5", "pbm.h5"):  # rbms appends to an existing file: start from none
        files[name].unlink(missing_ok=True)
    start = time.perf_counter()
    train_potts_rbm(files["pbrbm.h5"], train, test, args.hidden, args.updates, 8, args.seed)
    print(f"Potts RBM ({len(COLUMNS)} x {Q} - {args.hidden}) trained by rbms: {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    from rbms.training.utils import get_checkpoints

    train_pbm(files["pbm.h5"], train, args.updates, set(get_checkpoints(args.updates, 8, "exp").tolist()), 2.0, 1e-3)
    print(f"PBM fitted, saved by rbms.io.save_model: {time.perf_counter() - start:.1f} s")
    read_and_check(files["pbrbm.h5"], files["pbm.h5"])
    pbm_sandwich(files["pbm.h5"], train, test, args.steps, args.seed)

    common = ["--train-data", str(files["train.npy"]), "--data", str(files["test.npy"]), "--threads", "1",
              "--no-progress", "--seed", str(args.seed)] + (["--overwrite"] if args.overwrite else [])  # fmt: skip
    python = [sys.executable, "-m", "raise_eval"]
    doc = run([*python, "evaluate", str(files["pbrbm.h5"]), "--steps", str(args.steps), *common, "--json",
               str(files["evaluate_pbrbm.json"])])  # fmt: skip
    print(f"Potts RBM, update_{doc['settings']['update']}: log Z AIS {doc['log_z']['ais']['estimate']:.4f} exact "
          f"{doc['log_z']['exact']:.4f}")  # fmt: skip
    for run_name in ("pbrbm", "pbm"):
        doc = run([*python, "trajectory", str(files[f"{run_name}.h5"]), "--steps", str(args.steps // 4), *common,
                   "--json", str(files[f"trajectory_{run_name}.json"]), "--plot",
                   str(files[f"trajectory_{run_name}.png"])])  # fmt: skip
        worst = max(abs(c["log_z"] - c["log_z_exact"]) / c["log_z_stderr"] for c in doc["checkpoints"])
        print(f"{run_name}: {len(doc['checkpoints'])} updates, largest |AIS - exact| log Z {worst:.1f} of its s.e.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
