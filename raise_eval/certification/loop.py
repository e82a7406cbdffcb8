"""The loop of a certified run: the evaluation at K = steps, growth x K, ... until the sandwich closes, or the next K
would pass `max_steps` or the `time_budget` (see `certification.run`). The evaluations themselves are made by a
"runs" object of the model's family: `certification.run.PlanRuns` (Boltzmann machines, fully visible models: the
evaluation plan) or `certification.energy.EnergyRuns` (a user's energy). The finished Ks are kept in a JSON resume
file, so the same call continues where it stopped.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Callable, Optional

from raise_eval.certification.report import Certificate, CertifyFailed, CertifyInterrupted, CertifyStep
from raise_eval.certification.settings import CertifySettings
from raise_eval.certification.verdict import K_INDEPENDENT, gap_per_doubling, reasons_of_step, trend
from raise_eval.io.outputs import OutputError, OutputWarning, OutputWriteError, check_output_path
from raise_eval.io.writing import write_file
from raise_eval.settings import Named

FILE_FORMAT = "raise-eval certify 1"
# Fingerprint entries kept as digests, said in words when they differ.
DIGEST_WORDS = {
    "parameters": "the model's parameters differ (another checkpoint, or other weights of the same shapes)",
    "test_data": "the test data differ",
    "train_pixel_means": "the base rates (training data or train_pixel_means) differ",
    "base": "the base differs (other training data, or another base)",
    "energy": "the energy differs (another function or model file: its values at fixed probe points differ)",
}


class Stopped(Exception):
    """An evaluation of a certified run that stopped (Ctrl-C, or log-weights that turned NaN or +inf): `failed`
    tells which, `reason` says where in words, `report` is the partial evaluation (or None), `cause` the error."""

    def __init__(self, failed: bool, reason: str, report, cause: BaseException):
        super().__init__(reason)
        self.failed, self.reason, self.report, self.cause = failed, reason, report, cause


def grow_until_closed(runs, settings: CertifySettings, resume_file: Optional[str], on_step) -> Certificate:
    """The certified run's loop over K (see the module docstring), the evaluations at each K made by `runs`
    (`PlanRuns`, or an energy model's `certification.energy.EnergyRuns`): `runs.run(k, resume_file)` gives (report,
    `CertifyStep`, notes) or raises `Stopped`; `runs.fingerprint`, `runs.legacy`, `runs.model_label`,
    `runs.ais_label` and `runs.fixed_cost_note` say what the resume file must agree on and how the result is
    labelled."""
    # A regular file or none, in a folder that exists (a named pipe would block the read, a device be replaced).
    if resume_file is not None and not check_output_path(resume_file, "resume_file"):
        resume_file = None  # the null device: nothing kept
    start = time.perf_counter()
    evaluation = settings.evaluation
    tolerance, max_steps, time_budget, growth = (
        settings.tolerance, settings.max_steps, settings.time_budget, settings.growth,
    )  # fmt: skip
    fingerprint = runs.fingerprint
    notes: list[str] = []
    finished = _load_progress(resume_file, fingerprint, runs.legacy, runs.legacy_fields, notes)
    history: list[CertifyStep] = []
    report = None
    k = evaluation.steps
    reasons: list[str] = []
    verdict = "open"

    def certificate(**outcome) -> Certificate:  # the fields every ending shares, and this ending's own
        return Certificate(
            tolerance=float(tolerance), time_budget=time_budget, max_steps=max_steps, history=history,
            seconds=time.perf_counter() - start, notes=notes, model=runs.model_label, ais_label=runs.ais_label,
            own_names=runs.names, **outcome,
        )  # fmt: skip

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
                report, step, report_notes = runs.run(k, inner_resume)
            except Stopped as stop:
                partial = certificate(
                    verdict="failed" if stop.failed else "interrupted",
                    reasons=[f"{stop.reason}; the finished Ks are above"],
                    interval=None,
                    needed_steps=None,
                    report=None,
                )
                if stop.failed:
                    raise CertifyFailed(partial, stop.report) from stop.cause
                raise CertifyInterrupted(partial, stop.report) from None
            notes += [f"K = {k:,}: {n}" for n in report_notes if n.startswith("continued from")]
            history.append(step)
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
            tails = [c for c in ("improper-energy", "heavy-tails") if c in current.warnings]
            reasons.append(f"stopped: no larger K can remove the {tails[0]} reason above" if tails else
                           "stopped: no larger K can remove the log f(v) reason above (it is made once)")  # fmt: skip
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
                "may not close it" + runs.fixed_cost_note
            )
        )
    interval = None
    last = history[-1]
    if verdict == "closed":
        interval = (last.interval_low, last.interval_high)
    if report is None and finished:
        notes.append(f"every K was read back from {resume_file}; the last evaluation's full report is not kept")
    return certificate(
        verdict=verdict,
        reasons=reasons,
        interval=interval,
        needed_steps=None if verdict == "closed" else trend(history, tolerance),
        gap_per_doubling=None if verdict == "closed" else gap_per_doubling(history, tolerance),
        report=report,
    )


def _load_progress(
    path: Optional[str], fingerprint: dict, legacy: Callable[[list], dict], legacy_fields: tuple, notes: list
) -> list[dict]:
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
        from raise_eval.io.outputs import _is_resume_file

        if _is_resume_file(Path(path)):
            raise ValueError(
                f"{path} is the resume file of an evaluation, not of a certified run (--until-gap, "
                "raise_eval.certify): continue it without --until-gap, or name another file for this certified run"
            ) from None
        raise ValueError(f"{path} is not a certified run's resume file ({e}); delete it or name another file") from e
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise ValueError(f"{path} is not a certified run's resume file (format {doc.get('format')!r})")
    old = doc.get("fingerprint", {})
    missing = sorted(k for k in legacy_fields if isinstance(old, dict) and k in fingerprint and k not in old)
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
