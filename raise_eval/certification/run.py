"""Certified evaluation: run the AIS-RAISE sandwich at growing K until it closes, or say why it is still open.

K grows geometrically (x `growth`, from the evaluation's `steps`) until the sandwich closes (`verdict`), the next
K would pass `max_steps`, or the next K's predicted time (from the measured seconds per step of AIS and RAISE)
would not fit `time_budget`. What does not depend on K (the log f(v) estimates, the exact values, the validation of
the data) is computed once and handed to the later evaluations. Every K tried is kept, so the result can be plotted
against K (the RAISE paper's Figures 3-7) and a run continued from a resume file re-runs no finished K.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from raise_eval.certification.report import Certificate, CertifyFailed, CertifyInterrupted, CertifyStep
from raise_eval.certification.settings import CertifySettings
from raise_eval.certification.verdict import K_INDEPENDENT, gap_per_doubling, reasons_of_step, step_of, trend
from raise_eval.evaluation.plan import EvaluationPlan, plan_evaluation
from raise_eval.evaluation.report import EvaluationFailed, EvaluationInterrupted
from raise_eval.evaluation.run import run_evaluation
from raise_eval.evaluation.settings import EvaluateSettings, evaluate_settings
from raise_eval.io.outputs import OutputError, OutputWarning, OutputWriteError, check_output_path
from raise_eval.io.writing import write_file
from raise_eval.runtime.resume import model_digest, tensor_digest
from raise_eval.runtime.threads import using_threads
from raise_eval.settings import Named, declarations, number_fields

FILE_FORMAT = "raise-eval certify 1"
# The settings a certified run's resume file must agree on (besides the model and the data): those declared to
# change the numbers at some K (`numbers=`), the evaluation's `steps` being the first K ('first_steps').
FINGERPRINT_FIELDS = tuple(name for name in number_fields(EvaluateSettings) if name != "steps")
OWN_FINGERPRINT_FIELDS = tuple(name for name in number_fields(CertifySettings) if name != "evaluation")
CERTIFY_FIELDS = ("tolerance", "max_steps", "time_budget", "growth")
# Fingerprint entries kept as digests, said in words when they differ.
DIGEST_WORDS = {
    "parameters": "the model's parameters differ (another checkpoint, or other weights of the same shapes)",
    "test_data": "the test data differ",
    "train_pixel_means": "the base rates (training data or train_pixel_means) differ",
}


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
        model, test_data, train_pixel_means, labels: as for `evaluate`.
        settings: a `CertifySettings`; keyword `overrides` change its fields (tolerance, max_steps, time_budget,
            growth) or its evaluation's (steps, init, ...): `certify(model, test, tolerance=0.1, steps=100)`.
        resume_file: a JSON file that keeps every finished K (and the evaluation in progress is resumed through
            `evaluate`'s own resume file, `<resume_file>.K<k>.pt`): the same call continues where it stopped.
        on_step: called with each finished `CertifyStep` (e.g. to print a line).
    Returns:
        a `Certificate` (verdict, interval or reasons, every K tried, the last evaluation's report).
    """
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
        base_evaluation = evaluate_settings(None, overrides)
        return CertifySettings(evaluation=base_evaluation, **own)
    evaluation = evaluate_settings(settings.evaluation, overrides)
    return settings.replace(evaluation=evaluation, **own)


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


