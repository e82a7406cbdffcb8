"""Compare annealing schedules (linear, Salakhutdinov's, adaptive) on one checkpoint at equal K and equal wall time.

For every K in --steps, one `raise_eval.evaluate` run per schedule (AIS log Z and the AIS and RAISE average test
log-likelihoods, the same --seed for every run). The gap AIS - RAISE says how far the sandwich is from closing:
the better schedule closes it with less computation (read it with the AIS ESS column: with a few effective chains
AIS can land below the truth and the gap looks small or negative). Equal K compares the schedules step for step;
but the adaptive schedule also pays for its pilot run, so each fixed schedule is run a second time at
K' = K x (adaptive's total time / its own time at K), the K it can afford in the adaptive run's wall time (equal
wall time). Wall times are measured in this run, on a shared machine: compare them within the run.

Outputs in --out (default results/schedules): results.json (every run), table.md, and gap_vs_time.png (the gap
against K at equal K, and against wall time for every run). --from-json redraws the figure from a results.json.

    python scripts/compare_schedules.py      # the Grosse/Salakhutdinov MNIST RBM of ../shared/data, K 100 to 3000
    python scripts/compare_schedules.py --checkpoint checkpoints/rbm_digits_64-16.pt --data digits --steps 100 300
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from _common import add_overwrite_argument, check_outputs_first, write_output
from tqdm.auto import tqdm

from raise_eval import evaluate, load_checkpoint
from raise_eval.io.datasets import DATASET_SPECS, load_dataset
from raise_eval.runtime.threads import default_threads

DEFAULT_CHECKPOINT = "../shared/data/checkpoints/rbm_mnist_sgd_grosse_salakhutdinov_2015.npz"
FIXED = ("linear", "salakhutdinov")


def one_run(model, test, means, schedule: str, steps: int, args, log_f) -> tuple[dict, object]:
    start = time.perf_counter()
    report = evaluate(
        model,
        test,
        init="base-rates",
        train_pixel_means=means,
        schedule=schedule,
        steps=steps,
        ais_chains=args.ais_chains,
        raise_examples=args.raise_examples,
        raise_chains=args.raise_chains,
        seed=args.seed,
        exact="never",
        log_f=log_f,
    )
    seconds = time.perf_counter() - start
    timing = report.timing
    row = {
        "schedule": schedule,
        "steps": steps,
        "ais": report.ais_mean,
        "ais_stderr": float(report.ais.stderr),
        "raise": report.raise_mean,
        "raise_stderr": report.raise_stderr,
        "gap": report.gap,
        "ais_ess": float(report.ais.ess),
        "log_z": report.ais.estimate,
        "seconds": seconds,
        "pilot_seconds": timing.get("pilot_seconds") or 0.0,
    }
    return row, report.log_f


def markdown(rows: list[dict], args) -> str:
    lines = [
        f"# Schedules compared on {args.checkpoint}",
        "",
        f"Data {args.data} (test split); base-rate start; {args.ais_chains} AIS chains, {args.raise_examples} test "
        f"vectors x {args.raise_chains} RAISE chains (control variate log f(v)); seed {args.seed}; "
        f"torch threads: {torch.get_num_threads()}. Average test log-likelihood in nats, ± one standard error; "
        "gap = AIS - RAISE. 'equal time' rows run a fixed schedule at the K it affords in the adaptive run's "
        "wall time (pilot included).",
        "",
        "| comparison | schedule | K | AIS | RAISE | gap | AIS ESS | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['comparison']} | {r['schedule']} | {r['steps']} | {r['ais']:.2f} ± {r['ais_stderr']:.2f} | "
            f"{r['raise']:.2f} ± {r['raise_stderr']:.2f} | {r['gap']:.2f} | {r['ais_ess']:.0f} | {r['seconds']:.2f} |"
        )
    lines += ["", f"Command: `python {' '.join(sys.argv)}`", ""]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> bool:
    """Two panels: the gap against K at equal K, and against wall time for every run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter, ScalarFormatter
    except ImportError:
        tqdm.write("matplotlib is not installed: no figure (pip install matplotlib)")
        return False
    fig, (by_k, by_time) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    positive = all(r["gap"] > 0 for r in rows)
    for i, schedule in enumerate(("linear", "salakhutdinov", "adaptive")):
        mine = [r for r in rows if r["schedule"] == schedule]
        same_k = sorted((r["steps"], r["gap"]) for r in mine if r["comparison"] == "equal K")
        by_k.plot(*zip(*same_k), "o-", color=f"C{i}", label=schedule)
        by_time.plot(
            [r["seconds"] for r in mine], [r["gap"] for r in mine], "o", color=f"C{i}", label=schedule, alpha=0.8
        )
    for ax, label in ((by_k, "K (annealing steps)"), (by_time, "wall time (s), every run")):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        if positive:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    by_k.set_ylabel("gap AIS - RAISE (nats)")
    by_k.set_title("equal K")
    by_time.set_title("against wall time (equal-time runs included)")
    by_k.legend()
    fig.tight_layout()
    write_output(path, lambda p: fig.savefig(p, format="png", dpi=120), what="the figure")
    plt.close(fig)
    return True


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--checkpoint",
        default=DEFAULT_CHECKPOINT,
        help=f"an RBM, DBM or DBN checkpoint (default: {DEFAULT_CHECKPOINT})",
    )
    p.add_argument(
        "--data",
        default="binarized_mnist",
        choices=sorted(DATASET_SPECS),
        help="its dataset (default: binarized_mnist)",
    )
    p.add_argument("--data-root", default=None, help="where the datasets are (default ../shared/data)")
    p.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=[100, 300, 1000, 3000],
        help="the K to compare at (default: 100 300 1000 3000)",
    )
    p.add_argument("--ais-chains", type=int, default=1000, help="AIS chains per run (default: 1000)")
    p.add_argument("--raise-examples", type=int, default=100, help="test vectors RAISE runs on (default: 100)")
    p.add_argument("--raise-chains", type=int, default=20, help="RAISE chains per test vector (default: 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of every run (default: 0)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the idle cores)")
    p.add_argument("--out", default="results/schedules", help="output folder")
    p.add_argument(
        "--from-json",
        metavar="FILE",
        help="redraw the figure from a results.json of an earlier run into --out (nothing is computed)",
    )
    add_overwrite_argument(p, "results.json, table.md and gap_vs_time.png in --out")
    args = p.parse_args(argv)
    out = Path(args.out)
    if not args.from_json and not Path(args.checkpoint).exists():
        p.error(f"checkpoint {args.checkpoint} does not exist")
    # Before any work: the files written in --out (only the figure with --from-json), never an input.
    names = ["gap_vs_time.png"] if args.from_json else ["results.json", "table.md", "gap_vs_time.png"]
    inputs = [("--from-json", args.from_json)] if args.from_json else [("the checkpoint", args.checkpoint)]
    check_outputs_first(p, [("--out", out / name) for name in names], inputs, args.overwrite)
    if args.from_json:
        rows = json.loads(Path(args.from_json).read_text())
        drew = plot(rows, out / "gap_vs_time.png")
        print(f"redrew {out / 'gap_vs_time.png'}" if drew else "no figure")
        return
    if min(args.steps) < 1:
        p.error("--steps must be positive")
    torch.set_num_threads(args.threads or default_threads(torch.get_num_threads()))

    ckpt = load_checkpoint(args.checkpoint)
    test = load_dataset(args.data, "test", args.data_root)
    means = ckpt.train_pixel_means
    if means is None:
        means = load_dataset(args.data, "train", args.data_root).mean(0)
    rows: list[dict] = []
    log_f = None
    bar = tqdm(total=len(args.steps) * 5, desc="schedule runs")
    for k in sorted(args.steps):
        adaptive, log_f = one_run(ckpt.model, test, means, "adaptive", k, args, log_f)
        rows.append({"comparison": "equal K", **adaptive})
        bar.update(1)
        for schedule in FIXED:
            row, log_f = one_run(ckpt.model, test, means, schedule, k, args, log_f)
            rows.append({"comparison": "equal K", **row})
            bar.update(1)
            k_equal = max(1, round(k * adaptive["seconds"] / row["seconds"]))
            row, log_f = one_run(ckpt.model, test, means, schedule, k_equal, args, log_f)
            rows.append({"comparison": f"equal time (adaptive K={k})", **row})
            bar.update(1)
        write_output(out / "results.json", json.dumps(rows, indent=1), what="the results")
    bar.close()
    write_output(out / "table.md", markdown(rows, args), what="the table")
    drew = plot(rows, out / "gap_vs_time.png")
    print(markdown(rows, args))
    print(f"wrote {out / 'results.json'}, {out / 'table.md'}" + (f", {out / 'gap_vs_time.png'}" if drew else ""))


if __name__ == "__main__":
    main()
