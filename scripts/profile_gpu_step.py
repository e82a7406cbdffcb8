"""Where a GPU annealing step's device time goes: the kernels of AIS steps on a 784-500 RBM, from torch.profiler.

The steps run as the step program does (the same kernels as in its CUDA graphs), but one at a time
(`steps_per_graph=0`), so that the profiler sees each kernel; the times are the kernels' own device times, summed
over the profiled steps and divided by their number. Launch gaps are left out (graphs remove them); what is left
is what a captured step costs at least.

    python scripts/profile_gpu_step.py --chains 5000 --fuse compile
    python scripts/profile_gpu_step.py --chains 1000 --fuse none --top 15
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from _common import positive_int
from torch.profiler import ProfilerActivity, profile

from raise_eval import RBM, BoltzmannPath, anneal, linear_schedule
from raise_eval.step_programs import PRODUCTS, loop_options


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=positive_int, default=5000, help="AIS chains (default 5000)")
    parser.add_argument("--steps", type=positive_int, default=50, help="profiled steps (default 50)")
    parser.add_argument("--fuse", choices=["none", "compile"], default="compile", help="the step's elementwise work")
    parser.add_argument("--products", choices=list(PRODUCTS), default="model", help="as --gpu-products")
    parser.add_argument("--top", type=positive_int, default=12, help="kernels to list (default 12)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("no CUDA device: this script profiles the step's CUDA kernels")
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    W = 0.05 * torch.randn(784, 500, generator=g, device=device)
    model = RBM(W, torch.zeros(784, device=device), torch.zeros(500, device=device))
    path = BoltzmannPath(model)
    state = path.sample_initial(args.chains, g)
    options = {"programs": "cuda", "steps_per_graph": 0, "fuse": args.fuse, "products": args.products}
    with loop_options(**options):
        anneal(path, state, linear_schedule(args.steps), generator=g)  # warm up: compiles, cuBLAS heuristics
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            anneal(path, state, linear_schedule(args.steps), generator=g)
            torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for event in prof.key_averages():
        us = getattr(event, "self_device_time_total", None)
        if us is None:
            us = getattr(event, "self_cuda_time_total", 0.0)
        if us > 0 and event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.key] += us
            counts[event.key] += event.count
    if not totals:  # this torch labels kernel events otherwise: its own table, by device time
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=args.top))
        return
    whole = sum(totals.values()) / args.steps
    print(
        f"{torch.cuda.get_device_name(device)}: AIS step, {args.chains} chains, 784-500 RBM, fuse {args.fuse}, "
        f"products {args.products}: kernels' device time {whole / 1e3:.3f} ms per step ({args.steps} steps)"
    )
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {us / args.steps / 1e3:8.4f} ms  {counts[name] / args.steps:5.1f}/step  {name[:110]}")


if __name__ == "__main__":
    main()
