"""The stages of one evaluation, each a small function of the plan (and of what earlier stages produced):
`run_evaluation` composes them for one K; `raise_eval.certification` runs the K-independent ones (exact values,
log f(v), its check) once and the others at every K."""

from __future__ import annotations

import time
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval import exact as exact_mod
from raise_eval.adaptive import adaptive_pilot
from raise_eval.annealing import check_finite
from raise_eval.estimators.ais import AISResult
from raise_eval.estimators.control_variates import OVERFLOW_HINT
from raise_eval.estimators.raise_ import RAISEResult
from raise_eval.estimators.unnormalized import LogUnnormalizedEstimate, log_unnormalized_estimate
from raise_eval.evaluation.log_f_check import LOG_F_CHECK_FACTOR, LogFCheck, check_log_f, check_subset
from raise_eval.evaluation.plan import EvaluationPlan
from raise_eval.evaluation.report import ExactValues
from raise_eval.runtime.sharding import sharded_ais, sharded_raise
from raise_eval.seeds import stage_seed


def pilot_stage(plan: EvaluationPlan) -> tuple[Tensor, Any]:
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


def ais_stage(plan: EvaluationPlan, betas: Tensor, store=None) -> AISResult:
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


def exact_stage(plan: EvaluationPlan) -> ExactValues:
    """Exact log Z and (for DBMs and DBNs) exact log f(v) of every test vector, enumerated in chunks within the
    memory bound."""
    model, test = plan.model, plan.test
    t0 = time.perf_counter()
    cost = exact_mod.exact_cost(model, test.shape[0])
    limit = max(plan.max_exact_units, cost.log_z_units, cost.log_f_units)
    # Chunks beyond a few hundred MB are no faster: at most exact.DEFAULT_MAX_BYTES, and half the memory bound.
    budget = {"max_bytes": max(min(int(plan.max_memory) // 2, exact_mod.DEFAULT_MAX_BYTES), 1 << 20)}
    log_z = exact_mod.log_partition(model, max_units=limit, progress=plan.progress, **budget)
    log_f = None
    if plan.exact_log_f:
        log_f = exact_mod.log_unnormalized_visible(model, test, max_units=limit, progress=plan.progress, **budget)
    words = {"odd": "odd-layer", "even": "even-hidden-layer", "dbn": "directed-layer"}.get(cost.log_f_route, "")
    route = f"log f(v) over 2^{cost.log_f_units} {words} configurations" if plan.exact_log_f else ""
    return ExactValues(float(log_z), log_f, time.perf_counter() - t0, route)


def log_f_stage(plan: EvaluationPlan, exact_values: Optional[ExactValues] = None, checkpoint=None):
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


def log_f_check_stage(plan: EvaluationPlan, main: LogUnnormalizedEstimate) -> Optional[LogFCheck]:
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


def raise_subset(plan: EvaluationPlan) -> Tensor:
    """The test vectors RAISE runs on: a random subset from its own stream (seed + 3), sorted; all when fewer."""
    if plan.raise_examples >= plan.n_test:
        return torch.arange(plan.n_test)
    subset = torch.randperm(plan.n_test, generator=torch.Generator().manual_seed(stage_seed(plan.seed, "raise_subset")))
    return subset[: plan.raise_examples].sort().values


def raise_stage(plan: EvaluationPlan, betas: Tensor, subset: Tensor, store=None) -> RAISEResult:
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