def _certify(model, test_data, settings: CertifySettings, train_pixel_means, labels, resume_file, on_step):
    # A regular file or none, in a folder that exists (a named pipe would block the read, a device be replaced).
    if resume_file is not None and not check_output_path(resume_file, "resume_file"):
        resume_file = None  # the null device: nothing kept
    start = time.perf_counter()
    evaluation = settings.evaluation
    tolerance, max_steps, time_budget, growth = (
        settings.tolerance, settings.max_steps, settings.time_budget, settings.growth,
    )  # fmt: skip
    # The settings are validated once; the K-independent stages (exact values, log f(v), its check) run once, in
    # the first evaluation, and are handed to the later ones.
    plan = plan_evaluation(model, test_data, evaluation, train_pixel_means=train_pixel_means, labels=labels)
    if max_steps is not None:
        plan.checked_at_steps(max_steps)  # the largest K must fit the memory bound too: refused now, not hours later
    fingerprint = _fingerprint(settings, plan, train_pixel_means)
    notes: list[str] = []
    finished = _load_progress(
        resume_file,
        fingerprint,
        lambda missing: _fingerprint(_at_defaults(settings, missing), plan, train_pixel_means),
        notes,
    )
    history: list[CertifyStep] = []
    reused: dict[str, Any] = {}
    report = None
    k = evaluation.steps
    reasons: list[str] = []
    verdict = "open"
    while True:
        saved = next((h for h in finished if h["steps"] == k), None)
        if saved is not None:  # finished in an earlier invocation: kept, not recomputed (reasons at this tolerance)
            step = CertifyStep(**saved)
            step.reasons_open = reasons_of_step(step, tolerance)
            history.append(step)
            if on_step is not None:
                on_step(history[-1])
        else:
            inner_resume = None if resume_file is None else f"{resume_file}.K{k}.pt"
            try:
                report = run_evaluation(
                    plan.at_steps(k),
                    log_f=reused.get("log_f"),
                    exact_values=reused.get("exact"),
                    log_f_check=reused.get("log_f_check") if "log_f" in reused else None,
                    resume_file=inner_resume,
                )
            except (EvaluationInterrupted, EvaluationFailed) as stop:
                failed = isinstance(stop, EvaluationFailed)
                if failed:
                    reason = f"K = {k:,} stopped during {stop.report.interrupted}: {stop.report.error}"
                else:
                    reason = f"interrupted during K = {k:,} ({stop.report.interrupted})"
                partial = Certificate(
                    verdict="failed" if failed else "interrupted",
                    reasons=[f"{reason}; the finished Ks are above"],
                    interval=None,
                    tolerance=float(tolerance),
                    time_budget=time_budget,
                    max_steps=max_steps,
                    history=history,
                    needed_steps=None,
                    seconds=time.perf_counter() - start,
                    report=None,
                    notes=notes,
                    model=plan.report_settings.get("model", ""),
                )
                if failed:
                    raise CertifyFailed(partial, stop.report) from stop
                raise CertifyInterrupted(partial, stop.report) from None
            notes += [f"K = {k:,}: {n}" for n in report.notes if n.startswith("continued from")]
            reused.update(log_f=report.log_f, exact=report.exact_values, log_f_check=report.log_f_check)
            if reused["exact"] is None:
                del reused["exact"]
            history.append(step_of(report, k, tolerance))
            _save_progress(resume_file, fingerprint, history)
            if inner_resume is not None and os.path.exists(inner_resume):
                os.remove(inner_resume)  # this K is kept in the certified file
            if on_step is not None:
                on_step(history[-1])
        current = history[-1]
        if not current.reasons_open:
            verdict = "closed"
            reasons = []
            break
        reasons = list(current.reasons_open)
        if any(c in current.warnings for c in K_INDEPENDENT) or any("at any K" in r for r in reasons):
            reasons.append("stopped: no larger K can remove the log f(v) reason above (it is made once)")
            break
        next_k = k * growth
        if max_steps is not None and next_k > max_steps:
            reasons.append(Named(f"the next K ({next_k:,}) would pass {{max_steps}} {max_steps:,}"))
            break
        if time_budget is not None:
            elapsed = time.perf_counter() - start
            per_step = current.seconds / k
            predicted = per_step * next_k + current.fixed_seconds
            if elapsed + predicted > time_budget:
                reasons.append(
                    f"the next K ({next_k:,}) would take about {predicted:.0f} s "
                    f"({per_step * 1e3:.2f} ms per step measured), beyond the time budget "
                    f"({time_budget:.0f} s, {elapsed:.0f} s spent)"
                )
                break
        k = next_k
    gaps = [h.gap for h in history[-3:] if h.gap is not None]
    if verdict == "open" and len(gaps) == 3 and gaps[-1] > tolerance and gaps[-1] >= 0.9 * gaps[0]:
        reasons.append(
            Named(
                f"the gap stopped shrinking ({', '.join(f'{g:.3f}' for g in gaps)} at the last three K): more K alone "
                "may not close it"
                + (
                    " (RAISE started from one draw of the recognition distribution, {dbn_start} unrolled, which costs "
                    "a fixed amount at every K where that distribution misses modes of p(h | v): {dbn_start} heated "
                    "anneals it away)"
                    if plan.family == "DBN" and plan.dbn_start == "unrolled"
                    else ""
                )
            )
        )
    interval = None
    last = history[-1]
    if verdict == "closed":
        interval = (last.interval_low, last.interval_high)
    if report is None and finished:
        notes.append(f"every K was read back from {resume_file}; the last evaluation's full report is not kept")
    return Certificate(
        verdict=verdict,
        reasons=reasons,
        interval=interval,
        tolerance=float(tolerance),
        time_budget=time_budget,
        max_steps=max_steps,
        history=history,
        needed_steps=None if verdict == "closed" else trend(history, tolerance),
        gap_per_doubling=None if verdict == "closed" else gap_per_doubling(history, tolerance),
        seconds=time.perf_counter() - start,
        report=report,
        notes=notes,
        model=plan.report_settings.get("model", ""),
        ais_label="AIS" if plan.log_f_method == "exact" else "AIS (log f-hat - log Z-hat)",
    )


