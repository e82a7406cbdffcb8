"""The training hook on an energy-based model: a small 2-D EBM trained with short-run Langevin, its AIS/RAISE sandwich
logged every few epochs by `raise_eval.LikelihoodMonitor`, against the truth.

    python scripts/examples/energy_monitor.py [--out runs/energy_monitor] [--epochs 8] [--every 2] [--overwrite]

1. Makes its data: a mixture of four Gaussians on the box [-4, 4]^2 (training and test examples, seeded).
2. Trains an MLP energy E(x) (2-64-64-1, SiLU) by contrastive divergence: each batch's negatives are 30 steps of
   Langevin dynamics from uniform noise on the box (short-run MCMC, Nijkamp et al. 2019), with a small penalty on the
   energies' squares (Du & Mordatch 2019). One CPU thread, a few seconds.
3. Every --every epochs (and after the last) the monitor runs `evaluate_energy` on the test examples: AIS's
   log f(v) - log Z-hat (optimistic) and RAISE (conservative), and the truth: in two dimensions on a box, log Z by the
   midpoint rule on a fine grid (`grid_log_z`, --grid-points per side; its difference from the grid of twice the
   spacing is printed beside it: the rule's error, O(spacing^2), is about a third of it), the exact average test
   log-likelihood mean(-E(x_test)) - log Z.

Writes history.csv (one row per record) and, with matplotlib, sandwich.png under --out.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
BOX = 4.0  # the support: [-BOX, BOX]^2
CENTRES = ((1.5, 1.5), (1.5, -1.5), (-1.5, 1.5), (-1.5, -1.5))
SPREAD = 0.4  # each mixture component's standard deviation
GRID_POINTS = 801  # per side of the midpoint rule's grid


class MLPEnergy(torch.nn.Module):
    """E(x): (N, 2) -> (N,)."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(2, width), torch.nn.SiLU(), torch.nn.Linear(width, width), torch.nn.SiLU(),
            torch.nn.Linear(width, 1),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def make_data(n: int, generator: torch.Generator) -> torch.Tensor:
    """n examples (n, 2) of the mixture, clamped to the box."""
    centres = torch.tensor(CENTRES)[torch.randint(len(CENTRES), (n,), generator=generator)]
    return (centres + SPREAD * torch.randn(n, 2, generator=generator)).clamp(-BOX, BOX)


def langevin(energy: MLPEnergy, x: torch.Tensor, steps: int, step_size: float, generator) -> torch.Tensor:
    """`steps` Langevin steps x <- x - step_size grad E(x) + sqrt(2 step_size) noise, kept in the box."""
    for _ in range(steps):
        x = x.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(energy(x).sum(), x)
        noise = torch.randn(x.shape, generator=generator)
        x = (x - step_size * grad + math.sqrt(2 * step_size) * noise).clamp(-BOX, BOX)
    return x.detach()


def grid_log_z(energy: MLPEnergy, points: int = GRID_POINTS) -> float:
    """log Z = log of the integral of exp(-E) over the box, by the midpoint rule on points x points cells."""
    h = 2 * BOX / points
    axis = -BOX + h * (torch.arange(points, dtype=torch.float64) + 0.5)
    grid = torch.cartesian_prod(axis, axis).to(torch.float32)
    with torch.no_grad():
        log_f = torch.cat([-energy(chunk).double() for chunk in grid.split(65536)])
    return float(torch.logsumexp(log_f, 0)) + 2 * math.log(h)


def main(argv=None) -> int:
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))  # the scripts' shared output checks (_common)
    from _common import add_overwrite_argument, check_outputs_first, positive_int

    from raise_eval import EnergyModel, LikelihoodMonitor
    from raise_eval.evaluation.energy import EnergySettings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "runs" / "energy_monitor"), help="folder of the files written")
    parser.add_argument("--epochs", type=positive_int, default=8, help="training epochs")
    parser.add_argument("--batches", type=positive_int, default=20, help="batches of 128 per epoch")
    parser.add_argument("--every", type=positive_int, default=2, help="evaluate every this many epochs")
    parser.add_argument("--steps", type=positive_int, default=200, help="the evaluation's K")
    parser.add_argument("--test-size", type=positive_int, default=100, help="test examples (RAISE runs from each)")
    parser.add_argument("--grid-points", type=positive_int, default=GRID_POINTS, help="per side of the truth's grid")
    parser.add_argument("--seed", type=int, default=0, help="the data's, the training's and the evaluation's seed")
    add_overwrite_argument(parser, "history.csv and sandwich.png under --out")
    args = parser.parse_args(argv)
    out = Path(args.out)
    plot = importlib.util.find_spec("matplotlib") is not None
    files = {"history.csv": out / "history.csv", **({"sandwich.png": out / "sandwich.png"} if plot else {})}
    check_outputs_first(parser, [(f"--out {name}", path) for name, path in files.items()], overwrite=args.overwrite)

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)  # the MLP's initial weights
    train, test = make_data(2000, generator), make_data(args.test_size, generator)
    energy = MLPEnergy()
    model = EnergyModel(energy, support=("real", -BOX, BOX), event_shape=(2,))
    settings = EnergySettings(steps=args.steps, ais_chains=64, raise_chains=4, pilot_steps=50, seed=args.seed)
    monitor = LikelihoodMonitor(
        test, energy=settings, every=args.every, train_data=train,
        exact_log_z=lambda m: grid_log_z(m.energy, args.grid_points),
        history_path=files["history.csv"], plot_path=files.get("sandwich.png"),
    )  # fmt: skip
    optimizer = torch.optim.Adam(energy.parameters(), lr=3e-3)

    def show(rec) -> None:
        coarser = grid_log_z(energy, (args.grid_points + 1) // 2)
        warned = f" [{', '.join(rec.warnings)}]" if rec.warnings else ""
        grid = f"grid log Z {rec.log_z_exact:.5f}, {abs(coarser - rec.log_z_exact):.1e} from the coarser grid's"
        print(f"epoch {rec.epoch}: AIS {rec.ais:.4f} +- {rec.ais_se:.4f}, RAISE {rec.raise_:.4f} +- "
              f"{rec.raise_se:.4f}, gap {rec.gap:.4f}; exact {rec.exact:.4f} ({grid}){warned} ({rec.seconds:.1f} s)",
              flush=True)  # fmt: skip

    start = time.perf_counter()
    for epoch in range(args.epochs):
        for _ in range(args.batches):
            batch = train[torch.randint(len(train), (128,), generator=generator)]
            negatives = langevin(energy, torch.rand(128, 2, generator=generator) * 2 * BOX - BOX, 30, 0.05, generator)
            positive, negative = energy(batch), energy(negatives)
            loss = positive.mean() - negative.mean() + 0.1 * (positive.square().mean() + negative.square().mean())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        last = epoch == args.epochs - 1
        rec = monitor.final(epoch, model) if last else monitor(epoch, model)
        if rec is not None:
            show(rec)
    report = monitor.last_report
    print(f"{args.epochs} epochs in {time.perf_counter() - start:.1f} s (evaluations included), one thread")
    interval = f", interval [{report.interval[0]:.4f}, {report.interval[1]:.4f}]" if report.interval else ""
    print(f"last evaluation's verdict (tolerance {report.settings['tolerance']:g} nats): {report.verdict}{interval}")
    for reason in report.reasons:
        print(f"  - {reason}")
    print(f"wrote {', '.join(str(p) for p in files.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
