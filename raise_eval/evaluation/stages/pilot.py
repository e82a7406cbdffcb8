"""The adaptive schedule's pilot (`raise_eval.adaptive`): a short run that places the K betas, from its own stream."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.adaptive import adaptive_pilot, pilot_run
from raise_eval.evaluation.memory import PILOT_BYTES_PER_CELL, PILOT_BYTES_PER_STEP, Held, StageMemory, term
from raise_eval.evaluation.stages.stage import Stage
from raise_eval.evaluation.timers import StepClock, Timer, TimingContext, probe_batch
from raise_eval.runtime.sharding import bytes_per_chain, chain_units
from raise_eval.seeds import stage_seed


def pilot_stage(plan) -> tuple[Tensor, Any]:
    """The adaptive schedule's betas at plan.steps and the pilot's record, from its own generator (seed + 4) and its
    own copy of the path: the main runs' random streams are those they would have with these betas passed
    explicitly, and their weights stay unbiased."""
    return adaptive_pilot(
        plan.path,
        plan.steps,
        generator=torch.Generator(device=plan.model.device).manual_seed(stage_seed(plan.seed, "pilot")),
        num_chains=plan.pilot_chains,
        grid_size=plan.pilot_grid,
    )


def pilot_memory(held: Held) -> StageMemory:
    plan = held.plan
    if plan.schedule_name != "adaptive":
        return None
    k, dtype = plan.steps, plan.model.dtype
    terms = [
        term(f"the pilot's {plan.pilot_chains:,} chains", plan.pilot_chains,
              bytes_per_chain(chain_units(plan.path.model), dtype), "{pilot_chains}", least=2),
        term(f"the pilot's grid of {plan.pilot_grid:,} cells", plan.pilot_grid + 1, PILOT_BYTES_PER_CELL,
              "{pilot_grid}", extra=1),
        term(f"the schedule of {k:,} steps placed from it", k + 1, PILOT_BYTES_PER_STEP, "{steps}", extra=1),
    ]  # fmt: skip
    return f"{plan.pilot_chains:,} chains x {plan.pilot_grid:,} grid cells", terms, False


def pilot_timer(context: TimingContext) -> Optional[Timer]:
    plan, path = context.plan, context.path
    if plan.schedule_name != "adaptive":
        return None

    def time_pilot(batch: int, steps: int) -> tuple[float, float]:
        # the pilot has no step callback: a run of one cell and one of `steps` + 1 cells, the difference
        clock, chains, seconds = StepClock(context.device), max(2, batch), []
        for cells in (1, steps + 1):
            begin = clock.now()
            pilot_run(path, num_chains=chains, grid_size=cells, generator=context.generator)
            seconds.append(clock.now() - begin)
        per_cell = (seconds[1] - seconds[0]) / steps
        return (per_cell if per_cell > 0 else seconds[1] / (steps + 1)) / chains, 0.0

    p = plan.pilot_chains
    return Timer(time_pilot, float(p) * plan.pilot_grid, 0, p, max(2, probe_batch(p, context.units)))


PILOT = Stage(
    "pilot", "adaptive pilot", "pilot_seconds", "pilot", None, "the adaptive schedule's pilot",
    run=pilot_stage, memory=pilot_memory, timer=pilot_timer,
)  # fmt: skip
