"""Training deep belief nets greedily, one RBM per layer (Hinton, Osindero & Teh, 2006).

RBM 0 is trained on the data v = x_0 with `train_rbm` (CD or PCD); the recognition probabilities
q(x_1 = 1 | v) = sigmoid(v W_0 + c_0) of its hidden units (or samples of them, `propagate="samples"`) are the data of
RBM 1, and so on up to RBM L-1, whose hidden layer is the top layer x_L. The DBN is then, for l = 0 .. L-1,

    weights[l]                = RBM l's W                 (n_l, n_{l+1})
    biases[l]                 = RBM l's visible bias      (the generative bias of x_l; biases[L-1] is the top RBM's)
    biases[L]                 = RBM L-1's hidden bias     (the top layer)
    recognition_biases[l - 1] = RBM l-1's hidden bias     (q(x_l | x_{l-1}) for layers l = 1 .. L-1)

so the hidden biases of RBMs 0 .. L-2 live on as recognition biases and the top RBM is RBM L-1 unchanged.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Optional

import torch
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.rbm import RBM
from raise_eval.models.sampling import sample_bernoulli_probs
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm
from torch import Tensor


@dataclass
class DBNTrainingConfig:
    """Hyperparameters of `train_dbn`: the hidden layer sizes (at least two) and, shared by every layer's RBM, the
    fields of `RBMTrainingConfig` (see there); `propagate` is "probs" (recognition probabilities) or "samples"
    (one binary sample of them) as the next RBM's data."""

    hidden: list[int] = field(default_factory=lambda: [500, 2000])
    epochs: int = 100
    batch_size: int = 100
    learning_rate: float = 0.05
    final_learning_rate_fraction: float = 0.1
    initial_momentum: float = 0.5
    momentum: float = 0.9
    momentum_switch_epoch: int = 5
    weight_decay: float = 1e-4
    method: str = "pcd"
    gibbs_steps: int = 1
    init_weight_std: float = 0.01
    propagate: str = "probs"

    def rbm_config(self, n_hidden: int) -> RBMTrainingConfig:
        shared = {f.name: getattr(self, f.name) for f in fields(RBMTrainingConfig) if f.name != "n_hidden"}
        return RBMTrainingConfig(n_hidden=n_hidden, **shared)


class _OutOfTime(Exception):
    pass


def reconstruction_error(rbm: RBM, data: Tensor) -> float:
    """Mean squared error per unit between data and its mean-field reconstruction p(v | p(h | v))."""
    return float((rbm.visible_probs(rbm.hidden_probs(data)) - data).pow(2).mean())


def check_budget_seconds(max_seconds: Optional[float]) -> None:
    """Refuse a wall-clock budget that is not None or a finite number of seconds, 0 or more (before any work)."""
    if max_seconds is not None and not (max_seconds >= 0 and math.isfinite(max_seconds)):
        raise ValueError(f"max_seconds must be a finite number of seconds, 0 or more (or None), got {max_seconds!r}")


def layer_deadlines(start: float, seconds: Optional[float], costs: list[float]) -> list[Optional[float]]:
    """Cumulative deadlines splitting `seconds` from `start` in proportion to `costs` (None without a budget)."""
    if seconds is None:
        return [None] * len(costs)
    total, acc, out = float(sum(costs)), 0.0, []
    for c in costs:
        acc += c
        out.append(start + seconds * acc / total)
    return out


