"""Race raise-eval's AIS against other RBM libraries' AIS at equal work: the same 784-500 RBM, the same number of
chains and annealing steps, each library's own AIS routine end to end, and their log Z estimates side by side.

Contestants (a peer that cannot be imported is skipped, and the script says so):

- raise-eval, float32 and float64 (`raise_eval.ais` on a `BoltzmannPath` from the uniform base);
- DsysDML/rbms (PyPI `rbms`, PyTorch, float32): `rbms.partition_function.ais.compute_partition_function_ais`;
- PyDeep (MelJan/PyDeep, NumPy, float64; not on PyPI: put a clone on the path with --peer-path):
  `pydeep.rbm.estimator.annealed_importance_sampling`.

The RBM: weights ~ N(0, 0.05^2), hidden biases ~ N(0, 0.5^2) and zero visible biases, from a fixed seed. With zero
visible biases every contestant's base distribution is the uniform one (rbms starts its chains uniformly
whatever its base), so all estimate the same log Z on the same geometric path. Each contestant runs in a fresh
subprocess whose thread count is set for torch, OpenMP and the BLAS libraries alike (OMP_NUM_THREADS,
MKL_NUM_THREADS, OPENBLAS_NUM_THREADS); the timing covers the AIS routine only (not imports or model
construction). With several rounds the contestants alternate, so that a change of the machine's load falls on all.

    python scripts/race_peers.py                                   # 1,000 chains, K = 1,000, 1 and 2 threads
    python scripts/race_peers.py --peer-path ~/src/PyDeep --steps 200 --threads 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import positive_int
from _machine import LoadMeter, cpu_description, loadavg

HERE = Path(__file__).resolve()

CONTESTANTS = {
    # name: (module that must import, dtype, the raise-eval contestant it is compared with)
    "raise-eval float32": ("raise_eval", "float32", None),
    "rbms float32": ("rbms", "float32", "raise-eval float32"),
    "raise-eval float64": ("raise_eval", "float64", None),
    "PyDeep float64": ("pydeep", "float64", "raise-eval float64"),
}


def _model(seed: int, dtype):
    import torch

    from raise_eval import RBM

    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(784, 500, generator=g, dtype=torch.float64) * 0.05
    hbias = torch.randn(500, generator=g, dtype=torch.float64) * 0.5
    return RBM(weights.to(dtype), torch.zeros(784, dtype=dtype), hbias.to(dtype))


def run_child(name: str, chains: int, steps: int, seed: int) -> dict:
    """Run one contestant in this process: {estimate, seconds, stderr or bounds}."""
    import torch

    dtype = getattr(torch, CONTESTANTS[name][1])
    model = _model(seed, dtype)
    if name.startswith("raise-eval"):
        from raise_eval import BoltzmannPath, ais, linear_schedule
        from raise_eval.runtime import product_routes

        path = BoltzmannPath(model)
        ais(path, linear_schedule(2), chains, generator=torch.Generator().manual_seed(seed))  # warm up, time routes
        start = time.perf_counter()
        result = ais(path, linear_schedule(steps), chains, generator=torch.Generator().manual_seed(seed))
        seconds = time.perf_counter() - start
        routes = sorted({c.route for c in product_routes.route_choices() if c.binary})
        return {"estimate": result.estimate, "stderr": result.stderr.item(), "seconds": seconds, "routes": routes}
    if name.startswith("rbms"):
        from rbms.bernoulli_bernoulli.classes import BBRBM
        from rbms.partition_function.ais import compute_partition_function_ais

        params = BBRBM(model.W.clone(), model.vbias.clone(), model.hbias.clone())
        torch.manual_seed(seed)  # rbms draws from torch's global generator
        compute_partition_function_ais(chains, 3, params)  # warm up
        start = time.perf_counter()
        estimate = compute_partition_function_ais(chains, steps + 1, params)
        return {"estimate": float(estimate), "seconds": time.perf_counter() - start}
    if name.startswith("PyDeep"):
        import numpy as np
        from pydeep.rbm.estimator import annealed_importance_sampling
        from pydeep.rbm.model import BinaryBinaryRBM

        rbm = BinaryBinaryRBM(
            784,
            500,
            initial_weights=model.W.double().numpy().copy(),
            initial_visible_bias=model.vbias.double().numpy().reshape(1, -1).copy(),
            initial_hidden_bias=model.hbias.double().numpy().reshape(1, -1).copy(),
            initial_visible_offsets=0.0,
            initial_hidden_offsets=0.0,
        )
        np.random.seed(seed)  # noqa: NPY002 (PyDeep draws from NumPy's global generator)
        annealed_importance_sampling(rbm, num_chains=chains, k=1, betas=3)  # warm up
        start = time.perf_counter()
        estimate, upper, lower = annealed_importance_sampling(rbm, num_chains=chains, k=1, betas=steps + 1)
        seconds = time.perf_counter() - start
        return {"estimate": float(estimate), "bounds_3sd": [float(lower), float(upper)], "seconds": seconds}
    raise ValueError(name)


def available(name: str, paths: list[str]) -> str | None:
    """None when the contestant's library can be found (on `paths` or the usual import path), else why not (a
    library that is found but fails to import is reported when its run fails)."""
    module = CONTESTANTS[name][0]
    sys.path[:0] = paths
    try:
        found = importlib.util.find_spec(module) is not None
    finally:
        del sys.path[: len(paths)]
    return None if found else f"no module named {module!r} (install it, or pass its folder with --peer-path)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=positive_int, default=1000, help="AIS chains (default 1000)")
    parser.add_argument("--steps", type=positive_int, default=1000, help="annealing steps K (default 1000)")
    parser.add_argument(
        "--threads", type=positive_int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=1, help="alternating rounds per thread count (default 1)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--peer-path", action="append", default=[], help="a folder to put on the peers' import path (repeatable)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child, args.chains, args.steps, args.seed)))
        return

    print(f"machine: {cpu_description()}; load average before: {loadavg()}")
    env = dict(os.environ)
    paths = [str(Path(p).expanduser().resolve()) for p in args.peer_path]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    names = []
    for name in CONTESTANTS:
        reason = available(name, paths)
        if reason is None:
            names.append(name)
        else:
            print(f"skipped {name}: {reason}")
    print(f"784-500 RBM (seed {args.seed}), {args.chains} chains, K = {args.steps}; contestants: {', '.join(names)}")
    for threads in args.threads:
        meter = LoadMeter(children=True)  # the contestants run in subprocesses
        meter.start()
        child_env = dict(env, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        child_env["OPENBLAS_NUM_THREADS"] = str(threads)
        results: dict[str, list[dict]] = {name: [] for name in names}
        for _ in range(args.rounds):
            for name in names:
                command = [sys.executable, str(HERE), "--child", name, "--chains", str(args.chains)]
                command += ["--steps", str(args.steps), "--seed", str(args.seed)]
                done = subprocess.run(command, env=child_env, capture_output=True, text=True)
                if done.returncode != 0:
                    tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
                    print(f"  {name} failed: {tail[0]}")
                    continue
                results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
        others = meter.stop()
        share = "?" if others is None else f"{100 * others:.0f}%"
        print(
            f"{threads} thread(s) (other processes used {share} of the CPUs meanwhile; load average now {loadavg()}):"
        )
        per_step = {}
        for name in names:
            runs = results[name]
            if not runs:
                continue
            per_step[name] = statistics.median(r["seconds"] for r in runs) / args.steps * 1e3
            last = runs[-1]
            detail = ""
            if "stderr" in last:
                detail = f" +- {last['stderr']:.3f} (products: {', '.join(last['routes']) or 'torch.mm'})"
            elif "bounds_3sd" in last:
                detail = f" (3 sd: {last['bounds_3sd'][0]:.3f} to {last['bounds_3sd'][1]:.3f})"
            versus = CONTESTANTS[name][2]
            ratio = ""
            if versus in per_step and versus in results and results[versus]:
                reference = results[versus][-1]
                gap = last["estimate"] - reference["estimate"]
                ratio = (
                    f"; {per_step[name] / per_step[versus]:.2f} x {versus}'s time per step, log Z {gap:+.3f} from "
                    f"its estimate ({gap / reference['stderr']:+.1f} of its standard errors)"
                    if reference.get("stderr")
                    else ""
                )
            estimates = ", ".join(f"{r['estimate']:.3f}" for r in runs)
            print(f"  {name}: {per_step[name]:.2f} ms per step, log Z {estimates}{detail}{ratio}")
        if not math.isfinite(sum(per_step.values())):
            print("  (a contestant returned a non-finite time)")


if __name__ == "__main__":
    main()
