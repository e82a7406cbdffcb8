"""log f(v) of every test vector (exact, or estimated: importance sampling, per-vector AIS, the mean-field bound),
and its check: the same estimator LOG_F_CHECK_FACTOR times longer on a fixed subset, from its own stream."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from raise_eval.annealing import anneal, check_finite
from raise_eval.estimators.control_variates import OVERFLOW_HINT
from raise_eval.estimators.unnormalized import _CHUNK_ELEMENTS as LOG_F_CHUNK_ELEMENTS
from raise_eval.estimators.unnormalized import (
    LogUnnormalizedEstimate,
    ais_chunk_vectors,
    log_unnormalized_estimate,
)
from raise_eval.evaluation.log_f_check import LOG_F_CHECK_FACTOR, LogFCheck, check_log_f, check_subset
from raise_eval.evaluation.memory import (
    LOG_F_RESULT_BYTES,
    MEAN_FIELD_BYTES,
    POSTERIOR_BYTES,
    SCHEDULE_BYTES_PER_STEP,
    Held,
    MemoryTerm,
    StageMemory,
    dtype_size,
    term,
)
from raise_eval.evaluation.report import ExactValues
from raise_eval.evaluation.stages.stage import Stage
from raise_eval.evaluation.timers import START_VECTORS, StepClock, Timer, TimingContext, probe_batch
from raise_eval.paths.posterior import posterior_path
from raise_eval.runtime.sharding import log_f_bytes
from raise_eval.schedules import linear_schedule
from raise_eval.seeds import stage_seed


def log_f_stage(plan, exact_values: Optional[ExactValues] = None, checkpoint=None):
    """log f(v) of every test vector: exact (an RBM's closed form, or the enumerated values of `exact_values`) or
    estimated with the plan's method from one stream (seed + 2) through chunks fixed by the settings."""
    device = plan.model.device
    if plan.exact_log_f:
        log_f = exact_values.log_f.to(device)
        return _finite_log_f(LogUnnormalizedEstimate(log_f, torch.zeros_like(log_f), "exact", 0, 0.0))
    generator = torch.Generator(device=device).manual_seed(stage_seed(plan.seed, "log_f"))
    return _finite_log_f(
        log_unnormalized_estimate(
            plan.model,
            plan.test,
            **plan.log_f_options,
            generator=generator,
            progress=plan.progress,
            checkpoint=None if checkpoint is None else checkpoint(generator),
        )
    )


def _finite_log_f(estimate: LogUnnormalizedEstimate) -> LogUnnormalizedEstimate:
    """`estimate`, or `NonFiniteLogWeightError` naming log f(v) when a test vector's is NaN or infinite (finite
    parameters too large for the model's dtype overflow it): no average with it may reach a table."""
    check_finite(estimate.log_unnormalized, "log f(v)", "the test vectors' log f(v)", OVERFLOW_HINT)
    return estimate


def log_f_check_stage(plan, main: LogUnnormalizedEstimate) -> Optional[LogFCheck]:
    """Re-estimate log f(v) LOG_F_CHECK_FACTOR times longer (a mean-field bound: by importance sampling) on a fixed
    subset of the test vectors, from its own stream (seed + 5); None when log f(v) is exact or the check is off."""
    if main.method == "exact" or plan.log_f_check <= 0:
        return None
    options = plan.log_f_options
    indices = check_subset(plan.n_test, plan.log_f_check, stage_seed(plan.seed, "log_f_check"))
    longer = dict(options)
    factor = LOG_F_CHECK_FACTOR
    if main.method == "importance":
        longer["num_samples"] = options["num_samples"] * factor
        budget = longer["num_samples"]
    elif main.method == "ais":
        longer["ais_steps"] = options["ais_steps"] * factor
        budget = longer["ais_steps"]
    else:  # the mean-field bound against the other estimator
        longer["method"], factor, budget = "importance", 1, options["num_samples"]
    generator = torch.Generator(device=plan.model.device).manual_seed(stage_seed(plan.seed, "log_f_check"))

    def estimate(v: Tensor) -> Tensor:
        return log_unnormalized_estimate(
            plan.model, v, **longer, generator=generator, progress=plan.progress
        ).log_unnormalized

    return check_log_f(
        estimate,
        plan.test,
        main.log_unnormalized,
        indices=indices,
        method=longer["method"],
        budget=budget,
        factor=factor,
    )


def _log_f_chunk(plan, method: str, samples: int, chains: int, n: int) -> MemoryTerm:
    """One chunk of `log_unnormalized_estimate` on n vectors. Its size is fixed (about 2^23 state entries; 2^25 for
    a DBN's per-vector AIS) unless
    one vector's samples or chains pass that: the chunk is then one vector, and grows with the option."""
    model = plan.model
    if method == "importance":
        vectors = min(n, max(1, LOG_F_CHUNK_ELEMENTS // (samples * max(model.layer_sizes))))
        size, option, value = log_f_bytes(model, n, samples, LOG_F_CHUNK_ELEMENTS), "{log_f_samples}", samples
    else:
        posterior = posterior_path(model)
        elements = posterior.state_elements()
        vectors = min(n, ais_chunk_vectors(posterior, chains))
        per_entry = POSTERIOR_BYTES[plan.family](dtype_size(model.dtype))
        start = vectors * sum(model.layer_sizes) * MEAN_FIELD_BYTES if plan.family == "DBM" else 0
        size, option, value = vectors * chains * elements * per_entry + start, "{log_f_ais_chains}", chains
    what = f"one chunk of {vectors:,} vector{'s' if vectors > 1 else ''}"
    return MemoryTerm(what, size, option, value, size // value if vectors == 1 else 0)


def _log_f_schedule(method: str, steps: int, factor: int = 1) -> MemoryTerm:
    """The schedule of per-vector AIS at `factor` times log_f_ais_steps (none for the other estimators)."""
    if method != "ais":
        return MemoryTerm("no schedule", 0)
    what = f"the schedule of {factor * steps:,} steps"
    return term(what, steps + 1, factor * SCHEDULE_BYTES_PER_STEP, "{log_f_ais_steps}", extra=1)


def log_f_memory(held: Held) -> StageMemory:
    plan = held.plan
    model, n, method, options = plan.model, plan.n_test, plan.log_f_method, plan.log_f_options
    out: StageMemory = None
    if method in ("importance", "ais"):
        chunk = _log_f_chunk(plan, method, options["num_samples"], options["ais_chains"], n)
        if method == "importance":
            work = f"{n:,} vectors x {options['num_samples']:,} importance samples"
        else:
            work = f"{n:,} vectors x {options['ais_chains']:,} chains x {options['ais_steps']:,} steps (per-vector AIS)"
        terms = [
            chunk,
            MemoryTerm("a float64 copy of the model", held.params64 if plan.family == "DBM" else 0),
            term("the estimates", n, LOG_F_RESULT_BYTES, "{test_subset}", least=2),
            _log_f_schedule(method, options["ais_steps"]),
        ]
        out = work, terms, True
    elif method == "mean-field":
        terms = [
            term("the mean-field marginals of every test vector", n,
                  sum(model.layer_sizes) * MEAN_FIELD_BYTES, "{test_subset}", least=2),
            MemoryTerm("a float64 copy of the model", held.params64),
        ]  # fmt: skip
        out = f"{n:,} vectors, mean-field bound", terms, True
    held.kept.append(term("the log f(v) estimates", n, 16, "{test_subset}", least=2))
    return out


def log_f_check_memory(held: Held) -> StageMemory:
    plan = held.plan
    method, options = plan.log_f_method, plan.log_f_options
    checked = min(plan.log_f_check, plan.n_test)
    if method not in ("importance", "ais", "mean-field") or checked <= 0:
        return None
    r, c = min(plan.raise_examples, plan.n_test), plan.raise_chains
    factor = LOG_F_CHECK_FACTOR if method != "mean-field" else 1
    check_method = "ais" if method == "ais" else "importance"
    samples = options["num_samples"] * (factor if method == "importance" else 1)
    terms = [
        _log_f_chunk(plan, check_method, samples, options["ais_chains"], checked),
        _log_f_schedule(method, options["ais_steps"], factor),
        term(f"RAISE's {r:,} x {c:,} log-weights", r * c, 8, "{raise_examples} x {raise_chains}", least=2),
    ]
    work = f"{checked:,} vectors, " + (f"{factor} times longer" if factor > 1 else "by importance sampling")
    return work, terms, True


def _ais_timer(context: TimingContext, vectors_timed: int, steps_run: int) -> Timer:
    """Per-vector AIS of `vectors_timed` vectors at `steps_run` steps: what `log_unnormalized_estimate` does per
    chunk, the proposal's start (the mean field of each vector), then AIS. The start is timed once (on a few vectors)
    and shared by the log f(v) stage and its check; the steps on `batch` chains of two vectors, which cost what as
    many chains spread over more vectors cost (the tensors have the same sizes)."""
    plan, model, test, generator = context.plan, context.plan.model, context.plan.test, context.generator
    n, chains = plan.n_test, plan.log_f_options["ais_chains"]
    posterior = context.memo.setdefault("posterior", posterior_path(model))
    start_seconds = context.memo.setdefault("log_f start seconds", [])  # per vector, timed once

    def time_log_f_ais(batch: int, steps: int) -> tuple[float, float]:
        clock = StepClock(context.device)
        if not start_seconds:
            vectors = min(n, START_VECTORS)
            posterior.start(test[:1], 1, generator)  # warm-up
            begin = clock.now()
            posterior.start(test[:vectors], 1, generator)
            start_seconds.append((clock.now() - begin) / vectors)
        vectors = min(n, 2)
        per_vector = max(1, batch // vectors)
        state, _ = posterior.start(test[:vectors], per_vector, generator)
        anneal(posterior, state, linear_schedule(steps), generator=generator, on_step=clock.on_step("log f(v)"),
               desc="log f(v) by AIS")  # fmt: skip
        return clock.step_seconds("log f(v)") / (vectors * per_vector), start_seconds[0] / chains

    vectors = min(n, ais_chunk_vectors(posterior, chains))
    probe = probe_batch(vectors * chains, posterior.state_elements(), chains)
    return Timer(
        time_log_f_ais, float(vectors_timed) * chains * steps_run, vectors_timed * chains,
        min(vectors_timed, vectors) * chains, probe, chains, start_scales=False,
    )  # fmt: skip


def _importance_timer(context: TimingContext, samples: int, vectors: int) -> Timer:
    model, test = context.plan.model, context.plan.test

    def time_importance(batch: int, steps: int) -> tuple[float, float]:
        clock = StepClock(context.device)
        begin = clock.now()
        log_unnormalized_estimate(model, test[:batch], method="importance", num_samples=samples,
                                  generator=context.generator)  # fmt: skip
        return (clock.now() - begin) / batch, 0.0

    chunk = max(1, LOG_F_CHUNK_ELEMENTS // (samples * max(model.layer_sizes)))
    full = min(vectors, chunk)
    return Timer(time_importance, vectors, 0, full, probe_batch(full, samples * max(model.layer_sizes)), unit="vectors")


def log_f_timer(context: TimingContext) -> Optional[Timer]:
    plan, model = context.plan, context.plan.model
    method, options, n = plan.log_f_method, plan.log_f_options, plan.n_test
    if method == "ais":
        return _ais_timer(context, n, options["ais_steps"])
    if method == "importance":
        return _importance_timer(context, options["num_samples"], n)
    if method == "mean-field":

        def time_mean_field(batch: int, steps: int) -> tuple[float, float]:
            clock = StepClock(context.device)
            begin = clock.now()
            model.mean_field_bound(plan.test[:batch])
            return (clock.now() - begin) / batch, 0.0

        return Timer(time_mean_field, n, 0, n, probe_batch(n, sum(model.layer_sizes)), unit="vectors")
    return None  # exact: counted with the exact stage


def log_f_check_timer(context: TimingContext) -> Optional[Timer]:
    plan = context.plan
    method, options = plan.log_f_method, plan.log_f_options
    checked = min(plan.log_f_check, plan.n_test)
    if not checked:
        return None
    if method == "ais":
        return _ais_timer(context, checked, options["ais_steps"] * LOG_F_CHECK_FACTOR)
    if method == "importance":
        return _importance_timer(context, LOG_F_CHECK_FACTOR * options["num_samples"], checked)
    if method == "mean-field":  # the mean-field bound is checked by importance sampling
        return _importance_timer(context, options["num_samples"], checked)
    return None


LOG_F = Stage(
    "log_f", "log f(v)", "log_f_seconds", "log_f", "log_f", "the log f(v) estimates", run=log_f_stage,
    memory=log_f_memory, timer=log_f_timer,
)
LOG_F_CHECK = Stage(
    "log_f_check", "log f(v) check", "log_f_check_seconds", "log_f_check", None, "the log f(v) check",
    run=log_f_check_stage, memory=log_f_check_memory, timer=log_f_check_timer,
)
