"""The 2-D Ising model on a 32 x 32 torus at the critical coupling through `raise-eval evaluate`, against Kaufman's
exact log Z (issue 42's must-show).

    python scripts/examples/ising_torus.py --out runs/ising_torus [--overwrite]

1. Writes the model (zero field, coupling K = 0.4406868 on each of the 2,048 bonds) as an .npz by the fully visible
   convention (`h` (1024,), `J` (1024, 1024), `visible` 'spin') and test data: the final states of --chains Gibbs
   chains of the model itself, each run --sweeps palindromic scans (two sweeps each) at beta = 1 from a uniform
   random start, with their own seed (.npy of -1/+1, shaped (chains, 1024)).
2. Runs `raise-eval evaluate` on them (AIS and RAISE; the enumeration of 2^1024 states is out of reach, so --exact
   never) and `raise-eval evaluate --until-gap` (the certified verdict: K grows by 2 from --certify-steps up to
   --certify-max-steps within --certify-time-budget), one thread each, timing both. With the sites scanned by colour
   (the checkerboard), the defaults took 550 s (evaluate) and 493 s (certified: CLOSED at its first K) on a shared
   2-core Xeon (results/ising_torus); the test data 5 s.
3. Prints AIS's log Z against Kaufman's closed form (tests/ising_exact.py, checked there against enumeration on small
   tori) and both runs' average test log-likelihoods against the exact one, mean log f(v) - log Z, with the verdict,
   its interval and the wall times, and writes them to --out/summary.json.

The zero-field model is symmetric under flipping every spin, so the base is the uniform one: no --train-data (the
run's note says the base is uniform).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # Kaufman's closed form and the torus's couplings live beside the tests that check them

import numpy as np  # noqa: E402
import torch  # noqa: E402

from raise_eval.paths.fully_visible import FullyVisiblePath  # noqa: E402
from tests.ising_exact import kaufman_log_partition, torus_ising  # noqa: E402

COUPLING = 0.4406868
SIDE = 32


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/ising_torus", help="folder for the model, data, JSONs and summary")
    parser.add_argument("--overwrite", action="store_true", help="replace the files of an earlier run in --out")
    parser.add_argument("--chains", type=int, default=100, help="test configurations (independent Gibbs chains)")
    parser.add_argument("--sweeps", type=int, default=300, help="palindromic scans per test chain (2 sweeps each)")
    parser.add_argument("--steps", type=int, default=3000, help="K of the evaluate run")
    parser.add_argument("--ais-chains", type=int, default=300)
    parser.add_argument("--raise-examples", type=int, default=50)
    parser.add_argument("--raise-chains", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=1.0, help="--until-gap TOL of the certified run (nats)")
    parser.add_argument("--certify-steps", type=int, default=3000, help="the certified run's first K")
    parser.add_argument("--certify-max-steps", type=int, default=12000, help="the certified run's largest K")
    parser.add_argument("--certify-time-budget", default="20m", help="the certified run's --time-budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--side", type=int, default=SIDE, help="the torus is SIDE x SIDE (32; less for a quick try)")
    return parser.parse_args()


def gibbs_test_data(model, chains: int, scans: int, seed: int) -> torch.Tensor:
    """The final states (-1/+1, float64 (chains, L)) of `chains` Gibbs chains at beta = 1 after `scans` palindromic
    scans from uniform random states."""
    path = FullyVisiblePath(model)
    generator = torch.Generator().manual_seed(seed)
    state = path.sample_initial(chains, generator)
    for _ in range(scans):
        state = path.transition(state, 1.0, generator)
    return path.sites(state)


def run(command: list[str]) -> float:
    """Run a raise-eval command (its table on this script's stdout); its wall time. Exit status 3 (an open verdict)
    is a result, not a failure."""
    print("$", " ".join(command), flush=True)
    start = time.perf_counter()
    code = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode
    seconds = time.perf_counter() - start
    if code not in (0, 3):
        raise SystemExit(f"{command[0]} exited with status {code}")
    return seconds


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = {name: out / name for name in ("ising.npz", "test.npy", "evaluate.json", "certify.json", "summary.json")}
    existing = [str(f) for f in files.values() if f.exists()]
    if existing and not args.overwrite:
        raise SystemExit(f"{', '.join(existing)} exist: pass --overwrite to replace them")
    side = args.side
    model = torus_ising(side, side, COUPLING)
    np.savez(files["ising.npz"], h=model.fields.numpy(), J=model.couplings.numpy(), visible="spin")
    start = time.perf_counter()
    test = gibbs_test_data(model, args.chains, args.sweeps, args.seed + 1000)
    gibbs_seconds = time.perf_counter() - start
    np.save(files["test.npy"], test.numpy())
    log_z = kaufman_log_partition(side, side, COUPLING)
    exact_mean = float(model.log_unnormalized(test).mean()) - log_z
    print(f"test data: {args.chains} chains x {args.sweeps} scans at beta = 1 ({gibbs_seconds:.0f} s)", flush=True)

    common = [sys.executable, "-m", "raise_eval", "evaluate", str(files["ising.npz"]), "--data", str(files["test.npy"]),
              "--dtype", "float64", "--threads", "1", "--exact", "never", "--ais-chains", str(args.ais_chains),
              "--raise-examples", str(args.raise_examples), "--raise-chains", str(args.raise_chains), "--seed",
              str(args.seed), "--no-progress", "--overwrite"]  # fmt: skip
    evaluate_seconds = run([*common, "--steps", str(args.steps), "--json", str(files["evaluate.json"])])
    certify_seconds = run([*common, "--steps", str(args.certify_steps), "--until-gap", str(args.tolerance),
                           "--max-steps", str(args.certify_max_steps), "--time-budget", args.certify_time_budget,
                           "--json", str(files["certify.json"])])  # fmt: skip

    evaluated = json.loads(files["evaluate.json"].read_text())
    certified = json.loads(files["certify.json"].read_text())
    ais = evaluated["log_z"]["ais"]
    summary = {
        "model": f"Ising {side}x{side} torus, K = {COUPLING}, zero field",
        "kaufman_log_z": log_z,
        "exact_test_log_likelihood": exact_mean,
        "test_data": {"chains": args.chains, "scans": args.sweeps, "seconds": gibbs_seconds},
        "evaluate": {
            "steps": args.steps,
            "ais_log_z": ais["estimate"],
            "ais_log_z_stderr": ais["stderr"],
            "ais_log_z_minus_exact": ais["estimate"] - log_z,
            "ais_mean": evaluated["log_likelihood"]["ais"]["mean"],
            "raise_mean": evaluated["log_likelihood"]["raise"]["mean"],
            "raise_stderr": evaluated["log_likelihood"]["raise"]["stderr"],
            "wall_seconds": evaluate_seconds,
        },
        "certify": {
            "tolerance": args.tolerance,
            "verdict": certified.get("verdict"),
            "interval": certified.get("interval"),
            "reasons": certified.get("reasons"),
            "certified_seconds": certified.get("seconds"),
            "steps": [h.get("steps") for h in certified.get("history", [])],
            "wall_seconds": certify_seconds,
        },
    }
    files["summary.json"].write_text(json.dumps(summary, indent=2) + "\n")
    e = summary["evaluate"]
    print(f"\nlog Z: AIS {e['ais_log_z']:.3f} +- {e['ais_log_z_stderr']:.3f} (K = {args.steps}), Kaufman {log_z:.3f}, "
          f"AIS - exact {e['ais_log_z_minus_exact']:+.3f}")  # fmt: skip
    print(f"average test log-likelihood: AIS {e['ais_mean']:.3f}, RAISE {e['raise_mean']:.3f} +- "
          f"{e['raise_stderr']:.3f}, exact {exact_mean:.3f}; evaluate took {evaluate_seconds:.0f} s")  # fmt: skip
    c = summary["certify"]
    print(f"certified (tolerance {args.tolerance} nats): {c['verdict']}, interval {c['interval']}, K = {c['steps']}, "
          f"{certify_seconds:.0f} s; the exact value {exact_mean:.3f}")  # fmt: skip
    print(f"wrote {files['summary.json']}")


if __name__ == "__main__":
    main()