def layer_epoch_seconds(rows: int, n_visible: int, n_hidden: int, config: DBNTrainingConfig, like: Tensor) -> float:
    """Seconds one epoch of a layer's RBM takes on `rows` training vectors of width `n_visible`, timed by training on
    a few minibatches of random probabilities (like's dtype and device; a generator of its own: the training's
    random stream is untouched): the difference between 2 and 8 minibatches, times the minibatches of an epoch."""
    generator = torch.Generator(device=like.device).manual_seed(0)
    rbm_config = replace(config.rbm_config(n_hidden), epochs=1)
    batch = config.batch_size

    def seconds(batches: int) -> float:
        x = torch.rand(batches * batch, n_visible, generator=generator, dtype=like.dtype, device=like.device)
        begin = time.perf_counter()
        train_rbm(x, rbm_config, generator=generator)
        return time.perf_counter() - begin

    seconds(1)  # warm-up: first-call costs (allocations, the product routes' timing)
    few, more = seconds(2), seconds(8)
    per_batch = (more - few) / 6 if more > few else more / 8  # noise can invert a small difference
    return per_batch * max(1, rows // batch)  # the minibatches of an epoch, as train_rbm cuts them


def train_dbn(
    data: Tensor,
    config: DBNTrainingConfig,
    *,
    generator: torch.Generator,
    progress: bool = False,
    max_seconds: Optional[float] = None,
    report: Optional[dict[str, Any]] = None,
    monitor_size: int = 1000,
    callback: Optional[Callable[[int, DBN], None]] = None,
) -> DBN:
    """Train a DBN greedily on binary `data` (N, n_visible) and return it (see the module docstring).

    Args:
        generator: the only source of randomness.
        max_seconds: wall-clock budget for the whole stack, split between the layers in proportion to their
            epochs' costs, timed before training (`layer_epoch_seconds`: about a second; by weight counts the
            784-500 layer of a 784-500-2000 DBN got 28% of the budget where its epochs take about as long as the
            top RBM's, 9.5 s against 9.9 s); a layer that finishes early leaves its time to the next. A layer
            whose next epoch would overrun its share stops after the current one (each RBM trains at least one
            epoch); the learning-rate schedule is the one planned for `epochs`.
        report: if a dict, filled with per-layer epochs, times, reconstruction errors and whether the budget
            stopped training.
        monitor_size: training vectors (the first ones) on which the reconstruction error is logged per epoch.
        callback: called as callback(epoch, dbn) after each epoch (counting from 0) of the top RBM, with the DBN
            made of the finished lower layers and the top RBM as it stands (e.g. a
            `raise_eval.hooks.LikelihoodMonitor`).
    """
    if len(config.hidden) < 2:
        raise ValueError(f"a DBN has at least two hidden layers; got hidden={config.hidden}")
    if config.propagate not in ("probs", "samples"):
        raise ValueError(f"propagate must be 'probs' or 'samples', got {config.propagate!r}")
    check_budget_seconds(max_seconds)
    sizes = [data.shape[1], *config.hidden]
    start = time.monotonic()
    epoch_costs, split_start, split_seconds = None, start, max_seconds
    if max_seconds is not None:
        epoch_costs = [layer_epoch_seconds(data.shape[0], a, b, config, data) for a, b in zip(sizes[:-1], sizes[1:])]
        # the timing's own seconds come out of the whole budget, not out of the first layer's share
        split_start = time.monotonic()
        split_seconds = max(0.0, max_seconds - (split_start - start))
    deadlines = layer_deadlines(split_start, split_seconds, epoch_costs or [1.0] * (len(sizes) - 1))
    layers_report: list[dict[str, Any]] = []
    rbms: list[RBM] = []
    x = data
    for l, n_hidden in enumerate(config.hidden):
        monitor = x[:monitor_size]
        state: dict[str, Any] = {"epochs": 0, "errors": [], "last": None, "t": time.monotonic(), "stopped": False}
        layer_start = state["t"]

        def after_epoch(epoch: int, rbm: RBM, state=state, monitor=monitor, deadline=deadlines[l]) -> None:
            now = time.monotonic()
            state["epochs"], state["last"] = epoch + 1, rbm
            state["errors"].append(reconstruction_error(rbm, monitor))
            if callback is not None and len(rbms) + 1 == len(config.hidden):
                callback(epoch, dbn_from_rbms(rbms + [rbm]))
            epoch_seconds, state["t"] = now - state["t"], now
            if deadline is not None and epoch + 1 < config.epochs and now + epoch_seconds > deadline:
                state["stopped"] = True
                raise _OutOfTime

        try:
            rbm = train_rbm(
                x, config.rbm_config(n_hidden), generator=generator, progress=progress, callback=after_epoch
            )
        except _OutOfTime:
            rbm = state["last"]
        rbms.append(rbm)
        layers_report.append(
            {
                "layer": l + 1,
                "sizes": [sizes[l], n_hidden],
                "epochs_completed": state["epochs"],
                "epochs_planned": config.epochs,
                "stopped_by_budget": state["stopped"],
                "timed_epoch_seconds": None if epoch_costs is None else epoch_costs[l],
                "seconds": time.monotonic() - layer_start,
                "reconstruction_error": state["errors"],
            }
        )
        if l + 1 < len(config.hidden):
            probs = rbm.hidden_probs(x)
            x = probs if config.propagate == "probs" else sample_bernoulli_probs(probs, generator)
    model = dbn_from_rbms(rbms)
    if report is not None:
        report.update(
            layers=layers_report,
            budget_exhausted=any(r["stopped_by_budget"] for r in layers_report),
            seconds=time.monotonic() - start,
        )
    return model


def dbn_from_rbms(rbms: list[RBM]) -> DBN:
    """The DBN of a greedily trained stack (the mapping of the module docstring)."""
    weights = [r.W for r in rbms]
    biases = [r.vbias for r in rbms] + [rbms[-1].hbias]
    recognition = [r.hbias for r in rbms[:-1]]
    return DBN(weights, biases, recognition)
