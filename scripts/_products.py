"""What the log f(v) scripts share: the bare products a step of per-vector AIS needs, and a fixed random subset.

torch only, so that scripts/benchmark_log_f.py still runs against older versions of the library."""

from __future__ import annotations

import time

import torch


def bare_products_seconds(model, rows: int, repeats: int) -> float:
    """Seconds of `repeats` rounds of the products one estimator step needs for `rows` chains: every weight matrix
    once forward and once transposed, with torch.mm on random binary rows."""
    g = torch.Generator().manual_seed(1)
    xs = [torch.rand(rows, w.shape[0], generator=g, dtype=model.dtype).round() for w in model.weights]
    ys = [torch.rand(rows, w.shape[1], generator=g, dtype=model.dtype).round() for w in model.weights]
    start = time.perf_counter()
    for _ in range(repeats):
        for w, x, y in zip(model.weights, xs, ys):
            torch.mm(x, w)
            torch.mm(y, w.t())
    return time.perf_counter() - start


def random_subset(data: torch.Tensor, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` rows of `data` (all if fewer) in a fixed random order from `seed`, and their indices."""
    pick = torch.randperm(data.shape[0], generator=torch.Generator().manual_seed(seed))[:count]
    return data[pick], pick
