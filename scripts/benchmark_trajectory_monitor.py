"""The training hook's overhead: training time with the tracking monitor (`LikelihoodMonitor(..., track=...)`) against
no monitor and against the full-sandwich monitor at the same interval, measured in one run.

The same RBM training (binarized MNIST, CD-1, the seed fixed) runs with no monitor, with the tracking monitor (its
persistent chains advanced by `TrackSettings.steps` sub-steps per call, RAISE along the trajectory and the verdict
at `final()`), and with the monitor's full evaluation (AIS and RAISE from scratch, `MONITOR_EVALUATION`) at every
call, `every` epochs apart. Runs are interleaved (off, track, full, off, ...) --repeats times and the fastest of
each kind is kept. Both monitors skip exact enumeration by default (--exact never) so that the comparison is of the
estimators; their logs of log Z go to --out.

    python scripts/benchmark_trajectory_monitor.py [--epochs 10] [--hidden 20] [--every 1] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm

from raise_eval import LikelihoodMonitor
from raise_eval.integrations.hooks import MONITOR_EVALUATION
from raise_eval.io.datasets import load_dataset
from raise_eval.trajectory import TrackSettings
from _common import add_overwrite_argument, check_outputs_first, write_output


def run(kind: str, train, test, args) -> tuple[float, LikelihoodMonitor]:
    common = dict(every=args.every, init="base-rates", train_pixel_means=train.mean(0), exact=args.exact, seed=0)
    monitor = None
    if kind == "track":
        monitor = LikelihoodMonitor(test, track=TrackSettings(chains=args.chains, steps=args.track_steps), **common)
    elif kind == "full":
        monitor = LikelihoodMonitor(test, **common)
    config = RBMTrainingConfig(args.hidden, epochs=args.epochs, learning_rate=0.05, method="cd")
    start = time.perf_counter()
    model = train_rbm(train, config, generator=torch.Generator().manual_seed(0), callback=monitor)
    if monitor is not None:
        monitor.final(args.epochs - 1, model)
    return time.perf_counter() - start, monitor


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--every", type=int, default=1, help="epochs between the monitors' calls")
    parser.add_argument("--train-size", type=int, default=None, help="the first N training vectors (default: all)")
    parser.add_argument("--test-size", type=int, default=1000, help="the monitors' test vectors (a fixed subset)")
    parser.add_argument("--chains", type=int, default=TrackSettings().chains, help="the tracking monitor's chains")
    parser.add_argument("--track-steps", type=int, default=TrackSettings().steps, help="its sub-steps per call")
    parser.add_argument("--exact", choices=["auto", "never"], default="never")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--out", default=None, help="a JSON file for the times and the monitors' histories")
    add_overwrite_argument(parser, "the --out file")
    args = parser.parse_args(argv)
    outputs = [("--out", args.out)] if args.out else []
    check_outputs_first(parser, outputs, (), args.overwrite)

    torch.set_num_threads(args.threads)
    train = load_dataset("binarized_mnist", "train", args.data_root)
    if args.train_size is not None:
        train = train[: args.train_size]
    test = load_dataset("binarized_mnist", "test", args.data_root)
    test = test[torch.randperm(len(test), generator=torch.Generator().manual_seed(0))[: args.test_size]]
    e = MONITOR_EVALUATION
    print(
        f"784-{args.hidden} RBM, CD-1, {args.epochs} epochs on {len(train):,} vectors; monitors every {args.every} "
        f"epoch(s) on {len(test)} test vectors, exact {args.exact}; tracking: {args.chains} chains x "
        f"{args.track_steps} sub-steps per call, RAISE {e.raise_examples} x {e.raise_chains} at final(); full: "
        f"K = {e.steps}, {e.ais_chains} AIS chains, RAISE {e.raise_examples} x {e.raise_chains} per call; torch "
        f"threads {torch.get_num_threads()}",
        flush=True,
    )
    times: dict[str, list[float]] = {"off": [], "track": [], "full": []}
    monitors = {}
    for repeat in range(args.repeats):
        for kind in times:
            seconds, monitor = run(kind, train, test, args)
            times[kind].append(seconds)
            monitors[kind] = monitor
            print(f"repeat {repeat + 1}: {kind:5} {seconds:7.2f} s", flush=True)
    best = {k: min(v) for k, v in times.items()}
    track_over, full_over = best["track"] - best["off"], best["full"] - best["off"]
    print()
    print(f"{'':24}{'seconds':>9}{'x off':>8}")
    for kind, label in (("off", "no monitor"), ("track", "tracking monitor"), ("full", "full-sandwich monitor")):
        print(f"{label:24}{best[kind]:9.2f}{best[kind] / best['off']:8.2f}")
    print(
        f"monitor overhead: tracking {track_over:.2f} s, full {full_over:.2f} s; tracking / full overhead = "
        f"{track_over / full_over:.3f}; tracking / full training time = {best['track'] / best['full']:.3f}"
    )
    last_track, last_full = monitors["track"].history[-1], monitors["full"].history[-1]
    print(
        f"final model: tracking log Z {last_track.log_z:.3f} ± {last_track.log_z_stderr:.3f} (verdict "
        f"{last_track.verdict}, RAISE {last_track.raise_:.3f}), full log Z {last_full.log_z:.3f} (AIS "
        f"{last_full.ais:.3f}, RAISE {last_full.raise_:.3f})"
    )
    if args.out:
        write_output(
            args.out,
            json.dumps(
                {
                    "args": vars(args),
                    "seconds": times,
                    "best": best,
                    "track_history": [r.to_dict() for r in monitors["track"].history],
                    "full_history": [r.to_dict() for r in monitors["full"].history],
                },
                indent=1,
                default=str,
            ),
            what="the results",
        )
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