def _at_defaults(settings: CertifySettings, names) -> CertifySettings:
    """`settings` with the evaluation's fields `names` at their declared defaults."""
    defaults = {spec.name: spec.default for spec in declarations(EvaluateSettings) if spec.name in names}
    return settings.replace(evaluation=settings.evaluation.replace(**defaults))


def _load_progress(path: Optional[str], fingerprint: dict, legacy: Callable[[list], dict], notes: list) -> list[dict]:
    """The finished Ks of the file at `path` (none when there is none), refused when its fingerprint differs. A file
    written before a setting was recorded in it (0.3 did not record dbn_start) is taken as run with that setting's
    default: `legacy(missing)` gives the fingerprint with the missing settings at their defaults, and a note says
    so."""
    if path is None or not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a certified run's resume file ({e}); delete it or name another file") from e
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise ValueError(f"{path} is not a certified run's resume file (format {doc.get('format')!r})")
    old = doc.get("fingerprint", {})
    missing = sorted(k for k in FINGERPRINT_FIELDS if isinstance(old, dict) and k in fingerprint and k not in old)
    if missing:
        assumed = legacy(missing)
        old = {**{k: assumed[k] for k in missing}, **old}
        shown = [f"{k} {assumed[k]!r}" for k in missing if assumed[k] is not None]
        if shown:
            notes.append(
                f"{path} does not record {', '.join(k for k in missing if assumed[k] is not None)} (written by an "
                f"earlier version): its finished Ks are taken as run with the defaults, {', '.join(shown)}"
            )
    if old != fingerprint:
        differs = [
            DIGEST_WORDS[k] if k in DIGEST_WORDS else f"{k}: {old.get(k)!r} in the file, {fingerprint.get(k)!r} now"
            for k in sorted(set(fingerprint) | set(old))
            if fingerprint.get(k) != old.get(k)
        ]
        differs = [
            f"{d} (the file, written by an earlier version, does not record it: its default is assumed)"
            if d.split(":")[0] in missing
            else d
            for d in differs
        ]
        raise ValueError(
            f"{path} was written by a certified run with other settings ({'; '.join(differs)}); delete it "
            "or name another file"
        )
    return doc["history"]


def _save_progress(path: Optional[str], fingerprint: dict, history: list[CertifyStep]) -> None:
    """Rewrite the progress file whole (`write_file`). A failed save does not stop the run (its Ks are in memory):
    warned of (OutputWarning), and the next K's save tries again."""
    if path is None:
        return
    text = json.dumps({"format": FILE_FORMAT, "fingerprint": fingerprint, "history": [vars(s) for s in history]})
    try:
        write_file(path, text, what="the finished Ks", keep_on_failure=False)
    except (OutputError, OutputWriteError) as e:
        warnings.warn(
            f"the certified run's resume file: {e}. The run goes on (its results are unaffected); the next K's save "
            "tries again",
            OutputWarning,
            stacklevel=2,
        )
