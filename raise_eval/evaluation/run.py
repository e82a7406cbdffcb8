"""Run an evaluation: `run_evaluation(plan)` composes the stages of one K; `evaluate(model, data, ...)` is the API
(and `raise-eval evaluate`'s work): `run_evaluation(plan_evaluation(model, data, EvaluateSettings(...)))`.

Inside an initialized torch.distributed process group (e.g. under torchrun) the AIS and RAISE shards are shared out
over the ranks (shard i on rank i % world size) and the log f(v) estimates are made on rank 0; every rank returns
the same full report, bit-identical to a one-process run.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval._version import __version__
from raise_eval.annealing import NonFiniteLogWeightError
from raise_eval.estimators.unnormalized import LogUnnormalizedEstimate
from raise_eval.evaluation.energy import evaluate_energy
from raise_eval.evaluation.fully_visible import FAMILY as FULLY_VISIBLE
from raise_eval.evaluation.log_f_check import LogFCheck
from raise_eval.evaluation.memory import CostEstimate
from raise_eval.evaluation.plan import EvaluationPlan, plan_evaluation, plan_loop_options
from raise_eval.evaluation.report import EvaluationFailed, EvaluationInterrupted, EvaluationReport, ExactValues
from raise_eval.evaluation.rounding import rounding_note, rounding_report
from raise_eval.evaluation.settings import EvaluateSettings, evaluate_settings
from raise_eval.evaluation.stages import (
    STAGE,
    STAGES,
    ais_stage,
    exact_stage,
    log_f_check_stage,
    log_f_stage,
    pilot_stage,
    raise_stage,
    raise_subset,
    ti_stage,
)
from raise_eval.models import native
from raise_eval.models.contracts import declared_family
from raise_eval.paths.boltzmann import BoltzmannPath
from raise_eval.runtime import distributed, product_routes
from raise_eval.runtime.resume import (
    ResumeFile,
    check_world_size,
    deferred_interrupts,
    model_digest,
    rank_resume_file,
    tensor_digest,
)
from raise_eval.runtime.sharding import raise_vectors_per_shard, shard_bounds
from raise_eval.runtime.threads import using_threads
from raise_eval.settings import number_fields
from raise_eval.step_programs import current_loop_options, loop_options


def evaluate(
    model,
    test_data: Tensor,
    settings: Optional[EvaluateSettings] = None,
    *,
    train_pixel_means: Optional[Tensor] = None,
    labels: Optional[dict[str, Any]] = None,
    log_f: Optional[LogUnnormalizedEstimate] = None,
    exact_values: Optional[ExactValues] = None,
    resume_file: Optional[str] = None,
    **overrides,
) -> EvaluationReport:  # an EnergyReport for an energy model
    """Estimate the average test log-likelihood of an RBM, DBM or DBN with AIS and RAISE (and exactly when
    tractable); an `EnergyModel` runs `evaluation.energy.evaluate_energy(model, test_data, settings, **overrides)`
    (its settings an `EnergySettings`; train_data, base and progress among the keywords) and returns its report.

    Args:
        model: an `RBM`, `DBM` (or any `LayeredBoltzmannMachine`), `DBN` or `FullyVisibleModel`, on the device and
            in the dtype to compute with.
        test_data: binary test vectors (N, n_visible); for a `MixedBoltzmannMachine`, its visible layer's states
            in any form `prepare_visible` reads (real vectors, integer codes or one-hot rows, ±1 or 0/1 spins); for a
            `FullyVisibleModel`, its site states (N, L): integer codes, -1/+1 or 0/1.
        settings: an `EvaluateSettings` (see its fields for every setting, their defaults and meaning); keyword
            `overrides` change fields of it (or of the defaults): `evaluate(model, test, steps=4000)`. A tensor
            passed as `schedule` is an explicit schedule (its `betas`).
        train_pixel_means: means over the training set of the annealed machine's visible layer, for
            init='base-rates': pixel means for an RBM or DBM, for a DBN the recognition means of its top RBM's
            visible layer (`recognition_means`), for a `MixedBoltzmannMachine` the means of its visible layer's
            sufficient statistics (`raise_eval.visible_statistics(model, train_data)`), for a `FullyVisibleModel` its
            sites' state frequencies (L, q) (the same function; without them the base is uniform, with a note).
        labels: entries for the report's settings that describe the inputs (e.g. {"checkpoint": path}).
        log_f: the log f(v) estimates of these test vectors from an earlier run with the same model, test data and
            log f(v) settings (its `report.log_f`); reused instead of recomputed (they depend on neither the start
            nor K). Checked for shape and method.
        exact_values: exact values from an earlier run on the same model and test data (`report.exact_values`).
        resume_file: keep every finished shard, the log f(v) estimates and the annealing state of the shard in
            progress (every `resume_interval` seconds, and at Ctrl-C) in this file, and continue from what it holds
            (`raise_eval.runtime.resume`); refused when it was written with other settings. Under torch.distributed
            each rank keeps its own file, `<resume_file>.rank<r>-of-<world size>`.

    The work is `run_evaluation(plan_evaluation(model, test_data, settings))`: the settings checked once when
    built, the plan decided once, then the stages (`raise_eval.evaluation.stages`). The torch thread count is
    `settings.threads` for the call ('auto': the idle cores), the caller's restored on return.
    """
    if declared_family(model) == "energy":  # a user's energy: its own evaluation (evaluation.energy)
        given = [name for name, value in (("train_pixel_means", train_pixel_means), ("labels", labels),
                 ("log_f", log_f), ("exact_values", exact_values), ("resume_file", resume_file)) if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} do not apply to an energy model's evaluation (evaluate_energy)")
        return evaluate_energy(model, test_data, settings, **overrides)
    settings = evaluate_settings(settings, overrides)
    with using_threads(settings.threads):
        plan = plan_evaluation(model, test_data, settings, train_pixel_means=train_pixel_means, labels=labels)
        return run_evaluation(plan, log_f=log_f, exact_values=exact_values, resume_file=resume_file)


def _check_reused(plan: EvaluationPlan, log_f, exact_values) -> None:
    """Refuse reused log f(v) estimates or exact values that do not belong to this plan."""
    n = plan.n_test
    if exact_values is not None:
        if not plan.use_exact:
            raise ValueError("exact_values were passed to a run that does not compute exact values (exact='never')")
        if exact_values.log_f is not None and tuple(exact_values.log_f.shape) != (n,):
            raise ValueError(
                f"exact_values hold log f(v) of {tuple(exact_values.log_f.shape)} vectors; this run has {n} (pass "
                "the exact_values of a report on the same model and test data, or None)"
            )
    if log_f is None:
        return
    expected = plan.log_f_method
    if log_f.method != expected or tuple(log_f.log_unnormalized.shape) != (n,):
        raise ValueError(
            f"log_f holds {log_f.method} estimates of {tuple(log_f.log_unnormalized.shape)} vectors; this run needs "
            f"{expected} estimates of its {n} test vectors (pass the log_f of a report on the same model and test "
            "data, or None)"
        )
    options = plan.log_f_options
    if log_f.method == "importance" and log_f.num_samples != options["num_samples"]:
        raise ValueError(
            f"log_f used {log_f.num_samples} importance samples but log_f_samples={options['num_samples']}; they must "
            "agree"
        )
    if log_f.method == "ais" and (log_f.steps, log_f.num_samples) != (options["ais_steps"], options["ais_chains"]):
        raise ValueError(
            f"log_f used AIS with {log_f.steps} steps x {log_f.num_samples} chains but log_f_ais_steps="
            f"{options['ais_steps']}, log_f_ais_chains={options['ais_chains']}; they must agree"
        )


@torch.no_grad()  # evaluation never needs gradients (a model of nn.Parameters, a test tensor that requires grad)
def run_evaluation(
    plan: EvaluationPlan,
    *,
    log_f: Optional[LogUnnormalizedEstimate] = None,
    exact_values: Optional[ExactValues] = None,
    log_f_check: Optional[LogFCheck] = None,
    resume_file: Optional[str] = None,
    cost_estimate: Optional[CostEstimate] = None,
) -> EvaluationReport:
    """Run the stages of one evaluation (pilot, AIS, exact values, log f(v), RAISE, the log f(v) check, control
    variate) on a plan, reusing `log_f`, `exact_values` and `log_f_check` (of the same `log_f`) when given; see
    `evaluate`. `resume_file` keeps the run's progress (`raise_eval.runtime.resume`); `cost_estimate`
    (`estimate_cost(plan)`) is kept in the report (its JSON's "cost_estimate")."""
    if log_f_check is not None and log_f is None:
        raise ValueError("log_f_check is the check of a reused log_f: pass that log_f too")
    _check_reused(plan, log_f, exact_values)
    enclosing = current_loop_options().products
    if enclosing != "model" and enclosing != plan.settings.gpu_products:
        warnings.warn(
            f"an enclosing loop_options(products={enclosing!r}) does not reach evaluate, whose products are its "
            f"settings' gpu_products ({plan.settings.gpu_products!r}): pass gpu_products={enclosing!r} instead",
            UserWarning, stacklevel=3,
        )  # fmt: skip
    with product_routes.forced_route(plan.settings.product_route), loop_options(**plan_loop_options(plan.settings)):
        return _run(plan, log_f, exact_values, log_f_check, resume_file, cost_estimate)


def _run(plan: EvaluationPlan, log_f, exact_values, log_f_check, resume_file, cost_estimate) -> EvaluationReport:
    model, test, device, rank, world = plan.model, plan.test, plan.model.device, plan.rank, plan.world
    all_settings = dict(plan.report_settings)
    betas = plan.betas
    start_total = time.perf_counter()
    notes: list[str] = []
    store = None
    if resume_file is not None:
        check_world_size(resume_file, world)
        if world > 1:  # each rank keeps its own shards
            resume_file = rank_resume_file(resume_file, rank, world)
        store = ResumeFile(
            resume_file,
            _resume_settings(all_settings, model, test, plan.path, betas),
            interval=plan.settings.resume_interval,
            context={"threads": torch.get_num_threads(), "torch": str(torch.__version__), "raise_eval": __version__},
            older_settings=_settings_before_step_programs,
        )
        for change in store.context_changes:
            notes.append(f"resumed with {change}: the continued run is bit-identical only where these agree")
        # The product routes the interrupted run chose (by timing): the continued one computes as it did.
        product_routes.adopt_route_choices(store.get("product_routes") or [])
    done: dict[str, Any] = {}
    _, first = _unique_rows(test)
    distinct = first.to(device)

    def report(interrupted: Optional[str] = None, error: Optional[str] = None) -> EvaluationReport:
        all_settings["product_routes"] = [c.as_dict() for c in product_routes.route_choices()]
        if device.type == "cpu" and plan.family != FULLY_VISIBLE:  # the site scan uses no C kernel of the step
            all_settings["native_kernels"] = kernels = native.report()
            if kernels["step"] != "in use" and not any(n.startswith("the C kernels") for n in notes):
                notes.append(
                    f"the C kernels of the annealing step are not in use ({kernels['step']}): the PyTorch draws and "
                    "weight update ran, slower, and with other random numbers than where they compile"
                )
            if plan.settings.product_route == "amx" and kernels["amx_products"] != "in use":
                if not any(n.startswith("the amx route") for n in notes):
                    notes.append(f"the amx route cannot run here ({kernels['amx_products']}): torch.mm ran instead")
        _note_a_forced_route_unused(all_settings, notes)
        ais_result, log_f_est, raise_result, cv = (done.get(k) for k in ("ais", "log_f", "raise", "cv"))
        ais_mean = None
        if ais_result is not None and log_f_est is not None:
            ais_mean = float(log_f_est.log_unnormalized.mean()) - ais_result.estimate
        exact = done.get("exact")
        check = done.get("log_f_check")
        return EvaluationReport(
            settings=all_settings,
            num_test=plan.n_test,
            ais=ais_result,
            raise_=raise_result,
            ais_mean=ais_mean,
            raise_mean=None if cv is None else cv.mean,
            raise_stderr=None if cv is None else cv.stderr,
            control_variate=cv,
            log_f=log_f_est,
            log_z_exact=None if exact is None else exact.log_z,
            exact_mean=done.get("exact_mean"),
            timing={"seconds": time.perf_counter() - start_total, **_stage_seconds(done)},
            notes=notes,
            interrupted=interrupted,
            distinct_test=distinct,
            log_f_check=check,
            exact_values=exact,
            cost_estimate=cost_estimate,
            error=error,
            thermodynamic=done.get("ti"),
        )

    if plan.start_note is not None:
        notes.append(plan.start_note)
    stage = STAGE["ais"].interrupted
    try:
        if betas is None:
            stage = STAGE["pilot"].interrupted
            betas, pilot = pilot_stage(plan)
            all_settings["schedule_betas"] = betas.tolist()
            all_settings["pilot_thermodynamic_length"] = pilot.length
            if store is not None:
                store.check_schedule(betas)
            done["pilot"] = pilot
        stage = STAGE["ais"].interrupted
        done["ais"] = ais_stage(plan, betas, store)
        rounding = rounding_report(plan, done["ais"])
        if rounding is not None:
            all_settings["gpu_rounding"] = rounding
            notes.append(rounding_note(plan.settings.gpu_products, rounding))
        if plan.ais_chains > plan.shard_size:
            shards = len(shard_bounds(plan.ais_chains, plan.shard_size))
            notes.append(f"AIS ran in {shards} shards of up to {plan.shard_size} chains")
        if plan.use_exact:
            stage = STAGE["exact"].interrupted
            done["exact"] = exact_values if exact_values is not None else exact_stage(plan)
        elif plan.exact_note is not None:
            notes.append(plan.exact_note)
        if plan.log_f_note is not None:
            notes.append(plan.log_f_note)
        stage = STAGE["log_f"].interrupted
        # Made on rank 0 (other ranks go on to RAISE and receive the estimates afterwards); kept in the resume file.
        log_f_est = log_f
        kept = STAGE["log_f"].resume_stage
        if log_f_est is None and store is not None and store.get(kept) is not None and not plan.exact_log_f:
            log_f_est = _log_f_to(LogUnnormalizedEstimate(**store.get(kept)), device)
        if log_f_est is None and (rank == 0 or plan.exact_log_f):
            checkpoint = None if store is None else (lambda g: store.checkpoint(kept, 0, g))
            with deferred_interrupts() if store is not None else contextlib.nullcontext():
                log_f_est = log_f_stage(plan, done.get("exact"), checkpoint)
            if store is not None and log_f_est.method != "exact":
                store.put(kept, dict(vars(log_f_est)))
        if log_f_est is not None:
            done["log_f"] = log_f_est
        stage = STAGE["raise"].interrupted
        subset = raise_subset(plan)
        done["raise"] = raise_stage(plan, betas, subset, store)
        per_shard = raise_vectors_per_shard(plan.shard_size, plan.raise_chains)
        if len(subset) > per_shard:
            notes.append(
                f"RAISE ran in {len(shard_bounds(len(subset), per_shard))} shards of up to {per_shard} vectors"
            )
        if world > 1 and not plan.exact_log_f:
            done["log_f"] = _log_f_to(distributed.broadcast_from_rank0(log_f_est), device)
        stage = STAGE["log_f_check"].interrupted
        # On every rank (its own stream): every rank returns the same report.
        done["log_f_check"] = log_f_check if log_f_check is not None else log_f_check_stage(plan, done["log_f"])
        stage = "the control variate"
        log_f_all = done["log_f"].log_unnormalized
        done["cv"] = done["raise"].control_variate_mean(
            log_f_all, log_f_all[subset.to(log_f_all.device)], alpha=plan.settings.cv_alpha
        )
        if plan.use_exact:
            exact = done["exact"]
            exact_log_f = log_f_all if exact.log_f is None else exact.log_f.to(log_f_all.device)
            done["exact_mean"] = float(exact_log_f.mean()) - exact.log_z
        if plan.ti_chains:  # beside AIS, from its own stream: in no other number of the report
            stage = STAGE["ti"].interrupted
            done["ti"] = ti_stage(plan, betas)
    except KeyboardInterrupt:
        _note_continued(store, resume_file, notes)
        raise EvaluationInterrupted(report(interrupted=stage)) from None
    except NonFiniteLogWeightError as e:  # no number can come of this stage: keep what finished, as at Ctrl-C
        _note_continued(store, resume_file, notes)
        raise EvaluationFailed(report(interrupted=stage, error=str(e))) from e
    _note_continued(store, resume_file, notes)
    return report()


def _stage_seconds(done: dict[str, Any]) -> dict[str, Optional[float]]:
    """The report's timing entry of every stage (`stages.STAGES`): its result's seconds, None where it did
    not run."""
    return {s.report_key: getattr(done.get(s.name), "seconds", None) for s in STAGES}


def _note_continued(store: Optional[ResumeFile], resume_file, notes: list[str]) -> None:
    """What a resumed run took from its file, in the report's notes (its times cover this invocation only)."""
    if store is not None and store.continued:
        notes.append(
            f"continued from {resume_file}: {'; '.join(store.continued)} (the times shown are this invocation's)"
        )


def _log_f_to(est: LogUnnormalizedEstimate, device) -> LogUnnormalizedEstimate:
    return LogUnnormalizedEstimate(
        est.log_unnormalized.to(device),
        est.stderr.to(device),
        est.method,
        est.num_samples,
        est.seconds,
        getattr(est, "steps", 0),
    )


# What a resume file must agree on: the settings declared to change what it keeps (`numbers="kept"`), as the report
# resolves them, and the inputs that are no settings: the model's description, its device and dtype. An explicit
# schedule (`betas`) is recorded as its name, 'explicit', and the digest `schedule_betas`.
RESUME_INPUTS = ("model", "device", "dtype")
RESUME_KEYS = RESUME_INPUTS + tuple(name for name in number_fields(EvaluateSettings, kept_only=True) if name != "betas")


# What each route computes (models.boltzmann.products), for the note on a forced route that computed nothing
_ROUTE_TAKES = {
    "onednn": "float32 products",
    "table": "products of 0/1 inputs whose tables fit in memory",
    "amx": "float32 products of 0/1 inputs",
}


def _note_a_forced_route_unused(all_settings: dict, notes: list[str]) -> None:
    """A forced product route that could compute none of the run's products (amx or onednn in float64, ...): say
    that torch.mm ran them all (the route's own unavailability, e.g. no AMX tiles, has its note already)."""
    route, by = all_settings.get("product_route"), all_settings.get("product_route_forced_by")
    choices = all_settings.get("product_routes") or []
    if by is None or route == "mm" or any(n.startswith(f"the {route} route") for n in notes):
        return
    if choices and not any(c["how"] == "forced" for c in choices):
        source = "{product_route}" if by == "setting" else f"{by}={route}"
        dtypes = ", ".join(sorted({c["dtype"] for c in choices}))
        notes.append(
            f"the {route} route ({source}) computes {_ROUTE_TAKES.get(route, 'other products')}, and this run's "
            f"products ({dtypes}) are not: torch.mm ran them all"
        )


def _settings_before_step_programs(old: dict) -> dict[str, Any]:
    """What a resume file written before --loop, --gpu-products and --gpu-fuse existed ran with: the eager loop
    (which `auto` still is off CUDA), products in the model's dtype, no fusion."""
    on_cuda = str(old.get("device", "")).startswith("cuda")
    return {"loop": "eager" if on_cuda else "auto", "gpu_products": "model", "gpu_fuse": "none"}


def _resume_settings(all_settings: dict, model, test: Tensor, path: BoltzmannPath, betas) -> dict[str, Any]:
    """What a resume file must agree on: the settings that determine the numbers, with digests of the model's
    parameters, the test data, the start distribution and an explicit schedule."""
    out = {k: all_settings.get(k) for k in RESUME_KEYS}
    if out.get("gpu_fuse") == "auto" and not str(all_settings.get("device", "")).startswith("cuda"):
        out["gpu_fuse"] = "none"  # off CUDA 'auto' never compiles: a file written with 'none' computes the same bits
    out["parameters"] = model_digest(model)
    out["test_data"] = tensor_digest([test])
    out["start_biases"] = tensor_digest(path.base_biases)
    out["schedule_betas"] = tensor_digest([betas]) if all_settings.get("schedule") == "explicit" else None
    return out


def _unique_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """(inverse, index of the first occurrence of each distinct row) of a binary matrix."""
    _, inverse = torch.unique(x, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), x.shape[0], dtype=torch.long, device=x.device)
    first.scatter_reduce_(0, inverse, torch.arange(x.shape[0], device=x.device), reduce="amin")
    return inverse, first


evaluate_rbm = evaluate
