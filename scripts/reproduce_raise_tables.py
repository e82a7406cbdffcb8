"""Reproduce Tables 1 and 2 of the RAISE paper (Burda, Grosse & Salakhutdinov, AISTATS 2015) for this project's
checkpoints, with the estimates against K (the paper's Figures 3, 4 and 7).

For every model and start (uniform, and the data base rates where the paper has them) and every K in --steps, one
`raise_eval.evaluate` run: AIS over --ais-chains chains for log Z, RAISE on --raise-examples random test vectors x
--raise-chains chains, averaged over the whole test set with log f(v) as a control variate (exact for RBMs,
importance sampling with the mean-field (DBM) or recognition (DBN) proposal otherwise), and the exact value for the
20-hidden RBMs. Seed 0 everywhere; the log f(v) estimates of a model are computed once and reused for its runs.

Defaults are CPU-scale (K up to 3,000, 500 AIS chains, 100 test vectors x 10 RAISE chains: about half an hour on
two cores for all ten models). --paper-settings switches to the paper's (K up to 100,000, 5,000 AIS chains,
100 test vectors x 50 chains), which needs a GPU. Each run's result is kept in OUT/runs/ as it finishes; a rerun
with the same settings reuses them, so an interrupted job continues where it stopped.

Outputs in --out (default runs/raise_tables, a scratch folder that git ignores): results.json (every run), tables.md
(our numbers beside the paper's, and which of the paper's findings hold), figure3_rbms.png, figure4_mnistCD1-500.png,
figure7_mnist_deep.png and figure_deep.png (estimates against K). The committed results in results/raise_tables are
never overwritten by accident: a folder whose outputs are committed (tracked by git, or anywhere under results/) is
refused unless --overwrite-committed is given.

    python scripts/reproduce_raise_tables.py                 # CPU scale, every model whose checkpoint exists
    python scripts/reproduce_raise_tables.py --only mnistCD1-20 mnistPCD-20 --steps 100 1000
    python scripts/reproduce_raise_tables.py --paper-settings --device cuda
    python scripts/reproduce_raise_tables.py --out results/raise_tables --overwrite-committed   # update the committed

Checkpoints come from scripts/train_rbm_paper.py, scripts/train_dbm.py and scripts/train_dbn.py (docs/reproduction.md:
how long each takes). --spec FILE replaces the model list with a JSON list of entries like those in MODELS below.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch
from _common import write_output
from tqdm.auto import tqdm

from raise_eval import DBN, evaluate, load_checkpoint
from raise_eval.io.datasets import load_dataset
from raise_eval.evaluation import recognition_means

# At CPU scale the deep models' steps cost 2 to 5 times an RBM's and their log f(v) needs importance sampling for
# every test vector: smaller K, a fixed random fifth of the test set, 100 importance samples.
DEEP_CPU = {"max_steps": 300, "test_size": 2000, "log_f_samples": 100}
# The paper's numbers (Tables 1 and 2, K = 100,000). "uniform"/"base-rates": (RAISE, AIS); None where the paper
# has no entry (DBNs have no data-base-rate start in the paper).
MODELS: list[dict[str, Any]] = [
    {
        "name": "mnistCD1-20",
        "table": 1,
        "checkpoint": "checkpoints/rbm_mnistCD1-20.pt",
        "dataset": "binarized_mnist",
        "paper": {"exact": -164.50, "uniform": [-165.33, -164.51], "base-rates": [-164.11, -164.50]},
    },
    {
        "name": "mnistPCD-20",
        "table": 1,
        "checkpoint": "checkpoints/rbm_mnistPCD-20.pt",
        "dataset": "binarized_mnist",
        "paper": {"exact": -150.11, "uniform": [-150.58, -150.04], "base-rates": [-150.17, -150.10]},
    },
    {
        "name": "mnistCD1-500",
        "table": 1,
        "checkpoint": "checkpoints/rbm_mnistCD1-500.pt",
        "dataset": "binarized_mnist",
        "paper": {"uniform": [-150.78, -106.52], "base-rates": [-124.77, -124.09]},
    },
    {
        "name": "mnistPCD-500",
        "table": 1,
        "checkpoint": "checkpoints/rbm_mnistPCD-500.pt",
        "dataset": "binarized_mnist",
        "paper": {"uniform": [-101.07, -99.99], "base-rates": [-101.26, -101.28]},
    },
    {
        "name": "mnistCD25-500",
        "table": 1,
        "checkpoint": "checkpoints/rbm_mnistCD25-500.pt",
        "dataset": "binarized_mnist",
        "paper": {"uniform": [-88.51, -86.42], "base-rates": [-86.39, -86.35]},
    },
    {
        "name": "omniPCD-1000",
        "cpu": {"max_steps": 1000},
        "table": 1,
        "checkpoint": "checkpoints/rbm_omniPCD-1000.pt",
        "dataset": "omniglot",
        "paper": {"uniform": [-100.47, -100.45], "base-rates": [-100.46, -100.46]},
    },
    {
        "name": "MNIST DBM",
        "cpu": DEEP_CPU,
        "table": 2,
        "checkpoint": "checkpoints/dbm_mnist_500-1000.pt",
        "dataset": "binarized_mnist",
        "paper": {"uniform": [-85.69, -85.72], "base-rates": [-85.74, -85.67]},
    },
    {
        "name": "Omniglot DBM",
        "cpu": DEEP_CPU,
        "table": 2,
        "checkpoint": "checkpoints/dbm_omniglot_1000-1000.pt",
        "dataset": "omniglot",
        "paper": {"uniform": [-104.48, -110.86], "base-rates": [-102.64, -103.27]},
    },
    {
        "name": "MNIST DBN",
        "cpu": DEEP_CPU,
        "table": 2,
        "checkpoint": "checkpoints/dbn_mnist_500-2000.pt",
        "dataset": "binarized_mnist",
        "paper": {"uniform": [-84.67, -84.49], "base-rates": None},
    },
    {
        "name": "Omniglot DBN",
        "cpu": DEEP_CPU,
        "table": 2,
        "checkpoint": "checkpoints/dbn_omniglot_1000-1000.pt",
        "dataset": "omniglot",
        "paper": {"uniform": [-100.78, -100.45], "base-rates": None},
    },
]
INITS = ("uniform", "base-rates")
CPU_SETTINGS = {"steps": [100, 300, 1000, 3000], "ais_chains": 500, "raise_examples": 100, "raise_chains": 10}
PAPER_SETTINGS = {"steps": [100, 1000, 10000, 100000], "ais_chains": 5000, "raise_examples": 100, "raise_chains": 50}


CACHE_VERSION = 1
PROJECT_ROOT = Path(__file__).resolve().parents[1]
COMMITTED_RESULTS = PROJECT_ROOT / "results"
DEFAULT_OUT = "runs/raise_tables"  # .gitignore covers runs/
FIGURES = ("figure3_rbms.png", "figure4_mnistCD1-500.png", "figure7_mnist_deep.png", "figure_deep.png")
OUTPUTS = ("results.json", "tables.md", *FIGURES)


def committed_outputs(out: Path) -> list[str]:
    """The names of the script's outputs in `out` that are committed results, which a run must not overwrite
    unasked: those that git tracks, and any under the project's results/ folder (also when git cannot tell)."""
    existing = [name for name in OUTPUTS if (out / name).is_file()]
    if not existing:
        return []
    folder = out.resolve()
    if folder == COMMITTED_RESULTS or COMMITTED_RESULTS in folder.parents:
        return existing
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--", *existing], cwd=folder, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return []  # no git: outside results/, nothing is known to be committed
    tracked = set(listed.stdout.split()) if listed.returncode == 0 else set()
    return [name for name in existing if name in tracked]


