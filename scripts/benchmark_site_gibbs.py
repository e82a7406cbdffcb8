"""Time a sweep of the fully visible models' single-site Gibbs kernel against the bare product it needs, and
adabmDCA's CPU Gibbs sampler at equal work, in one run (issue 42).

A sweep updates every site once (L single-site draws); the kernel's step is a palindromic scan, two sweeps
(`raise_eval.kernels.site_gibbs.site_scan`), so a sweep is timed as half a step. The bare product is what computing
every site's coupling input once takes: the one-hot state (C, L q) times the couplings (L q, L q) through torch.mm.
adabmDCA 1.0.0's `gibbs_sampling(chains, params, nsweeps=1)` (where it is installed) attempts L mutations at random
sites, each by a product of the one-hot state with that site's couplings. Each repeat times the three back to back
(the same machine load); the medians of the per-repeat times and ratios are printed.

Random DCA-like models (float32): fields N(0, 1), couplings N(0, 0.05^2) symmetrised with zero self-blocks.

    python scripts/benchmark_site_gibbs.py --threads 1
    python scripts/benchmark_site_gibbs.py --sizes 53 200 --states 21 --chains 1000 --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from raise_eval.kernels.site_gibbs import CouplingTables, site_scan


def random_potts(size: int, q: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(fields (L, q), couplings (L, q, L, q)), float32."""
    couplings = torch.randn(size, q, size, q, generator=generator) * 0.05
    couplings = (couplings + couplings.permute(2, 3, 0, 1)) / 2
    for i in range(size):
        couplings[i, :, i, :] = 0
    return torch.randn(size, q, generator=generator), couplings


def adabmdca_sweep():
    """adabmDCA's CPU Gibbs sampler (`adabmDCA.sampling.gibbs_sampling`), or None where it is not installed."""
    try:
        from adabmDCA.sampling import gibbs_sampling
    except ImportError:
        return None
    return gibbs_sampling


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[53, 200], help="sites L (default: 53 200)")
    parser.add_argument("--states", type=int, default=21, help="states per site q (default: 21)")
    parser.add_argument("--chains", type=int, default=1000, help="chains (default: 1000)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats, medians printed (default: 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    peer = adabmdca_sweep()
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.chains} chains, q = {args.states}, float32; "
          f"adabmDCA: {'installed' if peer is not None else 'not installed (its column left out)'}")  # fmt: skip
    for size in args.sizes:
        g = torch.Generator().manual_seed(0)
        fields, couplings = random_potts(size, args.states, g)
        tables = CouplingTables(couplings)
        codes = torch.randint(0, args.states, (args.chains, size), generator=g)
        one_hot = torch.nn.functional.one_hot(codes, args.states).float()
        flat, matrix = one_hot.reshape(args.chains, -1), couplings.reshape(size * args.states, -1).contiguous()
        params = {"bias": fields, "coupling_matrix": couplings}
        runs = {
            "bare product": lambda: torch.mm(flat, matrix),
            "raise-eval sweep": lambda: site_scan(codes, fields, tables, 0.8, g)[0],  # two sweeps: halved below
        }
        if peer is not None:
            torch.manual_seed(0)  # adabmDCA draws from the global generator
            runs["adabmDCA sweep"] = lambda: peer(one_hot, params, 1, 0.8)
        for run in runs.values():
            run()  # warm-up
        times = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                elapsed = time.perf_counter() - start
                times[name].append(elapsed / 2 if name == "raise-eval sweep" else elapsed)
        bare = times["bare product"]
        print(f"L = {size}:")
        for name, seconds in times.items():
            ratio = statistics.median(t / b for t, b in zip(seconds, bare))
            print(f"  {name:<18} {1e3 * statistics.median(seconds):9.2f} ms   / bare product {ratio:5.2f}")


if __name__ == "__main__":
    main()
