"""The cost model of an evaluation: its predicted wall time, stage by stage (`estimate_cost`).

Each stage's own code (`ais`, `raise_log_likelihood`, per-vector AIS, importance sampling, the pilot) runs a few steps
on the actual model, device and dtype, on chains of its own (the run's random streams are untouched), and the seconds
per chain and step are multiplied by the stage's chain-steps. A first timing on a small batch (PROBE_ELEMENTS state
entries) says where the run spends its time; a second one, on batches up to the run's own, aims at TIMING_BUDGET seconds
(and at most TIMING_FRACTION of the predicted run), half shared out in proportion to the stages' predicted shares and
half equally, but is at least twice the first batch, and a third one on a batch 8 times larger follows where it takes at
most WIDER_TIMING_LIMIT seconds (and 2% of the predicted run): per-chain costs depend on the batch (per-call overhead in
small ones; cache and page faults in large ones: per-vector AIS on the 784-500-1000 DBM cost 1.7 times more per chain at
559 vectors than at 70), so every stage is timed on a batch of a useful size and the one that dominates close to its
real one. On a GPU the timings of a stage also separate a step's fixed cost (launches, Python) from its cost per chain,
so that a step that is mostly fixed cost at the timed batches is not priced as if each chain paid it
(`timers.Timer.step_cost_at_full`). The exact enumeration is counted (`exact.exact_cost`) and the count priced with a
timed float64 product and softplus. The estimate is for one process on a machine as loaded as it is while it is
measured. The memory of each stage is `raise_eval.evaluation.memory`'s. Each stage builds its own timer
(`evaluation.stages`); the clock and the timers are `evaluation.timers`'.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from raise_eval.evaluation.memory import CostEstimate
from raise_eval.evaluation.plan import plan_loop_options
from raise_eval.evaluation.stages import STAGE, plan_memory, stage_timers
from raise_eval.evaluation.timers import (
    PROBE_STEPS,
    TIMED_STEPS,
    TIMING_BUDGET,
    TIMING_FRACTION,
    WIDER_FACTOR,
    WIDER_TIMING_FRACTION,
    WIDER_TIMING_LIMIT,
)
from raise_eval.runtime import product_routes
from raise_eval.settings import Named
from raise_eval.step_programs import current_loop_options, loop_options


def estimate_cost(plan, *, budget: float = TIMING_BUDGET) -> CostEstimate:
    """The predicted wall time and peak memory of `plan` (an `evaluate.EvaluationPlan`), stage by stage.

    Runs each stage's kernels for a few steps on chains of its own (see the module docstring; `budget` bounds the
    seconds of the second, larger timings), so that the estimate is this model's on this device, dtype and thread
    count. The plan and its random streams are left as they were.
    """
    with product_routes.forced_route(plan.settings.product_route), loop_options(**plan_loop_options(plan.settings)):
        # the timed steps fuse their elementwise work as the run's long stages will ('auto' decides by a run's
        # length, and the timings are short)
        chains = max(plan.ais_chains, min(plan.raise_examples, plan.n_test) * plan.raise_chains)
        with loop_options(fuse=current_loop_options().fuse_for(plan.model.device, chains * plan.steps)):
            return _estimate(plan, budget)


def _graph_steps(plan) -> dict[str, int]:
    """The steps to time for the stages (AIS, RAISE) whose path runs as a step program in CUDA graphs: the first
    eager step and three graphs."""
    options = current_loop_options()
    per_graph = options.steps_per_graph
    if plan.model.device.type != "cuda" or not per_graph or plan.path.step_program(options) is None:
        return {}
    steps = {"ais": 1 + 3 * per_graph}
    if plan.family != "DBN":  # a DBN's RAISE anneals its posterior path, which has no program
        steps["raise"] = 1 + 3 * per_graph
    return steps


def _estimate(plan, budget: float) -> CostEstimate:
    begin = time.perf_counter()
    stages = [replace(s) for s in (plan.cost.stages if getattr(plan, "cost", None) is not None else plan_memory(plan))]
    generator = torch.Generator(device=plan.model.device).manual_seed(0)
    timers = stage_timers(plan, generator)
    for t in timers.values():
        t.fit_fixed_cost = plan.model.device.type != "cpu"
    # Stages that run as step programs in CUDA graphs are timed over graphs (the first eager step, the first graph
    # with its capture, then the graphs that count): a few eager steps would price the launches a graph saves.
    graphed = _graph_steps(plan)
    with torch.no_grad():
        for name, t in timers.items():
            t.measure(t.probe, graphed.get(name, PROBE_STEPS))
        predicted = {name: t.seconds() for name, t in timers.items()}
        total = sum(predicted.values())
        allowed = min(budget, TIMING_FRACTION * total)
        for name, t in timers.items():
            if t.full <= t.batch or t.per_step <= 0 or total <= 0:
                continue
            # a batch whose start and TIMED_STEPS steps take this stage's part of the allowance
            share = 0.5 * predicted[name] / total + 0.5 / len(timers)
            batch = int(allowed * share / (TIMED_STEPS * t.per_step + t.start_scales * t.per_start))
            # at least twice the first batch, so that the two timings separate a step's fixed cost (`Timer`)
            t.measure(min(max(batch, 2 * t.batch), t.full), graphed.get(name, TIMED_STEPS))
            wider = min(WIDER_FACTOR * t.batch, t.full)
            wider_limit = min(WIDER_TIMING_LIMIT, WIDER_TIMING_FRACTION * total)
            if wider > t.batch and TIMED_STEPS * t.per_step * wider <= wider_limit:
                # a batch several times larger: the line through the smallest and the largest timing is then
                # decided by the cost of the batch, not by noise in the small timing
                t.measure(wider, graphed.get(name, TIMED_STEPS))
        priced = {s.name: STAGE[s.name].price(plan) for s in stages if STAGE[s.name].price is not None}
    for s in stages:
        s.seconds = priced[s.name] if s.name in priced else timers[s.name].seconds() if s.name in timers else 0.0
    batches = ", ".join(f"{STAGE[name].label} {t.batch:,} {t.unit}" for name, t in timers.items())
    threads = torch.get_num_threads()
    how = (
        f"timed in {time.perf_counter() - begin:.2f} s: a few steps of each stage's own code on this model "
        f"({batches}), {threads} thread{'s' if threads != 1 else ''}"
        + ("; the exact enumeration counted and priced" if plan.use_exact else "")
    )
    estimate = CostEstimate(stages, int(plan.max_memory), how, time.perf_counter() - begin)
    log_f = estimate.stage("log_f")
    if log_f is not None and estimate.seconds and log_f.seconds / estimate.seconds >= 0.5:
        check = estimate.stage("log_f_check")
        share = (log_f.seconds + (check.seconds if check else 0.0)) / estimate.seconds
        estimate.notes.append(
            Named(
                f"log f(v) and its check are {share:.0%} of the time and do not depend on {{steps}}: {{test_subset}} N "
                f"estimates on N of the {plan.n_test:,} test vectors (or lower "
                "{log_f_ais_steps}/{log_f_ais_chains}/"
                "{log_f_samples})"
            )
        )
    return estimate


__all__ = ["estimate_cost"]