def file_digest(path: str) -> str:
    """sha1 of a file's bytes: a retrained checkpoint at the same path must not reuse the old model's runs."""
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_key(entry: dict, init: str, steps: int, settings: dict, checkpoint_digest: str) -> str:
    """A file name for one run's result, changing with everything that changes the numbers: the model (by content),
    the data and pixel order, the start, K, the chains, the seed and the device."""
    what = json.dumps(
        [
            CACHE_VERSION,
            entry["name"],
            checkpoint_digest,
            entry["dataset"],
            entry.get("pixel_order", "row-major"),
            init,
            steps,
            settings,
        ],
        sort_keys=True,
    )
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in entry["name"])
    return f"{slug}_{init}_K{steps}_{hashlib.sha1(what.encode()).hexdigest()[:10]}.json"


def write_atomic(path: Path, text: str) -> None:
    """Write whole or not at all (raise-eval's writer: a killed job or a full disk never leaves a half-written or
    temporary file); a failed write ends the script with its one line."""
    write_output(path, text, what="the result")


def read_cached(path: Path) -> Optional[dict]:
    """A finished run's result, or None when there is none (or only an unreadable leftover)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def cost(model, steps: int, settings: dict) -> float:
    """Relative cost of one run: annealing steps x chains x weights per Gibbs sweep."""
    weights = sum(int(w.numel()) for w in model.weights)
    chains = settings["ais_chains"] + settings["raise_examples"] * settings["raise_chains"]
    return float(steps) * chains * weights


def summarize(report, seconds: float) -> dict:
    doc = report.to_dict()
    ll = doc["log_likelihood"]
    return {
        "ais": ll["ais"]["mean"],
        "ais_stderr": doc["log_z"]["ais"]["stderr"],
        "raise": ll["raise"]["mean"],
        "raise_stderr": ll["raise"]["stderr"],
        "raise_subset_mean": ll["raise"]["subset_mean"],
        "raise_subset_stderr": ll["raise"]["subset_stderr"],
        "gap": ll["gap"],
        "exact": ll["exact"],
        "log_z_ais": doc["log_z"]["ais"]["estimate"],
        "log_z_exact": doc["log_z"]["exact"],
        "ais_ess": doc["log_z"]["ais"]["ess"],
        "warnings": [w["code"] for w in doc["warnings"]],
        "seconds": seconds,
        "settings": doc["settings"],
    }


def entry_settings(entry: dict, settings: dict, paper_settings: bool) -> dict:
    """The settings of one model's runs. At CPU scale the entry's "cpu" dict may lower K ("max_steps") and set a
    fixed random subset of the test set ("test_size") and the importance samples of log f(v) ("log_f_samples"),
    unless the command line set those two; otherwise all of the test set and 500 samples."""
    cpu = {} if paper_settings else entry.get("cpu", {})
    out = dict(settings)
    out["steps"] = [k for k in settings["steps"] if k <= cpu.get("max_steps", k)]
    for key, default in (("test_size", None), ("log_f_samples", 500)):
        out[key] = settings[key] if settings.get(key) is not None else cpu.get(key, default)
    return out


def plan(entries: list[dict], inits: list[str], settings_of: dict) -> list[tuple[dict, str, int]]:
    """(entry, start, K) of every run."""
    runs = []
    for entry in entries:
        ks = settings_of[entry["name"]]["steps"]
        for init in inits:
            if entry["paper"].get(init, "missing") is None:
                continue  # the paper has no such start for this model (DBNs: no data base rates)
            runs += [(entry, init, k) for k in ks]
    return runs


def load_entry(entry: dict, inits: list[str], data_root: Optional[str], device: str, test_size: Optional[int]):
    """(model, test vectors, training means for the base-rate start or None) of one model."""
    ckpt = load_checkpoint(entry["checkpoint"], device=device)
    order = entry.get("pixel_order", "row-major")
    test = load_dataset(entry["dataset"], "test", data_root, pixel_order=order)
    if test_size is not None and test_size < len(test):
        test = test[torch.randperm(len(test), generator=torch.Generator().manual_seed(0))[:test_size]]
    means = ckpt.train_pixel_means
    wants_base_rates = "base-rates" in inits and entry["paper"].get("base-rates", "missing") is not None
    if wants_base_rates and (means is None or isinstance(ckpt.model, DBN)):
        train = load_dataset(entry["dataset"], "train", data_root, pixel_order=order).to(device)
        # A DBN anneals its top RBM, whose visible layer's base rates are the recognition means of the data; a
        # checkpoint without pixel means (e.g. an .npz from elsewhere) gets them from the training split.
        means = recognition_means(ckpt.model, train) if isinstance(ckpt.model, DBN) else train.mean(0)
    return ckpt.model, test.to(device), means


def run_all(args, entries: list[dict], settings: dict) -> list[dict]:
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    available = [e for e in entries if Path(e["checkpoint"]).exists()]
    for e in entries:
        if e not in available:
            tqdm.write(
                f"skipping {e['name']}: {e['checkpoint']} does not exist (docs/reproduction.md: how to train it)"
            )
    settings_of = {e["name"]: entry_settings(e, settings, args.paper_settings) for e in available}
    runs = plan(available, args.inits, settings_of)

    def run_settings(entry: dict) -> dict:
        out = {k: v for k, v in settings_of[entry["name"]].items() if k != "steps"}
        out.update(seed=args.seed, device=args.device)
        return out

    results: list[dict] = []
    loaded: dict[str, Any] = {}
    digests = {e["name"]: file_digest(e["checkpoint"]) for e in available}
    costs = {}
    for e in available:  # cost estimates need only the weight shapes
        model = load_checkpoint(e["checkpoint"]).model
        costs[e["name"]] = {k: cost(model, k, settings) for k in settings["steps"]}
        del model
    paths = [out / "runs" / run_key(e, i, k, run_settings(e), digests[e["name"]]) for e, i, k in runs]
    cached = [read_cached(p) for p in paths]
    done_cost = sum(costs[e["name"]][k] for (e, _, k), c in zip(runs, cached) if c is not None)
    # Progress in units of work (steps x chains x weights), shown as a percentage with the time left; runs
    # finished by an earlier job count from the start, so the time left is that of the runs still to do.
    bar = tqdm(
        total=sum(costs[e["name"]][k] for e, _, k in runs),
        initial=done_cost,
        desc=f"reproducing Tables 1 and 2 ({len(runs)} runs, {sum(c is not None for c in cached)} done before)",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}",
        disable=args.no_progress,
        smoothing=0,
    )
    start = time.perf_counter()
    for (entry, init, steps), path, result in zip(runs, paths, cached):
        bar.set_postfix_str(f"{entry['name']}, {init}, K={steps}")
        if result is None:
            if entry["name"] not in loaded:
                loaded.clear()  # one model in memory at a time
                loaded[entry["name"]] = {
                    "data": load_entry(
                        entry, args.inits, args.data_root, args.device, settings_of[entry["name"]]["test_size"]
                    )
                }
            model, test, means = loaded[entry["name"]]["data"]
            t0 = time.perf_counter()
            report = evaluate(
                model,
                test,
                init=init,
                train_pixel_means=means,
                steps=steps,
                ais_chains=settings["ais_chains"],
                raise_examples=settings["raise_examples"],
                raise_chains=settings["raise_chains"],
                log_f_method="importance",  # the tables' settings: importance samples of log f(v)
                log_f_samples=settings_of[entry["name"]]["log_f_samples"],
                seed=args.seed,
                log_f=loaded[entry["name"]].get("log_f"),
                labels={"checkpoint": entry["checkpoint"], "data": entry["dataset"], "split": "test"},
            )
            loaded[entry["name"]]["log_f"] = report.log_f
            result = {"name": entry["name"], "table": entry["table"], "init": init, "steps": steps}
            result.update(summarize(report, time.perf_counter() - t0))
            result["checkpoint_sha1"] = digests[entry["name"]]
            write_atomic(path, json.dumps(result, indent=1))
            bar.update(costs[entry["name"]][steps])
        results.append(result)
    bar.close()
    tqdm.write(f"all runs done in {time.perf_counter() - start:.0f} s")
    return results


def _fmt(x: Optional[float], se: Optional[float] = None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.2f}" if se is None else f"{x:.2f} ± {se:.2f}"


def _paper(value: Optional[float]) -> str:
    return "" if value is None else f" ({value:.2f})"


def final_results(results: list[dict]) -> dict[tuple[str, str], dict]:
    """The run with the largest K of each model and start."""
    final: dict[tuple[str, str], dict] = {}
    for r in results:
        key = (r["name"], r["init"])
        if key not in final or r["steps"] > final[key]["steps"]:
            final[key] = r
    return final


def _finite(*xs) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def findings(entries: list[dict], results: list[dict]) -> list[str]:
    """Which of the paper's findings hold here, each as a sentence with the numbers behind it.

    Comparisons allow two standard errors of the difference (AIS's standard error is that of log Z-hat, which is
    itself unreliable when the run warns of a low effective sample size: such runs are named).
    """
    final = final_results(results)
    lines = []
    usable = {key: r for key, r in final.items() if _finite(r["raise"], r["ais"])}

    def slack(r) -> float:
        return 2 * math.hypot(r["raise_stderr"], r["ais_stderr"])

    # Sec. 5.4: RAISE at or below the smallest AIS estimate of the same model (over its starts).
    below, above = [], []
    for name in dict.fromkeys(n for n, _ in usable):
        rs = [r for (n, _), r in usable.items() if n == name]
        lowest = min(rs, key=lambda r: r["ais"])
        for r in rs:
            ok = r["raise"] <= lowest["ais"] + 2 * math.hypot(r["raise_stderr"], lowest["ais_stderr"])
            (below if ok else above).append(
                f"{name} ({r['init']}): RAISE {r['raise']:.2f} vs lowest AIS {lowest['ais']:.2f}"
            )
    lines.append(
        f"- RAISE at or below the model's lowest AIS estimate (within 2 s.e.) at each model's largest K: "
        f"{len(below)} of {len(below) + len(above)} runs" + (f"; above: {'; '.join(above)}." if above else ".")
    )
    # Sec. 5.1: with data base rates, AIS and RAISE agree within 1 nat; they close mnistCD1-500's gap.
    base = [(n, r) for (n, i), r in usable.items() if i == "base-rates"]
    if base:
        within = [f"{n} ({r['gap']:+.2f})" for n, r in base if abs(r["gap"]) <= 1.0]
        outside = [f"{n} ({r['gap']:+.2f})" for n, r in base if abs(r["gap"]) > 1.0]
        lines.append(
            f"- From the data base rates, AIS and RAISE agree within 1 nat for {len(within)} of {len(base)} models"
            + (f": {', '.join(within)}" if within else "")
            + (f"; not for {', '.join(outside)}" if outside else "")
            + " (paper: all of them)."
        )
    cd1 = (usable.get(("mnistCD1-500", "uniform")), usable.get(("mnistCD1-500", "base-rates")))
    if all(cd1):
        u, b = cd1
        closes = abs(b["gap"]) + slack(b) < abs(u["gap"])
        lines.append(
            f"- mnistCD1-500: gap {u['gap']:.2f} nats from the uniform start and {b['gap']:.2f} from the base rates, "
            f"so the base rates {'narrow' if closes else 'do not narrow'} the gap"
            f"{' to within 1 nat' if closes and abs(b['gap']) <= 1 else ''} (paper: 44.26 and 0.68)."
        )
    # Exact values inside the sandwich RAISE <= exact <= AIS, an inversion named as such.
    for (n, i), r in sorted(usable.items()):
        if r["exact"] is None:
            continue
        e, sl = r["exact"], slack(r)
        if r["raise"] - sl <= e <= r["ais"] + sl:
            verdict = "inside the sandwich"
        elif e < r["raise"] - sl:
            verdict = "below RAISE: RAISE overestimates (p_ann fits the test data better than the RBM)"
        else:
            verdict = "above AIS: AIS underestimates"
        lines.append(
            f"- {n} ({i}): exact {e:.2f}, RAISE {r['raise']:.2f}, AIS {r['ais']:.2f}: {verdict} "
            f"(2 s.e. slack {sl:.2f})."
        )
    # Sec. 5.1, Figure 5: mnistCD1-20 from the base rates, RAISE above AIS at small K and declining with K.
    small = sorted(
        (r for r in results if r["name"] == "mnistCD1-20" and r["init"] == "base-rates" and _finite(r["raise"])),
        key=lambda r: r["steps"],
    )
    if small:
        diffs = ", ".join(f"K={r['steps']}: {r['raise'] - r['ais']:+.2f} (2 s.e. {slack(r):.2f})" for r in small)
        inverted = small[0]["raise"] > small[0]["ais"] + slack(small[0])
        declining = all(a["raise"] >= b["raise"] for a, b in zip(small, small[1:]))
        lines.append(
            f"- mnistCD1-20 from the base rates, RAISE - AIS: {diffs}. RAISE is "
            f"{'above' if inverted else 'not significantly above'} AIS at the smallest K and "
            f"{'declines' if declining else 'does not decline monotonically'} as K grows (paper, Figure 5: above at "
            "small K, declining)."
        )
    # Sec. 5.3: for DBNs RAISE was conservative at every K.
    for name in dict.fromkeys(r["name"] for r in results if "DBN" in r["name"]):
        rs = [r for r in results if r["name"] == name and _finite(r["raise"], r["ais"])]
        bad = [r["steps"] for r in rs if r["raise"] > r["ais"] + slack(r)]
        lines.append(
            f"- {name}: RAISE {'at or below AIS at every K' if not bad else 'above AIS at K = ' + str(bad)} "
            "(paper: conservative for all K)."
        )
    low_ess = [f"{n} ({i})" for (n, i), r in final.items() if "low-ess" in r["warnings"]]
    if low_ess:
        lines.append(
            f"- AIS warned of a low effective sample size at the largest K for {', '.join(low_ess)}: their AIS "
            "standard errors understate the error, so the comparisons above are looser than they look."
        )
    return lines


def markdown(
    entries: list[dict], results: list[dict], settings: dict, args, seconds: float, figures: list[tuple[str, str]]
) -> str:
    final = final_results(results)
    k_max = max(settings["steps"])
    k_text = f"the largest K of each model (column K; up to {k_max})"
    reduced = [e for e in entries if not args.paper_settings and e.get("cpu", {}).get("test_size")]
    out = [
        "# RAISE paper, Tables 1 and 2, reproduced",
        "",
        f"Our estimates at {k_text} with {settings['ais_chains']} AIS chains and {settings['raise_examples']} "
        f"test vectors x {settings['raise_chains']} RAISE chains (control variate log f(v), seed {args.seed}); "
        "in parentheses the paper's numbers (K = 100,000, 5,000 AIS chains, 100 x 50 RAISE chains). Average test "
        "log-probabilities in nats, ± one standard error; gap = AIS - RAISE. Our models are this project's "
        "CPU-trained checkpoints, not the paper's, so only the pattern is comparable, not the values."
        + (
            f" For {', '.join(e['name'] for e in reduced)} the average runs over a fixed random subset of "
            f"{reduced[0]['cpu']['test_size']} test vectors, with {reduced[0]['cpu'].get('log_f_samples', 500)} "
            "importance samples of log f(v) per vector, to fit a CPU's time."
            if reduced
            else ""
        ),
        "",
        f"Compute time: {seconds:.0f} s, summed over the runs (including runs finished by earlier invocations of the "
        f"same command). Command: `{args.command}`.",
        "",
        "## Table 1: RBMs",
        "",
        "| model | K | exact | RAISE (uniform) | AIS (uniform) | gap | RAISE (base rates) | AIS (base rates) | gap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cells(e, init):
        r, p = final.get((e["name"], init)), e["paper"].get(init)
        if r is None:
            return ["—", "—", "—"] if p is None else [f"—{_paper(p[0])}", f"—{_paper(p[1])}", "—"]
        p = p or [None, None]
        pgap = None if p[0] is None else p[1] - p[0]
        return [
            _fmt(r["raise"], r["raise_stderr"]) + _paper(p[0]),
            _fmt(r["ais"], r["ais_stderr"]) + _paper(p[1]),
            _fmt(r["gap"]) + _paper(pgap),
        ]

    for e in (e for e in entries if e["table"] == 1):
        r = final.get((e["name"], "uniform")) or final.get((e["name"], "base-rates"))
        exact = "—" if r is None or r["exact"] is None else _fmt(r["exact"])
        exact += _paper(e["paper"].get("exact"))
        k = "—" if r is None else str(r["steps"])
        out.append(
            f"| {e['name']} | {k} | {exact} | " + " | ".join(cells(e, "uniform") + cells(e, "base-rates")) + " |"
        )
    out += [
        "",
        "## Table 2: deep models",
        "",
        "| model | K | RAISE (uniform) | AIS (uniform) | gap | RAISE (base rates) | AIS (base rates) | gap |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in (e for e in entries if e["table"] == 2):
        r = final.get((e["name"], "uniform")) or final.get((e["name"], "base-rates"))
        k = "—" if r is None else str(r["steps"])
        out.append(f"| {e['name']} | {k} | " + " | ".join(cells(e, "uniform") + cells(e, "base-rates")) + " |")
    out += ["", "## The paper's findings, here", ""] + findings(entries, results)
    warned = [f"{r['name']} ({r['init']}): {', '.join(r['warnings'])}" for r in final.values() if r["warnings"]]
    if warned:
        out += ["", "Warnings raised by the runs at the largest K: " + "; ".join(warned) + "."]
    if figures:
        out += ["", "## Estimates against K", ""]
        for name, caption in figures:
            out += [f"![{caption}]({name})", ""]
    return "\n".join(out)


def plot(results: list[dict], names: list[str], path: Path, title: str) -> bool:
    """Panels of AIS and RAISE (± 1 s.e.) against K for each model and start, exact as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in names if any(r["name"] == n for r in results)]
    if not names:
        return False
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    styles = {
        ("uniform", "ais"): ("C0", "-"),
        ("uniform", "raise"): ("C0", "--"),
        ("base-rates", "ais"): ("C3", "-"),
        ("base-rates", "raise"): ("C3", "--"),
    }
    for ax, name in zip(axes.flat, names):
        for init in INITS:
            rs = sorted((r for r in results if r["name"] == name and r["init"] == init), key=lambda r: r["steps"])
            if not rs:
                continue
            ks = [r["steps"] for r in rs]
            for what, se in (("ais", "ais_stderr"), ("raise", "raise_stderr")):
                color, line = styles[(init, what)]
                y = [r[what] for r in rs]
                s = [r[se] for r in rs]
                ax.plot(ks, y, line, color=color, marker="o", ms=3, label=f"{what.upper()} ({init})")
                ax.fill_between(
                    ks, [a - b for a, b in zip(y, s)], [a + b for a, b in zip(y, s)], color=color, alpha=0.15
                )
        exact = next((r["exact"] for r in results if r["name"] == name and r["exact"] is not None), None)
        if exact is not None:
            ax.axhline(exact, color="k", ls=":", lw=1, label="exact")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("K (intermediate distributions)")
        ax.set_ylabel("avg. test log-prob. (nats)")
        mine = [r for r in results if r["name"] == name]
        finals = [r[w] for r in mine for w in ("ais", "raise") if _finite(r[w])]
        if finals:
            lo, hi = min(finals), max(finals)
            # Keep the informative range: very low small-K values would squash the rest, but every line's value at
            # the largest K stays in view.
            k_top = max(r["steps"] for r in mine)
            last = [r[w] for r in mine if r["steps"] == k_top for w in ("ais", "raise") if _finite(r[w])]
            floor = min(max(lo, hi - 60), min(last, default=hi)) - 2
            ax.set_ylim(floor, hi + 2)
            below = [v for v in finals if v < floor]
            if below:
                ax.text(
                    0.02,
                    0.02,
                    f"{len(below)} point(s) below, lowest {min(below):.0f}",
                    transform=ax.transAxes,
                    fontsize=7,
                    color="0.3",
                )
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    write_output(path, lambda p: fig.savefig(p, format="png", dpi=110), what="the figure")
    plt.close(fig)
    return True


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paper-settings", action="store_true", help="the paper's K, chains and test vectors (GPU)")
    parser.add_argument("--steps", type=int, nargs="+", default=None, help="values of K (default: 100 300 1000 3000)")
    parser.add_argument("--ais-chains", type=int, default=None, help="AIS chains (default 500; paper 5000)")
    parser.add_argument("--raise-examples", type=int, default=None, help="RAISE test vectors (default 100)")
    parser.add_argument("--raise-chains", type=int, default=None, help="RAISE chains per vector (default 10; paper 50)")
    parser.add_argument(
        "--log-f-samples",
        type=int,
        default=None,
        help="importance samples of log f(v) (DBM, DBN; default 500, 100 for the deep models at CPU scale)",
    )
    parser.add_argument("--only", nargs="+", default=None, help="model names to run (default: all)")
    parser.add_argument("--inits", nargs="+", choices=INITS, default=list(INITS), help="annealing starts")
    parser.add_argument("--test-size", type=int, default=None, help="a fixed random subset of the test set")
    parser.add_argument("--spec", default=None, help="JSON file with the model list (default: the paper's models)")
    parser.add_argument("--data-root", default=None, help="folder holding binarized_mnist/ and omniglot/")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help=f"output folder (default {DEFAULT_OUT}, a scratch folder that git ignores; the committed results are in "
        "results/raise_tables)",
    )
    parser.add_argument(
        "--overwrite-committed",
        action="store_true",
        help="allow replacing committed outputs in --out (e.g. --out results/raise_tables to update them)",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    args.command = " ".join(["python", "scripts/reproduce_raise_tables.py", *(sys.argv[1:] if argv is None else argv)])
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    settings = dict(PAPER_SETTINGS if args.paper_settings else CPU_SETTINGS)
    for key in ("steps", "ais_chains", "raise_examples", "raise_chains"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    settings["log_f_samples"] = args.log_f_samples
    settings["test_size"] = args.test_size
    entries = MODELS if args.spec is None else json.loads(Path(args.spec).read_text())
    for i, e in enumerate(entries):
        missing = [k for k in ("name", "table", "checkpoint", "dataset", "paper") if k not in e]
        if missing or e.get("table") not in (1, 2):
            parser.error(
                f"spec entry {i} ({e.get('name', '?')}) needs name, table (1 or 2), checkpoint, dataset and paper "
                f"(a dict, may be empty); missing or bad: {missing or ['table']}"
            )
    if args.only:
        unknown = sorted(set(args.only) - {e["name"] for e in entries})
        if unknown:
            parser.error(f"unknown model(s) {unknown}; choose from {[e['name'] for e in entries]}")
        entries = [e for e in entries if e["name"] in args.only]
    committed = committed_outputs(Path(args.out))
    if committed and not args.overwrite_committed:
        parser.error(
            f"{args.out} holds committed results ({', '.join(committed)}) that this run would overwrite: write "
            f"elsewhere with --out DIR (the default, {DEFAULT_OUT}, is a scratch folder that git ignores), or pass "
            "--overwrite-committed to replace them (and review the diff before committing)"
        )
    start = time.perf_counter()
    try:
        results = run_all(args, entries, settings)
    except KeyboardInterrupt:
        # Every finished run is already in OUT/runs (written atomically); the same command continues from there.
        print(
            f"\ninterrupted: the finished runs are kept in {Path(args.out) / 'runs'}; run the same command again to "
            "continue",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    seconds = sum(r["seconds"] for r in results)
    out = Path(args.out)
    settings.update(seed=args.seed, device=args.device)
    write_atomic(out / "results.json", json.dumps({"settings": settings, "runs": results}, indent=1))
    table1 = [e["name"] for e in entries if e["table"] == 1]
    table2 = [e["name"] for e in entries if e["table"] == 2]
    wanted = [  # the names of FIGURES
        ("figure3_rbms.png", table1, "RBMs: AIS and RAISE against K (cf. the paper's Figures 3, 5, 6)"),
        ("figure4_mnistCD1-500.png", [n for n in table1 if n == "mnistCD1-500"], "mnistCD1-500 (cf. Figure 4)"),
        ("figure7_mnist_deep.png", [n for n in table2 if n.startswith("MNIST")], "MNIST DBM and DBN (cf. Figure 7)"),
        ("figure_deep.png", table2, "Deep models: AIS and RAISE against K"),
    ]
    figures = [(name, title) for name, names, title in wanted if plot(results, names, out / name, title)]
    write_atomic(out / "tables.md", markdown(entries, results, settings, args, seconds, figures))
    print(
        f"wrote {out / 'tables.md'}, {out / 'results.json'} and {len(figures)} figures "
        f"({time.perf_counter() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
