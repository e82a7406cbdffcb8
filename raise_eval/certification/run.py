"""Certified evaluation: run the AIS-RAISE sandwich at growing K until it closes, or say why it is still open.

K grows geometrically (x `growth`, from the evaluation's `steps`) until the sandwich closes (`verdict`), the next
K would pass `max_steps`, or the next K's predicted time (from the measured seconds per step of AIS and RAISE)
would not fit `time_budget`. What does not depend on K (the log f(v) estimates, the exact values, the validation of
the data) is computed once and handed to the later evaluations. Every K tried is kept, so the result can be plotted
against K (the RAISE paper's Figures 3-7) and a run continued from a resume file re-runs no finished K.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from raise_eval.certification.energy import ENERGY_ONLY, EnergyRuns, refuse_foreign
from raise_eval.certification.loop import Stopped, grow_until_closed
from raise_eval.certification.report import Certificate, CertifyStep
from raise_eval.certification.settings import CertifySettings
from raise_eval.certification.verdict import step_of
from raise_eval.evaluation.plan import EvaluationPlan, plan_evaluation
from raise_eval.evaluation.report import EvaluationFailed, EvaluationInterrupted
from raise_eval.evaluation.run import run_evaluation
from raise_eval.evaluation.settings import EvaluateSettings, evaluate_settings
from raise_eval.models.contracts import declared_family
from raise_eval.runtime.resume import model_digest, tensor_digest
from raise_eval.runtime.threads import using_threads
from raise_eval.settings import SettingsError, declarations, number_fields
from raise_eval.step_programs import ROUNDED_PATHS

# The settings a certified run's resume file must agree on (besides the model and the data): those declared to
# change the numbers at some K (`numbers=`), the evaluation's `steps` being the first K ('first_steps').
FINGERPRINT_FIELDS = tuple(name for name in number_fields(EvaluateSettings) if name != "steps")
OWN_FINGERPRINT_FIELDS = tuple(name for name in number_fields(CertifySettings) if name != "evaluation")
CERTIFY_FIELDS = ("tolerance", "max_steps", "time_budget", "growth")


def certify(
    model,
    test_data: Tensor,
    settings: Optional[CertifySettings] = None,
    *,
    train_pixel_means: Optional[Tensor] = None,
    labels: Optional[dict[str, Any]] = None,
    resume_file: Optional[str] = None,
    on_step: Optional[Callable[[CertifyStep], Any]] = None,
    **overrides,
) -> Certificate:
    """Run the evaluation (`raise_eval.evaluate`) at K = steps, growth x steps, ... until the sandwich closes within
    `tolerance` nats (see `raise_eval.certification.verdict` for every condition) or the next K would pass
    `max_steps` or the `time_budget` (seconds, for the whole certified run, predicted from the measured seconds per
    step).

    Args:
        model, test_data, train_pixel_means, labels: as for `evaluate`. An `EnergyModel` is certified the same way
            (`certification.energy`): its evaluation's keywords kernel, num_leapfrog, pilot_steps, train_data and
            base are taken too, and of the evaluation's settings it reads steps, ais_chains, raise_chains, seed,
            progress and threads.
        settings: a `CertifySettings`; keyword `overrides` change its fields (tolerance, max_steps, time_budget,
            growth) or its evaluation's (steps, init, ...): `certify(model, test, tolerance=0.1, steps=100)`.
        resume_file: a JSON file that keeps every finished K (and the evaluation in progress is resumed through
            `evaluate`'s own resume file, `<resume_file>.K<k>.pt`): the same call continues where it stopped.
        on_step: called with each finished `CertifyStep` (e.g. to print a line).
    Returns:
        a `Certificate` (verdict, interval or reasons, every K tried, the last evaluation's report).
    """
    if declared_family(model) == "energy":  # a user's energy: `evaluate_energy` at each K (certification.energy)
        given = [name for name, value in (("train_pixel_means", train_pixel_means), ("labels", labels))
                 if value is not None]  # fmt: skip
        if given:
            raise ValueError(f"{', '.join(given)} do not apply to an energy model's certified run (its base: "
                             "train_data or base)")  # fmt: skip
        own = {name: overrides.pop(name) for name in ENERGY_ONLY if name in overrides}
        refuse_foreign(set(overrides) - set(CERTIFY_FIELDS))
        settings = certify_settings(settings, overrides)
        data = {name: own.pop(name, None) for name in ("train_data", "base")}
        with using_threads(settings.evaluation.threads):
            runs = EnergyRuns(model, test_data, settings, own, **data)
            return grow_until_closed(runs, settings, resume_file, on_step)
    settings = certify_settings(settings, overrides)
    with using_threads(settings.evaluation.threads):
        return _certify(model, test_data, settings, train_pixel_means, labels, resume_file, on_step)


def certify_settings(settings: Optional[CertifySettings], overrides: dict[str, Any]) -> CertifySettings:
    """`settings` with the keyword `overrides` of `certify`, split between its own fields and its evaluation's."""
    for name in ("log_f", "exact_values"):
        if name in overrides:
            raise ValueError(f"certify manages {name} itself; do not pass it")
    own = {k: overrides.pop(k) for k in CERTIFY_FIELDS if k in overrides}
    if settings is None:
        result = CertifySettings(evaluation=evaluate_settings(None, overrides), **own)
    else:
        result = settings.replace(evaluation=evaluate_settings(settings.evaluation, overrides), **own)
    products = result.evaluation.gpu_products
    if products in ROUNDED_PATHS:
        raise SettingsError(
            f"{{gpu_products}} {products} anneals the model with rounded weights, and RAISE then estimates the rounded "
            "model's log-likelihood, not the model's: a certified verdict needs the model's own on both sides (use "
            "{gpu_products} model)",
            ("gpu_products",),
        )
    return result


def _fingerprint(settings: CertifySettings, plan: EvaluationPlan, train_pixel_means) -> dict[str, Any]:
    """What the numbers at each K depend on (not the tolerance: the reasons are recomputed)."""
    e = settings.evaluation
    out = {
        "first_steps": e.steps,
        **{name: getattr(settings, name) for name in OWN_FINGERPRINT_FIELDS},
        "test_data": tensor_digest([plan.test]),
        "parameters": model_digest(plan.model),
    }
    values = {name: getattr(e, name) for name in FINGERPRINT_FIELDS}
    if plan.family != "DBN":
        values["dbn_start"] = None  # other families ignore it
    values["log_f_method"] = e.log_f_request
    for name in ("log_f_samples", "log_f_ais_steps", "log_f_ais_chains"):
        values[name] = e.log_f_budget(name)
    values["train_pixel_means"] = (
        None if train_pixel_means is None else tensor_digest([torch.as_tensor(train_pixel_means)])
    )
    out.update(sorted(values.items()))
    return out


class PlanRuns:
    """The evaluations of a certified run of a Boltzmann machine or a fully visible model: the evaluation plan,
    decided once, run at each K, with what does not depend on K (log f(v), the exact values) handed on."""

    def __init__(self, model, test_data, settings: CertifySettings, train_pixel_means, labels):
        self.plan = plan = plan_evaluation(
            model, test_data, settings.evaluation, train_pixel_means=train_pixel_means, labels=labels
        )
        if settings.max_steps is not None:
            plan.checked_at_steps(settings.max_steps)  # the largest K must fit the memory bound too: refused now
        self.fingerprint = _fingerprint(settings, plan, train_pixel_means)
        self.legacy_fields = FINGERPRINT_FIELDS  # settings a file of an earlier version may not record
        self.legacy = lambda missing: _fingerprint(_at_defaults(settings, missing), plan, train_pixel_means)
        self.model_label = plan.report_settings.get("model", "")
        self.ais_label = "AIS" if plan.log_f_method == "exact" else "AIS (log f-hat - log Z-hat)"
        self.tolerance = settings.tolerance
        self.names: dict[str, str] = {}  # the reasons' settings as the caller calls them
        self.reused: dict[str, Any] = {}
        # Why a gap that stopped shrinking may stay: a DBN's unrolled start costs a fixed amount at every K.
        self.fixed_cost_note = (
            " (RAISE started from one draw of the recognition distribution, {dbn_start} unrolled, which costs "
            "a fixed amount at every K where that distribution misses modes of p(h | v): {dbn_start} heated "
            "anneals it away)"
            if plan.family == "DBN" and plan.dbn_start == "unrolled"
            else ""
        )

    def run(self, k: int, resume_file: Optional[str]):
        """(the evaluation's report at K = k, its `CertifyStep`, its notes); raises `Stopped`."""
        reused = self.reused
        try:
            report = run_evaluation(
                self.plan.at_steps(k),
                log_f=reused.get("log_f"),
                exact_values=reused.get("exact"),
                log_f_check=reused.get("log_f_check") if "log_f" in reused else None,
                resume_file=resume_file,
            )
        except (EvaluationInterrupted, EvaluationFailed) as stop:
            failed = isinstance(stop, EvaluationFailed)
            if failed:
                reason = f"K = {k:,} stopped during {stop.report.interrupted}: {stop.report.error}"
            else:
                reason = f"interrupted during K = {k:,} ({stop.report.interrupted})"
            raise Stopped(failed, reason, stop.report, stop) from None
        reused.update(log_f=report.log_f, exact=report.exact_values, log_f_check=report.log_f_check)
        if reused["exact"] is None:
            del reused["exact"]
        return report, step_of(report, k, self.tolerance), report.notes


def _certify(model, test_data, settings: CertifySettings, train_pixel_means, labels, resume_file, on_step):
    runs = PlanRuns(model, test_data, settings, train_pixel_means, labels)
    return grow_until_closed(runs, settings, resume_file, on_step)


def _at_defaults(settings: CertifySettings, names) -> CertifySettings:
    """`settings` with the evaluation's fields `names` at their declared defaults."""
    defaults = {spec.name: spec.default for spec in declarations(EvaluateSettings) if spec.name in names}
    return settings.replace(evaluation=settings.evaluation.replace(**defaults))
