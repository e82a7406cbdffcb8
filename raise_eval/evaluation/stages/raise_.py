"""RAISE on a subset of the test vectors (heating for a DBM; for a DBN heated or unrolled), in shards of whole test
vectors: the conservative side of the sandwich."""

from __future__ import annotations

import torch
from torch import Tensor

from raise_eval.estimators.raise_ import RAISEResult, raise_log_likelihood
from raise_eval.evaluation.memory import LOG_WEIGHT_BYTES, Held, StageMemory, term
from raise_eval.evaluation.stages.stage import Stage
from raise_eval.evaluation.timers import StepClock, Timer, TimingContext, probe_batch
from raise_eval.runtime.sharding import (
    bytes_per_chain,
    chain_units,
    raise_vectors_per_shard,
    shard_bounds,
    sharded_raise,
)
from raise_eval.schedules import linear_schedule
from raise_eval.seeds import stage_seed


def raise_subset(plan) -> Tensor:
    """The test vectors RAISE runs on: a random subset from its own stream (seed + 3), sorted; all when fewer."""
    if plan.raise_examples >= plan.n_test:
        return torch.arange(plan.n_test)
    subset = torch.randperm(plan.n_test, generator=torch.Generator().manual_seed(stage_seed(plan.seed, "raise_subset")))
    return subset[: plan.raise_examples].sort().values


def raise_stage(plan, betas: Tensor, subset: Tensor, store=None) -> RAISEResult:
    """RAISE on the subset (heating for a DBM; for a DBN heated or unrolled, `plan.dbn_start`), in shards of whole
    test vectors."""
    return sharded_raise(
        plan.path,
        plan.test[subset.to(plan.model.device)],
        betas,
        plan.raise_chains,
        seed=plan.seed,
        shard_size=plan.shard_size,
        unroll=plan.model if plan.family == "DBN" else None,
        dbn_start=plan.dbn_start,
        progress=plan.progress,
        store=store,
    )


def raise_memory(held: Held) -> StageMemory:
    plan = held.plan
    model, family, shard, k = plan.model, plan.family, plan.shard_size, plan.steps
    r, c = min(plan.raise_examples, plan.n_test), plan.raise_chains
    vectors = min(raise_vectors_per_shard(shard, c), r)
    raise_shards = len(shard_bounds(r, raise_vectors_per_shard(shard, c)))
    how = ""
    if family == "DBM" or (family == "DBN" and plan.dbn_start == "heated"):
        how = " (heating and reverse)"
    elif family == "DBN":
        how = " (unrolled)"
    how += f" in {raise_shards:,} shards" if raise_shards > 1 else ""
    terms = [
        term(f"one shard of {vectors:,} vectors x {c:,} chains", vectors * c,
              bytes_per_chain(chain_units(model), model.dtype),
              "{shard_size}" if vectors > 1 else "{raise_chains}"),
        term(f"the log-weights of {r:,} x {c:,} chains", r * c, LOG_WEIGHT_BYTES,
              "{raise_examples} x {raise_chains}", least=2),
        held.schedule,
    ]  # fmt: skip
    return f"{r:,} vectors x {c:,} chains x {k:,} steps{how}", terms, False


def raise_timer(context: TimingContext) -> Timer:
    plan, path, model = context.plan, context.path, context.plan.model
    r, c = min(plan.raise_examples, plan.n_test), plan.raise_chains
    unroll = model if plan.family == "DBN" else None

    def time_raise(batch: int, steps: int) -> tuple[float, float]:
        vectors = max(1, batch // c)
        clock = StepClock(context.device)
        raise_log_likelihood(
            path, plan.test[:vectors], linear_schedule(steps), c, generator=context.generator, unroll=unroll,
            dbn_start=plan.dbn_start, checkpoint=clock,
        )  # fmt: skip
        chains = vectors * c
        per_step = clock.step_seconds("RAISE") + (clock.step_seconds("heating") if "heating" in clock.stamps else 0.0)
        first = "heating" if "heating" in clock.stamps else "RAISE"
        start = clock.start_seconds(first, "RAISE")
        return per_step / chains, start / chains

    full = min(raise_vectors_per_shard(plan.shard_size, c), r) * c
    return Timer(time_raise, float(r) * c * plan.steps, r * c, full, probe_batch(full, chain_units(model), c), c)


RAISE = Stage(
    "raise", "RAISE", "raise_seconds", "raise", "raise", "RAISE", run=raise_stage, memory=raise_memory,
    timer=raise_timer,
)
