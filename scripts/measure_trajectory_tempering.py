"""Parallel tempering along a training trajectory, measured against exact log Z: does replica exchange between
neighbouring points of the trajectory path (the approach of parallel trajectory tempering, arXiv 2607.27077) put
every checkpoint's log Z within 0.1 nats, where AIS and SMC along the trajectory do not (docs/trajectory.md)?

The ladder: every link of `trajectory_path` (an independent start with the training data's base rates, then the
checkpoints) split into --sub equal steps, one rung each, --chains chains per rung. A round: fresh exact samples at
rung 0, one block-Gibbs sweep at every other rung, then swaps of whole chains between neighbouring rungs (even pairs
in even rounds, odd pairs in odd rounds; Metropolis on the two log-density ratios, float64). After --burn rounds,
each round's forward and reverse log-ratios of every link (log f_{r+1}(x_r) - log f_r(x_r) and the reverse on rung
r + 1's chains: the swap statistics themselves) feed BAR (`estimators.bar.bennett`); log Z at a rung is the start's
exact log Z plus the sum of the links' BAR estimates below it, and its standard error is the spread over 5 blocks of
rounds. A prototype measurement (one Python loop over rungs, one thread), not a library estimator: BAR from
correlated, possibly unequilibrated samples is neither unbiased nor a bound.

    python scripts/measure_trajectory_tempering.py /tmp/pcd20 \
        --exact results/trajectory/rbm_mnist_pcd20_adaptive/exact.json --sub 4 --chains 50 --rounds 1500 --burn 300 \
        --json results/trajectory/rbm_mnist_pcd20_tempering/sub4_rounds1500.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from _common import add_overwrite_argument, check_outputs_first, positive_int, write_output

from raise_eval.estimators.bar import bennett
from raise_eval.evaluation.plan import _start_biases
from raise_eval.io.trajectory_files import TrajectoryInputSettings, load_trajectory_inputs
from raise_eval.paths.trajectory import trajectory_path

BLOCKS = 5  # blocks of rounds for the standard error


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a folder of one RBM run's checkpoints (step_*.pt)")
    parser.add_argument("--exact", type=Path, required=True,
                        help="JSON with the checkpoints' exact log Z ('log_z', null where unknown)")
    parser.add_argument("--data-root", default=None, help="folder holding binarized_mnist/ (for the base rates)")
    parser.add_argument("--sub", type=positive_int, default=4, help="rungs per link (default 4)")
    parser.add_argument("--chains", type=positive_int, default=50, help="chains per rung (default 50)")
    parser.add_argument("--rounds", type=positive_int, default=1000, help="rounds of sweeps and swaps (default 1000)")
    parser.add_argument("--burn", type=int, default=200, help="rounds before the ratios are recorded (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    add_overwrite_argument(parser, "--json's file")
    args = parser.parse_args(argv)
    if not 0 <= args.burn <= args.rounds - BLOCKS:
        parser.error(f"--burn must be in [0, --rounds - {BLOCKS}]")
    check_outputs_first(parser, [("--json", args.json)] if args.json else [], inputs=[("--exact", args.exact)],
                        overwrite=args.overwrite)  # fmt: skip
    return args


def swap_chains(path, states: list, r: int, swap: torch.Tensor) -> None:
    """Exchange the visible states of the chains `swap` (M,) between rungs r and r + 1, in `states`."""
    a, b = states[r].layers[0], states[r + 1].layers[0]
    mask = swap.unsqueeze(-1)
    states[r] = path.state_from_layers([torch.where(mask, b, a), None])
    states[r + 1] = path.state_from_layers([torch.where(mask, a, b), None])


def temper(path, betas: list, chains: int, rounds: int, burn: int, generator: torch.Generator):
    """(forward, reverse) log-ratios of every link, float64 (R - 1, (rounds - burn) chains), and each link's mean
    swap acceptance (R - 1,)."""
    size = len(betas)
    states = [path.sample_initial(chains, generator) for _ in range(size)]
    forward, reverse = [[] for _ in range(size - 1)], [[] for _ in range(size - 1)]
    accepted = torch.zeros(size - 1, dtype=torch.float64)
    for t in range(rounds):
        states[0] = path.sample_initial(chains, generator)
        for r in range(1, size):
            states[r] = path.transition(states[r], betas[r], generator)
        w = [path.log_density_ratio(states[r], betas[r], betas[r + 1]) for r in range(size - 1)]
        v = [path.log_density_ratio(states[r + 1], betas[r + 1], betas[r]) for r in range(size - 1)]
        if t >= burn:
            for r in range(size - 1):
                forward[r].append(w[r])
                reverse[r].append(v[r])
        for r in range(t % 2, size - 1, 2):
            u = torch.rand(chains, generator=generator, dtype=torch.float64)
            swap = torch.log(u) < w[r] + v[r]
            accepted[r] += swap.double().mean()
            swap_chains(path, states, r, swap)
    swaps_per_link = torch.tensor([len(range(r % 2, rounds, 2)) for r in range(size - 1)], dtype=torch.float64)
    forward, reverse = torch.stack([torch.cat(f) for f in forward]), torch.stack([torch.cat(b) for b in reverse])
    return forward, reverse, accepted / swaps_per_link


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    inputs = TrajectoryInputSettings(folder=args.folder, data=None, data_root=args.data_root, dtype="float64")
    loaded = load_trajectory_inputs(inputs, "base-rates")
    models = loaded.models
    exact = json.loads(args.exact.read_text())["log_z"]
    if len(exact) != len(models):
        raise SystemExit(f"{args.exact} has {len(exact)} exact values for {len(models)} checkpoints")
    path = trajectory_path(models, _start_biases(models[-1], "RBM", "base-rates", loaded.train_pixel_means))
    links = path.num_links
    betas = sorted({(i + j / args.sub) / links for i in range(links) for j in range(args.sub)} | {1.0})
    knot_rungs = [betas.index(k) for k in path.knots]
    began = time.perf_counter()
    forward, reverse, swap_rate = temper(path, betas, args.chains, args.rounds, args.burn,
                                         torch.Generator().manual_seed(args.seed))  # fmt: skip
    seconds = time.perf_counter() - began
    zero = torch.zeros(1, dtype=torch.float64)
    log_z = path.log_partition_initial + torch.cat([zero, bennett(forward, reverse).cumsum(0)])
    n = forward.shape[1] // BLOCKS
    blocks = torch.stack([torch.cat([zero, bennett(forward[:, k * n:(k + 1) * n],
                                                   reverse[:, k * n:(k + 1) * n]).cumsum(0)]) for k in range(BLOCKS)])
    stderr = blocks.std(0) / math.sqrt(BLOCKS)
    points = path.checkpoint_points
    estimates = [float(log_z[knot_rungs[p]]) for p in points]
    known = [i for i, x in enumerate(exact) if x is not None]  # the checkpoints whose exact log Z is in --exact
    errors = [estimates[i] - exact[i] for i in known]
    ses = [float(stderr[knot_rungs[points[i]]]) for i in known]
    link_swap = [float(swap_rate[i * args.sub:(i + 1) * args.sub].min()) for i in range(links)]
    result = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "seconds": seconds,
        "rungs": len(betas), "steps": loaded.steps, "estimates": estimates,
        "compared_steps": [loaded.steps[i] for i in known], "errors": errors, "stderr": ses,
        "mean_abs": sum(map(abs, errors)) / len(errors), "max_abs": max(map(abs, errors)),
        "within_0.1": sum(abs(e) <= 0.1 for e in errors),
        "within_2se": sum(abs(e) <= 2 * s for e, s in zip(errors, ses)),
        "min_swap_per_link": link_swap, "min_swap": min(link_swap),
    }  # fmt: skip
    print(f"{len(betas)} rungs x {args.chains} chains, {args.rounds} rounds: {seconds:.1f} s; log Z minus exact over "
          f"{len(errors)} checkpoints: mean abs {result['mean_abs']:.2f}, max abs {result['max_abs']:.2f}, "
          f"{result['within_0.1']} within 0.1, {result['within_2se']} within 2 s.e.; least swap rate "
          f"{result['min_swap']:.3f}")  # fmt: skip
    print("errors:", " ".join(f"{e:+.2f}" for e in errors))
    print("least swap rate per link:", " ".join(f"{s:.2f}" for s in link_swap))
    if args.json:
        write_output(args.json, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
