"""The stages of an evaluation, each one object (`Stage`, in a module of its own here): its declaration (name,
label, report key, random stream, what a resume file keeps of it, how an interruption names it), its run, its memory
count and its timer. `run_evaluation` composes their runs for one K (`raise_eval.certification` runs the
K-independent ones, the exact values, log f(v) and its check, once and the others at every K); `plan_memory` adds up
their memory and `evaluation.timing.estimate_cost` their timers. A new stage is a module here with its `Stage`,
listed below (and a new stream's offset in `raise_eval.seeds`).
"""

from __future__ import annotations

from raise_eval.evaluation.memory import SCHEDULE_BYTES_PER_STEP, Held, StageCost, dtype_size, parameter_entries, term
from raise_eval.evaluation.stages.ais import AIS, ais_stage
from raise_eval.evaluation.stages.exact import EXACT, exact_stage
from raise_eval.evaluation.stages.log_f import LOG_F, LOG_F_CHECK, log_f_check_stage, log_f_stage
from raise_eval.evaluation.stages.pilot import PILOT, pilot_stage
from raise_eval.evaluation.stages.raise_ import RAISE, raise_stage, raise_subset
from raise_eval.evaluation.stages.stage import Stage
from raise_eval.evaluation.stages.thermodynamic import TI, ti_stage
from raise_eval.evaluation.timers import Timer, TimingContext

# In the order of the report's timing entries (the JSON's keys keep it).
STAGES = (AIS, RAISE, LOG_F, EXACT, PILOT, LOG_F_CHECK, TI)
# In the order they run (the memory plan's and the cost estimate's order).
RUN_ORDER = (PILOT, AIS, EXACT, LOG_F, RAISE, LOG_F_CHECK, TI)
STAGE = {s.name: s for s in STAGES}
LABELS = {s.name: s.label for s in STAGES}


def plan_memory(plan) -> list[StageCost]:
    """The stages `plan` (an `evaluate.EvaluationPlan`) will run, in order, each with its peak bytes and what they
    are made of; seconds are left None (`estimate_cost` times them). Nothing is allocated."""
    model, n, k = plan.model, plan.n_test, plan.steps
    size = dtype_size(model.dtype)
    held = Held(
        plan,
        params64=8 * parameter_entries(model),
        schedule=term(f"the schedule of {k:,} steps", k + 1, SCHEDULE_BYTES_PER_STEP, "{steps}", extra=1),
        kept=[term("the test vectors (and the search for repeated ones)", n, 2 * model.n_visible * size + 24,
                    "{test_subset}", least=2)],
    )  # fmt: skip
    stages: list[StageCost] = []
    for stage in RUN_ORDER:
        kept = list(held.kept)  # what the earlier stages left
        found = stage.memory(held)
        if found is not None:
            work, terms, steps_independent = found
            terms = terms + kept
            total = sum(t.bytes for t in terms)
            stages.append(StageCost(stage.name, stage.label, work, total, None, steps_independent, tuple(terms)))
    return stages


def stage_timers(plan, generator) -> dict[str, Timer]:
    """The timers of the stages `plan` runs that are timed (the exact enumeration is priced instead), in run order,
    sharing one `TimingContext`."""
    context = TimingContext.for_plan(plan, generator)
    timers = {}
    for stage in RUN_ORDER:
        timer = None if stage.timer is None else stage.timer(context)
        if timer is not None:
            timers[stage.name] = timer
    return timers


__all__ = [
    "LABELS",
    "RUN_ORDER",
    "STAGE",
    "STAGES",
    "Stage",
    "ais_stage",
    "exact_stage",
    "log_f_check_stage",
    "log_f_stage",
    "pilot_stage",
    "plan_memory",
    "raise_stage",
    "raise_subset",
    "stage_timers",
    "ti_stage",
]
