"""A 2-D energy-based model trained by torchebm's own recipe, evaluated by raise-eval, checked against the truth.

    pip install torchebm && python scripts/examples/torchebm_2d.py [--out runs/torchebm_2d] [--overwrite]

1. Trains torchebm's README example (an MLP energy, contrastive divergence with 10 Langevin steps, Adam, 1,000
   batches of 256) on its two-moons data set, one CPU thread, and saves the energy's state_dict with the training and
   test examples (.npy) under --out.
2. Runs `raise-eval evaluate --model examples/torchebm_2d_factory.py:make` on them (AIS and RAISE).
3. Computes the truth in two dimensions: log Z by summing exp(-E) over grids of growing width and shrinking
   spacing (each grid's difference from the last is printed: it must be far below AIS's standard error), then the
   exact average test log-likelihood mean(-E(x_test)) - log Z.

Without torchebm it says so and exits 0. Nothing is downloaded: torchebm generates the data itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FACTORY = ROOT / "examples" / "torchebm_2d_factory.py"
# (half-width, points per side) of the integration grids around the data's centre: wider and finer in turn
GRIDS = ((3.0, 601), (3.0, 1201), (6.0, 1201), (12.0, 2401))


def train(iterations: int, n_test: int, seed: int):
    """torchebm's README recipe for contrastive divergence on two moons; returns the energy, train (3000, 2) and
    test (n_test, 2) examples."""
    import torch
    from torch import nn
    from torchebm.core import BaseModel
    from torchebm.datasets import TwoMoonsDataset
    from torchebm.losses import ContrastiveDivergence
    from torchebm.samplers import LangevinDynamics

    class MLPEnergy(BaseModel):  # E(x): (b, 2) -> (b,)
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(2, 128), nn.SiLU(), nn.Linear(128, 1))

        def forward(self, x):
            return self.net(x).squeeze(-1)

    torch.manual_seed(seed)  # torchebm's samplers draw from the global generator
    data = TwoMoonsDataset(n_samples=3000, noise=0.05, seed=seed).get_data()
    test = TwoMoonsDataset(n_samples=n_test, noise=0.05, seed=seed + 1).get_data()
    energy = MLPEnergy()
    sampler = LangevinDynamics(model=energy, step_size=0.1, noise_scale=1.0)
    cd = ContrastiveDivergence(model=energy, sampler=sampler, k_steps=10)
    opt = torch.optim.Adam(energy.parameters(), lr=1e-3)
    for _ in range(iterations):
        loss, _negatives = cd(data[torch.randint(len(data), (256,))])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return energy.eval(), data, test


def grid_log_z(energy, centre, half_width: float, points: int) -> float:
    """log of the sum of exp(-E) times the cell area over a square grid (points x points) around `centre` (2,), in
    float64, a row at a time."""
    import torch

    xs = torch.linspace(-half_width, half_width, points, dtype=torch.float64) + centre[0]
    ys = torch.linspace(-half_width, half_width, points, dtype=torch.float64) + centre[1]
    rows = []
    with torch.no_grad():
        for chunk in xs.split(256):
            grid = torch.stack(torch.meshgrid(chunk, ys, indexing="ij"), -1).reshape(-1, 2)
            rows.append(torch.logsumexp(-energy(grid), 0))
    cell = float(xs[1] - xs[0]) * float(ys[1] - ys[0])
    return float(torch.logsumexp(torch.stack(rows), 0)) + math.log(cell)


def _save_npy(path, array) -> None:
    """numpy.save through an open file: given a path without .npy (the writer's temporary file), it adds one."""
    import numpy as np

    with open(path, "wb") as file:
        np.save(file, array)


def main(argv=None) -> int:
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))  # the scripts' shared output checks (_common)
    from _common import add_overwrite_argument, check_outputs_first, positive_int, write_output

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "runs" / "torchebm_2d"), help="folder of the files written")
    parser.add_argument("--iterations", type=positive_int, default=1000, help="training batches (its README: 1000)")
    parser.add_argument("--test-size", type=positive_int, default=200, help="test examples (RAISE time grows with it)")
    parser.add_argument("--steps", type=positive_int, default=1000, help="raise-eval's --steps K")
    parser.add_argument("--seed", type=int, default=0, help="training, data and raise-eval seed")
    add_overwrite_argument(parser, "the state_dict, the .npy files and the JSON report under --out")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("torchebm") is None:
        print("torchebm is not installed (pip install torchebm): nothing to do")
        return 0
    out = Path(args.out)
    files = {name: out / name for name in ("energy.pt", "train.npy", "test.npy", "report.json")}
    check_outputs_first(parser, [(f"--out {name}", path) for name, path in files.items()], overwrite=args.overwrite)

    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    energy, train_data, test_data = train(args.iterations, args.test_size, args.seed)
    trained = time.perf_counter() - start
    write_output(files["energy.pt"], lambda path: torch.save(energy.state_dict(), path), what="the energy")
    for name, x in (("train.npy", train_data), ("test.npy", test_data)):
        write_output(files[name], lambda path, x=x: _save_npy(path, x.numpy()), what=name)
    print(f"trained in {trained:.1f} s ({args.iterations} batches, one thread); wrote {out}")

    command = [sys.executable, "-m", "raise_eval", "evaluate", "--model", f"{FACTORY}:make",
               "--data", str(files["test.npy"]), "--train-data", str(files["train.npy"]), "--steps", str(args.steps),
               "--seed", str(args.seed), "--threads", "1", "--no-progress",
               "--json", str(files["report.json"])]  # fmt: skip
    if args.overwrite:
        command.append("--overwrite")
    print("$", " ".join(command[1:]).replace("-m raise_eval", "raise-eval", 1))
    start = time.perf_counter()
    env = dict(os.environ, TORCHEBM_2D_WEIGHTS=str(files["energy.pt"]))
    if subprocess.run(command, env=env).returncode != 0:
        return 1
    evaluated = time.perf_counter() - start
    report = json.loads(files["report.json"].read_text())

    energy = energy.double()
    centre = train_data.double().mean(0)
    start = time.perf_counter()
    log_zs = [grid_log_z(energy, centre, half, points) for half, points in GRIDS]
    integrated = time.perf_counter() - start
    log_z = log_zs[-1]
    for (half, points), grid_z in zip(GRIDS, log_zs):
        spacing = 2 * half / (points - 1)
        print(f"grid {points}x{points} over +-{half:g} (spacing {spacing:.4f}): log Z {grid_z:.5f} "
              f"({grid_z - log_z:+.1e} from the last)")  # fmt: skip
    with torch.no_grad():
        exact = float(-energy(test_data.double()).mean()) - log_z
    print(f"numerical integration: {integrated:.1f} s")
    if abs(log_zs[-1] - log_zs[-2]) > 1e-3:  # mass beyond the grids: the "exact" column would be wrong
        print(f"warning: the two widest grids differ by {log_zs[-1] - log_zs[-2]:+.1e} in log Z; the energy has mass "
              "outside them, so the exact values below are not exact: widen GRIDS")  # fmt: skip
    print(f"\n{'':32}{'raise-eval':>20}{'exact (grid)':>14}")
    rows = [("log Z", "log_z", "log_z_stderr", log_z), ("test log-lik., AIS (optimistic)", "upper_mean",
            "upper_stderr", exact), ("test log-lik., RAISE (conserv.)", "lower_mean", "lower_stderr", exact),
            ("gap (AIS - RAISE)", "gap", "gap_stderr", None)]  # fmt: skip
    for label, key, stderr, truth in rows:
        shown = "" if truth is None else f"{truth:>14.4f}"
        print(f"{label:32}{report[key]:>11.4f} +- {report[stderr]:.4f}{shown}")
    print(f"raise-eval took {evaluated:.1f} s (K = {args.steps}, {len(report['upper'])} test examples, one thread)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
