"""Log Z along a training run against exact values: AIS along the trajectory, BAR between its checkpoints, and AIS
along the temperature path of every checkpoint separately, at equal total cost.

For a folder of one run's checkpoints (`--save-trajectory` of the training scripts) whose every checkpoint is small
enough to enumerate (an RBM with about 20 hidden units, a DBM with a narrow first hidden layer):

- exact log Z of every checkpoint (`raise_eval.exact`), computed once;
- for each K in --steps: `evaluate_trajectory` (one AIS pass with K sub-steps per link and M chains, BAR from the
  same chains, RAISE at a few checkpoints), and per-checkpoint temperature AIS (the geometric path from the same
  start to each checkpoint, M chains) at equal total steps (the pass's steps shared equally among the checkpoints)
  and at equal wall time (the K each checkpoint affords in the pass's wall time, BAR's solve included);
- errors against the exact values: mean, largest and RMS |error| over the checkpoints, the mean error (AIS errs
  low), the mean reported standard error and the share of checkpoints within 2 of them, wall times;
- the last K's verdict on the final checkpoint: its certified interval against the exact log-likelihood.

Outputs in --out: results.json (every number), table.md, errors.png (each method's error against the training step at
the largest K) and trajectory.png (`raise-eval trajectory`'s plot at the largest K). Wall times are measured in this
run, one thread by default: compare them within the run.

    python scripts/compare_trajectory.py runs/rbm20 --steps 10 30 100 --out results/trajectory/rbm_mnist_20
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from _common import add_overwrite_argument, check_outputs_first, write_output

from raise_eval import exact
from raise_eval.estimators.ais import ais
from raise_eval.evaluation.plan import _start_biases
from raise_eval.io.outputs import OutputWriteError
from raise_eval.io.results import dump_json
from raise_eval.io.trajectory_files import TrajectoryInputSettings, list_trajectory, load_trajectory_inputs
from raise_eval.paths.boltzmann import BoltzmannPath
from raise_eval.schedules import linear_schedule
from raise_eval.trajectory import evaluate_trajectory


def temperature_ais(models, base, steps: int, chains: int, seed: int) -> tuple[list[float], list[float], float]:
    """(log Z-hat, standard error) of every checkpoint by AIS along its own geometric path (linear schedule, `steps`
    steps, `chains` chains), and the seconds of all of them."""
    start = time.perf_counter()
    estimates, errors = [], []
    for i, model in enumerate(models):
        path = BoltzmannPath(model, base)
        result = ais(path, linear_schedule(steps), chains, generator=torch.Generator().manual_seed(seed + 1000 + i))
        estimates.append(result.estimate)
        errors.append(float(result.stderr))
    return estimates, errors, time.perf_counter() - start


def summary(name: str, k_label: str, estimates, errors, truth, seconds: float, steps: int) -> dict:
    err = [e - t for e, t in zip(estimates, truth)]
    n = len(err)
    return {
        "method": name,
        "k": k_label,
        "total_steps": steps,
        "mean_abs_error": sum(abs(x) for x in err) / n,
        "max_abs_error": max(abs(x) for x in err),
        "rms_error": math.sqrt(sum(x * x for x in err) / n),
        "mean_error": sum(err) / n,
        "mean_stderr": sum(errors) / n,
        "within_2se": sum(abs(x) <= 2 * s for x, s in zip(err, errors)) / n,
        "seconds": seconds,
        "errors": err,
        "estimates": list(estimates),
        "stderrs": list(errors),
    }


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        f"# log Z along training: {meta['folder']}",
        "",
        f"{meta['checkpoints']} checkpoints of a {meta['architecture']} {meta['family']} (steps {meta['steps'][0]} to "
        f"{meta['steps'][-1]}), start: {meta['init']}; {meta['chains']} chains for every method; seed {meta['seed']}; "
        f"torch threads {meta['threads']}. Errors of log Z against exact enumeration over every checkpoint, in nats. "
        "Temperature AIS runs each checkpoint's own geometric path; 'equal steps' gives it the trajectory pass's "
        "total steps shared equally, 'equal time' the steps it affords in the pass's wall time (BAR's solve "
        "included). Mean s.e.: the estimators' own standard errors (AIS: delta method; BAR: bootstrap over chains).",
        "",
        "| method | K per link | total steps | mean abs err | max abs err | RMS | mean err | mean s.e. | within 2 s.e. "
        "| seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['k']} | {r['total_steps']:,} | {r['mean_abs_error']:.4f} | "
            f"{r['max_abs_error']:.4f} | "
            f"{r['rms_error']:.4f} | {r['mean_error']:+.4f} | {r['mean_stderr']:.4f} | {r['within_2se']:.0%} | "
            f"{r['seconds']:.1f} |"
        )
    v = meta["verdict"]
    lines += [
        "",
        f"Final checkpoint (step {meta['steps'][-1]}), trajectory path at K = {v['k']}: verdict **{v['verdict']}** "
        f"(tolerance {v['tolerance']:g} nats); AIS {v['ais']:.4f}, RAISE {v['raise']:.4f} ± {v['raise_se']:.4f}, "
        f"exact {v['exact']:.4f}; interval {v['interval']} "
        + (
            f"contains the exact value: {v['contains_exact']}"
            if v["interval"]
            else f"(open: {'; '.join(v['reasons'])})"
        ),
    ]
    if meta.get("flagged"):
        lines.append(f"BAR's health check flagged: {'; '.join(meta['flagged'])}")
    return "\n".join(lines) + "\n"


def plot_errors(rows: list[dict], steps: list[int], path: Path, k: str) -> None:
    from raise_eval.render.plots import _figure

    fig = _figure((7, 4))
    ax = fig.subplots()
    styles = {"trajectory AIS": ("o-", "tab:red"), "trajectory BAR": ("s--", "tab:purple")}
    for r in rows:
        if r["k"] != k and not r["method"].startswith("temperature"):
            continue
        if r["method"].startswith("temperature") and r["k"] != f"{k} (equal steps)" and r["k"] != f"{k} (equal time)":
            continue
        style, colour = styles.get(r["method"], ("^:", "tab:green" if "steps" in r["k"] else "tab:olive"))
        label = r["method"] + ("" if r["method"].startswith("trajectory") else f", {r['k'].split('(')[1][:-1]}")
        ax.errorbar(
            steps, r["errors"], yerr=r["stderrs"], fmt=style, color=colour, markersize=3, capsize=2, label=label
        )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("log Z estimate - exact (nats)")
    ax.set_title(f"errors of log Z at every checkpoint, K = {k} sub-steps per link (equal total cost)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    write_output(path, lambda p: fig.savefig(p, format="png", dpi=120), what="the figure")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a run's checkpoints (--save-trajectory of the training scripts)")
    parser.add_argument("--data", default=None, help="test data (default: the checkpoints' dataset)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 30, 100], help="sub-steps per link K")
    parser.add_argument("--start-steps", type=int, default=None, help="sub-steps of the first link (default: K)")
    parser.add_argument("--chains", type=int, default=500)
    parser.add_argument("--raise-examples", type=int, default=50)
    parser.add_argument("--raise-chains", type=int, default=10)
    parser.add_argument("--raise-checkpoints", type=int, default=3)
    parser.add_argument("--test-subset", type=int, default=None)
    parser.add_argument("--init", choices=["base-rates", "uniform"], default="base-rates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="results/trajectory/run")
    add_overwrite_argument(parser, "table.md, results.json, errors.png and trajectory.png in --out")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    # Before any work: the files written in --out, never a checkpoint of the run (its exact log Z cache is read back,
    # and rewritten, as the script's own).
    try:
        saved = list_trajectory(args.folder)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    names = ["table.md", "results.json", "errors.png", "trajectory.png"]
    inputs = [("a checkpoint of the run", entry.path) for entry in saved]
    check_outputs_first(parser, [("--out", out / name) for name in names], inputs, args.overwrite)
    inputs = TrajectoryInputSettings(folder=args.folder, data=args.data, data_root=args.data_root, dtype=args.dtype)
    loaded = load_trajectory_inputs(inputs, args.init)
    models, steps = loaded.models, loaded.steps
    model = models[-1]
    family = "RBM" if model.num_layers == 2 else "DBM"
    base = _start_biases(model, family, args.init, loaded.train_pixel_means)
    print(f"{args.folder}: {len(models)} checkpoints of a {'-'.join(map(str, model.layer_sizes))} {family}", flush=True)
    cache = out / "exact_log_z.json"
    if cache.exists() and json.loads(cache.read_text()).get("steps") == steps:
        truth = json.loads(cache.read_text())["log_z"]
    else:
        t0 = time.perf_counter()
        truth = [exact.log_partition(m) for m in models]
        write_output(cache, json.dumps({"steps": steps, "log_z": truth}), what="the exact log Z")
        print(f"exact log Z of {len(models)} checkpoints: {time.perf_counter() - t0:.1f} s", flush=True)
    rows, reports = [], {}
    for k in args.steps:
        last = k == args.steps[-1]
        report = evaluate_trajectory(
            models, loaded.test, steps=k, start_steps=args.start_steps, ais_chains=args.chains,
            raise_examples=args.raise_examples, raise_chains=args.raise_chains,
            raise_checkpoints=args.raise_checkpoints, init=args.init, exact="auto" if last else "never",
            test_subset=args.test_subset, seed=args.seed, threads=None, training_steps=steps, names=loaded.names,
            train_pixel_means=loaded.train_pixel_means, labels={"folder": str(args.folder)}, exact_log_z=truth,
        )  # fmt: skip
        reports[k] = report
        t = report.timing
        total = report.settings["num_steps"]
        cs = report.checkpoints
        rows.append(summary("trajectory AIS", str(k), [c.log_z for c in cs], [c.log_z_stderr for c in cs], truth,
                            t["ais_seconds"], total))  # fmt: skip
        rows.append(summary("trajectory BAR", str(k), [c.log_z_bar for c in cs], [c.log_z_bar_stderr for c in cs],
                            truth, t["ais_seconds"] + t["bar_seconds"], total))  # fmt: skip
        per_checkpoint = max(1, round(total / len(models)))
        est, err, secs = temperature_ais(models, base, per_checkpoint, args.chains, args.seed)
        rows.append(summary("temperature AIS", f"{per_checkpoint} (equal steps)", est, err, truth, secs,
                            per_checkpoint * len(models)))  # fmt: skip
        affordable = max(1, round(per_checkpoint * (t["ais_seconds"] + t["bar_seconds"]) / secs))
        est, err, secs2 = temperature_ais(models, base, affordable, args.chains, args.seed)
        rows.append(summary("temperature AIS", f"{affordable} (equal time)", est, err, truth, secs2,
                            affordable * len(models)))  # fmt: skip
        for r in rows[-4:]:
            print(
                f"K = {k}: {r['method']:16} {r['k']:>18}: mean |err| {r['mean_abs_error']:.4f}, max "
                f"{r['max_abs_error']:.4f}, mean err {r['mean_error']:+.4f}, mean s.e. {r['mean_stderr']:.4f}, "
                f"{r['seconds']:.1f} s",
                flush=True,
            )
    k = args.steps[-1]
    report = reports[k]
    final = report.final
    interval = report.interval
    verdict = {
        "k": k, "verdict": report.verdict, "tolerance": report.settings["tolerance"], "ais": final.ais_mean,
        "raise": final.raise_mean, "raise_se": final.raise_stderr, "exact": final.exact_mean,
        "interval": None if report.interval is None else [round(x, 4) for x in report.interval],
        "contains_exact": None if interval is None else interval[0] <= final.exact_mean <= interval[1],
        "reasons": list(report.reasons),
    }  # fmt: skip
    meta = {
        "folder": str(args.folder), "checkpoints": len(models), "architecture": "-".join(map(str, model.layer_sizes)),
        "family": family, "steps": steps, "init": args.init, "chains": args.chains, "seed": args.seed,
        "threads": torch.get_num_threads(), "verdict": verdict,
        "flagged": [f"{link.start} -> {link.end}: {'; '.join(link.problems)}" for link in report.coarse_links],
        "exact_log_z": truth,
    }  # fmt: skip
    write_output(out / "table.md", markdown(rows, meta), what="the table")
    try:
        dump_json({"meta": meta, "rows": rows, "report": report.to_dict()}, str(out / "results.json"))
        plot_errors(rows, steps, out / "errors.png", str(k))
        report.plot(str(out / "trajectory.png"))  # through raise-eval's writer, as dump_json
    except ImportError:
        print("no plots: matplotlib is not installed")
    except OutputWriteError as e:  # a full disk: the file as it was, the result kept in the temporary folder
        raise SystemExit(f"error: {e}") from None
    print(markdown(rows, meta))
    print(report.format_table())
    print(f"wrote {out}/table.md, results.json, errors.png, trajectory.png")


if __name__ == "__main__":
    main()
