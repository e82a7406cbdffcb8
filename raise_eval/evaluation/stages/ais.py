"""AIS over the annealed machine, in shards (`runtime.sharding`): the optimistic side of the sandwich."""

from __future__ import annotations

from torch import Tensor

from raise_eval.estimators.ais import AISResult, ais
from raise_eval.evaluation.memory import LOG_WEIGHT_BYTES, Held, StageMemory, term
from raise_eval.evaluation.stages.stage import Stage
from raise_eval.evaluation.timers import StepClock, Timer, TimingContext, probe_batch
from raise_eval.runtime.sharding import bytes_per_chain, chain_units, sharded_ais
from raise_eval.schedules import linear_schedule


def ais_stage(plan, betas: Tensor, store=None) -> AISResult:
    """AIS over the annealed machine in shards (shard i on rank i % world size)."""
    return sharded_ais(
        plan.path,
        betas,
        plan.ais_chains,
        seed=plan.seed,
        shard_size=plan.shard_size,
        progress=plan.progress,
        store=store,
    )


def ais_memory(held: Held) -> StageMemory:
    plan = held.plan
    m, shard, k = plan.ais_chains, plan.shard_size, plan.steps
    shards = len(range(0, m, shard))
    terms = [
        term(f"one shard of {min(m, shard):,} chains", min(m, shard),
              bytes_per_chain(chain_units(plan.path.model), plan.model.dtype), "{shard_size}"),
        term(f"the log-weights of {m:,} chains", m, LOG_WEIGHT_BYTES, "{ais_chains}", least=2),
        held.schedule,
    ]  # fmt: skip
    held.kept.append(term(f"AIS's {m:,} log-weights", m, 8, "{ais_chains}", least=2))
    return f"{m:,} chains x {k:,} steps" + (f" in {shards:,} shards" if shards > 1 else ""), terms, False


def ais_timer(context: TimingContext) -> Timer:
    plan, path = context.plan, context.path

    def time_ais(batch: int, steps: int) -> tuple[float, float]:
        clock = StepClock(context.device)
        ais(path, linear_schedule(steps), batch, generator=context.generator, checkpoint=clock)
        return clock.step_seconds("AIS") / batch, clock.start_seconds("AIS") / batch

    m, shard = plan.ais_chains, min(plan.ais_chains, plan.shard_size)
    return Timer(time_ais, float(m) * plan.steps, m, shard, probe_batch(shard, context.units))


AIS = Stage("ais", "AIS", "ais_seconds", "ais", "ais", "AIS", run=ais_stage, memory=ais_memory, timer=ais_timer)
