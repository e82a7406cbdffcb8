"""Thermodynamic integration beside AIS (`estimators.thermodynamic`): the estimator DCA tools report, on the same
path and schedule, from its own chains and stream (seed + 7), so that a user sees how far it is off. A reported extra
estimate of log Z: never in the sandwich, the control variate or a verdict. It runs where `ti_chains` asks for it, on
paths that declare the derivative of their log-density (fully visible models)."""

from __future__ import annotations

import time
from typing import Optional

import torch
from torch import Tensor

from raise_eval.estimators.thermodynamic import ThermodynamicResult, thermodynamic_integration
from raise_eval.evaluation.memory import Held, StageMemory, term
from raise_eval.evaluation.stages.stage import Stage
from raise_eval.evaluation.timers import Timer, TimingContext, probe_batch
from raise_eval.runtime.sharding import bytes_per_chain, chain_units
from raise_eval.schedules import linear_schedule
from raise_eval.seeds import stage_seed

# Per chain and step beyond the chains' states: the integrand's chain mean kept at each beta (a float64 scalar
# tensor and its list entry).
TI_BYTES_PER_STEP = 160


def ti_stage(plan, betas: Tensor) -> Optional[ThermodynamicResult]:
    """log Z by thermodynamic integration with `plan.ti_chains` chains over `betas` (None when not asked for)."""
    if plan.ti_chains == 0:
        return None
    generator = torch.Generator(device=plan.model.device).manual_seed(stage_seed(plan.seed, "ti"))
    return thermodynamic_integration(plan.path, betas, plan.ti_chains, generator=generator, progress=plan.progress)


def ti_memory(held: Held) -> StageMemory:
    plan = held.plan
    if plan.ti_chains == 0:
        return None
    c, k = plan.ti_chains, plan.steps
    terms = [
        term(f"{c:,} chains", c, bytes_per_chain(chain_units(plan.path.model), plan.model.dtype), "{ti_chains}"),
        term(f"the integrand's means at {k + 1:,} betas", k + 1, TI_BYTES_PER_STEP, "{steps}", extra=1),
        held.schedule,
    ]
    return f"{c:,} chains x {k:,} steps", terms, False


def ti_timer(context: TimingContext) -> Optional[Timer]:
    plan, path = context.plan, context.path
    if plan.ti_chains == 0:
        return None

    def time_ti(batch: int, steps: int) -> tuple[float, float]:
        # no step callback to time: a run of one step and one of `steps` + 1, the difference
        chains, seconds = max(2, batch), []
        for k in (1, steps + 1):
            begin = time.perf_counter()
            thermodynamic_integration(path, linear_schedule(k), chains, generator=context.generator)
            seconds.append(time.perf_counter() - begin)
        per_step = (seconds[1] - seconds[0]) / steps
        return (per_step if per_step > 0 else seconds[1] / (steps + 1)) / chains, 0.0

    c = plan.ti_chains
    return Timer(time_ti, float(c) * plan.steps, 0, c, max(2, probe_batch(c, context.units)))


TI = Stage(
    "ti", "TI", "ti_seconds", "ti", None, "thermodynamic integration", run=ti_stage, memory=ti_memory,
    timer=ti_timer,
)  # fmt: skip
