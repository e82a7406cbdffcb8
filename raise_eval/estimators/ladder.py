"""One annealing pass read at its rungs: AIS's log Z at every rung, and the samples BAR needs between them.

M chains run along a schedule beta_0 .. beta_K (`anneal`, the one loop), and at chosen rungs (a subset of the
schedule's indices that holds 0 and K, e.g. the knots of a trajectory path: its checkpoints) the pass keeps

- the AIS log-weights accumulated up to the rung (log Z_0 included): exp of each is unbiased for Z at that rung,
  since the chain stopped there is an AIS chain to the rung's distribution, so one pass gives log Z at every rung;
- the chains' states just after their transition at the rung's beta (approximate samples of p_rung), through the
  log-density ratios to the neighbouring rungs: forward_r = log f_{r+1}(x_r) - log f_r(x_r) and
  reverse_r = log f_r(x_{r+1}) - log f_{r+1}(x_{r+1}), the inputs of the Bennett acceptance ratio
  (`raise_eval.estimators.bar`).

The last rung (beta = 1) gets one more transition at beta = 1 (a repeated beta changes no weight), so that its
samples have been moved at its own beta like every other rung's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.annealing import Kernel, anneal, check_log_weights
from raise_eval.estimators.ais import AISResult
from raise_eval.schedules import validate_schedule
from raise_eval.settings import check_count
from raise_eval.stats import WeightSummary, summarize_log_weights
from raise_eval.step_programs import refuse_rounded_paths


@dataclass
class LadderPass:
    """What `ladder_pass` kept.

    betas: the schedule (K + 1,); rungs: the indices of the rungs in it (R,), 0 and K included.
    log_weights: AIS log-weights at each rung, float64, shaped (R, M) (log Z_0 included): exp(log_weights[r]) is
        unbiased for Z at rung r.
    forward, reverse: float64, shaped (R - 1, M): forward[r] = log f_{r+1}(x_r) - log f_r(x_r) on the chains at rung
        r, reverse[r] = log f_r(x_{r+1}) - log f_{r+1}(x_{r+1}) on the chains at rung r + 1 (chain i's entries all
        come from chain i).
    final_state: the chains after their last transition at beta = 1.
    """

    betas: Tensor
    rungs: list[int]
    log_weights: Tensor
    forward: Tensor
    reverse: Tensor
    num_steps: int
    num_chains: int
    seconds: float
    final_state: Any = None

    @property
    def rung_betas(self) -> list[float]:
        return [float(self.betas[i]) for i in self.rungs]

    def summary(self, rung: int) -> WeightSummary:
        """log Z-hat at rung `rung` (an index into `rungs`): the chains' log-mean-exp weight, its delta-method standard
        error and ESS."""
        return summarize_log_weights(self.log_weights[rung])

    def ais(self, rung: int = -1) -> AISResult:
        """AIS's estimate of log Z at rung `rung` (the last by default), as an `AISResult`."""
        index = self.rungs[rung]
        result = AISResult.from_log_weights(self.log_weights[rung], index, time.perf_counter())
        result.seconds = self.seconds
        return result


def schedule_rungs(betas: Tensor, rungs) -> tuple[int, list[int], list[float]]:
    """(K, the rungs sorted with 0 and K added, their betas) of a checked schedule (K + 1,); ValueError naming the
    range when a rung does not index it."""
    num_steps = betas.numel() - 1
    rungs = sorted({0, num_steps, *(int(r) for r in rungs)})
    if rungs[0] < 0 or rungs[-1] > num_steps:
        raise ValueError(f"rungs must index the schedule's betas (0 .. {num_steps}), got {rungs}")
    return num_steps, rungs, [float(betas[i]) for i in rungs]


def ladder_pass(
    path,
    betas: Tensor,
    num_chains: int,
    *,
    rungs: Sequence[int],
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    progress: bool = False,
    desc: str = "AIS ladder",
) -> LadderPass:
    """Run `num_chains` AIS chains from exact samples of the path's start through `betas` and read them at `rungs`.

    Args:
        path: an annealing path with `sample_initial`, `log_partition_initial`, `log_density_ratio` and `transition`
            (`BoltzmannPath`, `TrajectoryPath`).
        betas: the schedule from 0 to 1, shaped (K + 1,).
        rungs: indices into `betas` where the pass is read; 0 and K are added when missing.
        generator: the only source of randomness.
        kernel: replaces the path's default kernel.
    """
    betas = validate_schedule(betas)
    check_count("num_chains", num_chains)
    refuse_rounded_paths("the AIS ladder")
    num_steps, rungs, rung_betas = schedule_rungs(betas, rungs)
    start = time.perf_counter()
    state = path.sample_initial(num_chains, generator)
    count = len(rungs)
    log_weights = torch.zeros(count, num_chains, dtype=torch.float64)
    forward = torch.zeros(max(count - 1, 0), num_chains, dtype=torch.float64)
    reverse = torch.zeros_like(forward)
    weights_at = {index: r for r, index in enumerate(rungs)}  # log-weights after `index` steps: rung r's
    samples_at = {index + 1: r for r, index in enumerate(rungs)}  # the chains after the transition at rung r's beta

    def on_step(done: int, state: Any, log_w: Tensor) -> None:
        r = weights_at.get(done)
        if r is not None:
            log_weights[r] = log_w.to("cpu")
        r = samples_at.get(done)
        if r is None:
            return
        beta = rung_betas[r]
        if r + 1 < count:
            forward[r] = path.log_density_ratio(state, beta, rung_betas[r + 1]).to("cpu", torch.float64)
        if r > 0:
            reverse[r - 1] = path.log_density_ratio(state, beta, rung_betas[r - 1]).to("cpu", torch.float64)

    extended = torch.cat([betas, betas[-1:]])  # one more transition at beta = 1: the last rung's samples
    state, _ = anneal(
        path, state, extended, generator=generator, kernel=kernel, progress=progress, desc=desc, on_step=on_step,
        report_steps={*weights_at, *samples_at},
    )  # fmt: skip
    log_weights += path.log_partition_initial
    check_log_weights(log_weights, desc, chains_dim=-1)
    for name, ratios in (("forward", forward), ("reverse", reverse)):  # BAR's inputs (-inf, a zero, is legitimate)
        check_log_weights(ratios, f"{desc}: BAR's {name} log-density ratios")
    return LadderPass(
        betas=betas,
        rungs=rungs,
        log_weights=log_weights,
        forward=forward,
        reverse=reverse,
        num_steps=num_steps,
        num_chains=num_chains,
        seconds=time.perf_counter() - start,
        final_state=state,
    )
