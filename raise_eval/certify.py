"""Certified evaluation: run the AIS-RAISE sandwich at growing K until it closes, or say why it is still open.

AIS's log-likelihood errs high and RAISE's errs low (in expectation), so once AIS - RAISE <= tol the log-likelihood
lies in [RAISE, AIS] up to their noise. The sandwich is only called closed when, in addition,

- the standard errors are small against tol (their combined standard error at most tol / 2),
- RAISE is not above AIS beyond noise (then the annealing model, not the model, is what RAISE bounds),
- AIS's effective sample size is not low and its ±3σ interval is finite (log Z-hat rests on many chains),
- AIS's log Z is not below the test vectors' own mass (an impossible value),
- log f(v) is exact, or its estimate passed the log f(v) check (a longer estimate on a subset did not rise),
- where the exact value is known, it lies inside the sandwich.

K grows geometrically (x `growth`, from `steps`) until the sandwich closes, the next K would pass `max_steps`, or
the next K's predicted time (from the measured seconds per step of AIS and RAISE) would not fit `time_budget`.
What does not depend on K (the log f(v) estimates, the exact values, the validation of the data) is computed once
and handed to the later evaluations. Every K tried is kept, so the result can be plotted against K (the RAISE
paper's Figures 3-7) and a run continued from a resume file re-runs no finished K.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.diagnostics import LOW_ESS_FRACTION, log_f_advice
from raise_eval.outputs import (
    OutputError,
    OutputWarning,
    OutputWriteError,
    check_output_path,
    save_figure,
    write_file,
)
from raise_eval.threads import Threads, with_threads

# The warnings that undermine one side of the sandwich: a sandwich with any of them is never called closed.
UNDERMINING = {
    "low-ess": f"AIS's effective sample size is under {LOW_ESS_FRACTION:.0%} of its chains: the weights are uneven, so "
    "log Z-hat may still be far too low",
    "interval-not-finite": "AIS's ±3σ interval of Z-hat reaches zero: log Z is not pinned down",
    "log-z-below-test-mass": "AIS's log Z is below the test vectors' own mass: AIS has missed most of the model",
    "raise-above-ais": "RAISE is above AIS beyond noise: RAISE bounds the annealing model, not the model",
    "exact-outside-sandwich": "the exact log-likelihood lies outside the sandwich",
    "log-f-biased": "the log f(v) estimates rose with a longer estimate: the AIS log-likelihood rests on a biased log f",
    "log-f-unchecked": "log f(v) is estimated and was not checked for bias",
}
FILE_FORMAT = "raise-eval certify 1"
# Reasons that no K can remove: log f(v) and its check are made once, whatever K is.
K_INDEPENDENT = ("log-f-biased", "log-f-unchecked")


class CertifyInterrupted(KeyboardInterrupt):
    """Ctrl-C during `certify`: `certificate` holds the finished Ks (verdict 'interrupted'), `report` the partial
    evaluation of the K in progress."""

    def __init__(self, certificate: "Certificate", report):
        super().__init__("certified run interrupted")
        self.certificate = certificate
        self.report = report


@dataclass
class CertifyStep:
    """One K of a certified run: the headline numbers of its evaluation (average test log-likelihoods, nats)."""

    steps: int
    ais_mean: Optional[float]
    ais_stderr: Optional[float]
    raise_mean: Optional[float]
    raise_stderr: Optional[float]
    ais_ess: Optional[float]
    exact_mean: Optional[float]
    seconds: float  # AIS + RAISE (+ pilot) seconds of this K: what grows with K
    total_seconds: float
    warnings: list[str]
    reasons_open: list[str]
    interval_low: Optional[float] = None
    interval_high: Optional[float] = None
    fixed_seconds: float = 0.0  # of this K's time, what does not grow with K (the adaptive pilot)
    log_f_allowance: float = 0.0  # `log_f_allowance` of the report: with the rest, the reasons at any tolerance
    log_f_method: str = ""

    @property
    def gap(self) -> Optional[float]:
        if self.ais_mean is None or self.raise_mean is None:
            return None
        return self.ais_mean - self.raise_mean

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["gap"] = self.gap
        return d


@dataclass
class Certificate:
    """The verdict of `certify` and every K it tried.

    verdict: 'closed' (the log-likelihood lies in `interval`) or 'open' (`reasons` say why).
    interval: (low, high) in nats when closed: [min(AIS, RAISE) - 2σ, max(AIS, RAISE) + 2σ + a], σ their combined
        standard error and a the log f(v) allowance (`log_f_allowance`: the AIS side rests on log f-hat, which errs
        low, when log f(v) is estimated); None when open.
    needed_steps: when open and the gap shrank, the K at which it would reach the tolerance if the trend of the
        last Ks (gap ~ K^-a) holds; None when it cannot be said.
    report: the `EvaluationReport` of the last K (the full table and warnings).
    """

    verdict: str
    reasons: list[str]
    interval: Optional[tuple[float, float]]
    tolerance: float
    time_budget: Optional[float]
    max_steps: Optional[int]
    history: list[CertifyStep]
    needed_steps: Optional[int]
    seconds: float
    report: Any = None
    notes: list[str] = field(default_factory=list)
    model: str = ""  # e.g. 'DBM 784-20-500'

    ais_label: str = "AIS"  # 'AIS (log f-hat - log Z-hat)' when log f(v) is estimated

    @property
    def closed(self) -> bool:
        return self.verdict == "closed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "interval": None if self.interval is None else list(self.interval),
            "tolerance": self.tolerance,
            "time_budget_seconds": self.time_budget,
            "max_steps": self.max_steps,
            "needed_steps": self.needed_steps,
            "seconds": self.seconds,
            "history": [s.to_dict() for s in self.history],
            "notes": list(self.notes),
            "last_evaluation": None if self.report is None else self.report.to_dict(),
        }

    def format_table(self) -> str:
        lines = [f"certified sandwich{' of ' + self.model if self.model else ''}, tolerance {self.tolerance:g} nats", ""]
        lines.append(f"{'K':>8}{'AIS':>12}{'± s.e.':>9}{'RAISE':>12}{'± s.e.':>9}{'gap':>9}{'ESS':>7}{'secs':>8}")
        for s in self.history:
            lines.append(
                f"{s.steps:8d}{_f(s.ais_mean, 12)}{_f(s.ais_stderr, 9)}{_f(s.raise_mean, 12)}{_f(s.raise_stderr, 9)}"
                f"{_f(s.gap, 9)}{_f(s.ais_ess, 7, 0)}{s.seconds:8.1f}"
            )
        exact = next((s.exact_mean for s in reversed(self.history) if s.exact_mean is not None), None)
        if exact is not None:
            lines.append(f"{'exact':>8}{exact:12.4f}")
        lines.append("")
        if self.closed:
            lo, hi = self.interval
            lines.append(
                f"verdict: CLOSED at K = {self.history[-1].steps}: the average test log-likelihood lies in "
                f"[{lo:.4f}, {hi:.4f}] (RAISE to AIS, ±2 standard errors"
                + (", and the log f(v) check's rise above" if self.report is not None and log_f_allowance(self.report) > 0 else "")
                + ")"
            )
        elif self.verdict == "interrupted":
            lines.append("verdict: INTERRUPTED (no verdict)")
            lines += [f"  - {r}" for r in self.reasons]
        else:
            lines.append(f"verdict: OPEN after K = {self.history[-1].steps if self.history else 0}")
            lines += [f"  - {r}" for r in self.reasons]
            gaps = [s.gap for s in self.history if s.gap is not None]
            if len(gaps) >= 2:
                lines.append(f"  gap against K: {', '.join(f'{g:.3f}' for g in gaps)}")
            if self.needed_steps is not None:
                lines.append(f"  if the trend holds, the gap reaches {self.tolerance:g} nats at about K = {self.needed_steps:,}")
        lines.append(f"certified run: {self.seconds:.1f} s")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """AIS and RAISE (± one standard error) against K, log-scaled K, with the exact value when known and the
        verdict in the title (needs matplotlib: pip install .[plot])."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ks = [s.steps for s in self.history]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for name, means, errs, colour in (
            (self.ais_label, [s.ais_mean for s in self.history], [s.ais_stderr for s in self.history], "tab:red"),
            ("RAISE", [s.raise_mean for s in self.history], [s.raise_stderr for s in self.history], "tab:blue"),
        ):
            pts = [(k, m, e or 0.0) for k, m, e in zip(ks, means, errs) if m is not None and math.isfinite(m)]
            if pts:
                ax.errorbar(
                    [p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3,
                    label=name, color=colour,
                )
        exact = next((s.exact_mean for s in reversed(self.history) if s.exact_mean is not None), None)
        if exact is not None:
            ax.axhline(exact, color="black", linestyle="--", linewidth=1, label="exact")
        if self.closed:
            ax.axhspan(*self.interval, color="tab:green", alpha=0.15, label="certified interval")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [f"{k:,}" for k in ks])  # the Ks tried, not powers of two
        ax.minorticks_off()
        ax.set_xlabel("K (intermediate distributions)")
        ax.set_ylabel("average test log-likelihood (nats)")
        title = f"sandwich {self.verdict} (tolerance {self.tolerance:g} nats)"
        ax.set_title(f"{self.model}: {title}" if self.model else title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        try:
            save_figure(fig, path, dpi=120)  # whole or not at all; marked: a later run may replace it
        finally:
            plt.close(fig)


def _f(x: Optional[float], width: int, digits: int = 4) -> str:
    if x is None:
        return f"{'—':>{width}}"
    return f"{x:{width}.{digits}f}"


def log_f_allowance(report) -> float:
    """Nats by which the AIS side may sit below the truth because log f(v) is estimated (it errs low): the rise of
    the log f(v) check, mean + 3 standard errors, at least 0; 0 when log f(v) is exact or not checked."""
    check = getattr(report, "log_f_check", None)
    if check is None:
        return 0.0
    se = check.mean_rise_stderr if math.isfinite(check.mean_rise_stderr) else 0.0
    return max(0.0, check.mean_rise + 3.0 * se)


def sandwich_interval(report) -> tuple[float, float]:
    """[min(AIS, RAISE) - 2σ, max(AIS, RAISE) + 2σ + the log f(v) allowance], σ the combined standard error."""
    noise = math.hypot(float(report.ais.stderr), report.raise_stderr)
    lo = min(report.ais_mean, report.raise_mean) - 2 * noise
    hi = max(report.ais_mean, report.raise_mean) + 2 * noise + log_f_allowance(report)
    return lo, hi


def closure_reasons(report, tolerance: float) -> list[str]:
    """Why the sandwich of one `EvaluationReport` is not closed at `tolerance` nats (empty: closed)."""
    if report.gap is None:
        return ["AIS or RAISE did not finish"]
    noise = math.hypot(float(report.ais.stderr), report.raise_stderr if math.isfinite(report.raise_stderr) else math.inf)
    exact = getattr(report, "exact_mean", None)
    interval = sandwich_interval(report) if exact is not None and math.isfinite(noise) else None
    return _reasons(
        gap=report.gap,
        noise=noise,
        codes={w.code for w in report.warnings},
        exact=exact,
        interval=interval,
        allowance=log_f_allowance(report),
        method=getattr(getattr(report, "log_f", None), "method", ""),
        tolerance=tolerance,
    )


def _reasons_of_step(step: CertifyStep, tolerance: float) -> list[str]:
    """`closure_reasons` from what a `CertifyStep` keeps (for a resumed run at another tolerance)."""
    if step.gap is None:
        return ["AIS or RAISE did not finish"]
    raise_se = step.raise_stderr if step.raise_stderr is not None and math.isfinite(step.raise_stderr) else math.inf
    interval = None if step.interval_low is None else (step.interval_low, step.interval_high)
    return _reasons(
        gap=step.gap,
        noise=math.hypot(step.ais_stderr, raise_se),
        codes=set(step.warnings),
        exact=step.exact_mean,
        interval=interval,
        allowance=step.log_f_allowance,
        method=step.log_f_method,
        tolerance=tolerance,
    )


def _reasons(*, gap, noise, codes, exact, interval, allowance, method, tolerance) -> list[str]:
    reasons = []
    if allowance > tolerance / 2:
        reasons.append(
            f"log f(v) is estimated and its check rose by up to {allowance:.3f} nats (mean + 3 s.e.), more than half "
            f"the tolerance: the AIS side may be that much too low, at any K; use {log_f_advice(method)}"
        )
    if exact is not None and interval is not None:
        lo, hi = interval
        if not lo <= exact <= hi:
            reasons.append(f"the exact log-likelihood {exact:.4f} lies outside the interval [{lo:.4f}, {hi:.4f}]")
    if gap > tolerance:
        reasons.append(f"the gap AIS - RAISE is {gap:.3f} nats, above the tolerance {tolerance:g}")
    if not noise <= tolerance / 2:
        reasons.append(
            f"the combined standard error {noise:.3f} is more than half the tolerance: run more chains "
            "(--ais-chains, --raise-examples, --raise-chains)"
        )
    reasons += [UNDERMINING[c] for c in UNDERMINING if c in codes]
    return reasons


def _trend(history: list[CertifyStep], tolerance: float) -> Optional[int]:
    """K at which the gap would reach `tolerance` if log gap is linear in log K over the last (up to 3) Ks with a
    positive gap; None when fewer than two such Ks or the gap is not shrinking."""
    if not history or history[-1].gap is None or history[-1].gap <= tolerance:
        return None  # the gap is not what keeps the sandwich open
    pts = [(s.steps, s.gap) for s in history if s.gap is not None and s.gap > 0][-3:]
    if len(pts) < 2:
        return None
    xs = [math.log(k) for k, _ in pts]
    ys = [math.log(g) for _, g in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if slope >= -0.1:  # shrinking by less than 7% per doubling: too flat to extrapolate
        return None
    k_last, g_last = pts[-1]
    if g_last <= tolerance:
        return None
    needed = k_last * (tolerance / g_last) ** (1.0 / slope)
    if needed > 1e4 * k_last:
        return None
    return int(math.ceil(needed * (1 - 1e-9)))


def _step_of(report, steps: int, tolerance: float) -> CertifyStep:
    t = report.timing
    varying = sum(t.get(k) or 0.0 for k in ("ais_seconds", "raise_seconds"))
    a = report.ais
    interval = (None, None) if report.gap is None or not math.isfinite(report.raise_stderr) else sandwich_interval(report)
    return CertifyStep(
        steps=steps,
        ais_mean=report.ais_mean,
        ais_stderr=None if a is None else float(a.stderr),
        raise_mean=report.raise_mean,
        raise_stderr=report.raise_stderr,
        ais_ess=None if a is None else float(a.ess),
        exact_mean=report.exact_mean,
        seconds=varying,
        total_seconds=float(t["seconds"]),
        warnings=[w.code for w in report.warnings],
        reasons_open=closure_reasons(report, tolerance),
        interval_low=interval[0],
        interval_high=interval[1],
        fixed_seconds=t.get("pilot_seconds") or 0.0,
        log_f_allowance=log_f_allowance(report),
        log_f_method=getattr(report.log_f, "method", "") if report.log_f is not None else "",
    )


def _load_progress(path: Optional[str], fingerprint: dict) -> list[dict]:
    if path is None or not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a certified run's resume file ({e}); delete it or name another file") from e
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise ValueError(f"{path} is not a certified run's resume file (format {doc.get('format')!r})")
    if doc.get("fingerprint") != fingerprint:
        old = doc.get("fingerprint", {})
        differs = [
            f"{k}: {old.get(k)!r} in the file, {fingerprint.get(k)!r} now"
            for k in sorted(set(fingerprint) | set(old))
            if fingerprint.get(k) != old.get(k)
        ]
        raise ValueError(
            f"{path} was written by a certified run with other settings ({'; '.join(differs)}); delete it "
            "or name another file"
        )
    return doc["history"]


def _save_progress(path: Optional[str], fingerprint: dict, history: list[CertifyStep]) -> None:
    """Rewrite the progress file whole (`write_file`). A failed save does not stop the run (its Ks are in memory):
    warned of (OutputWarning; the same failure once), and the next K's save tries again."""
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


@with_threads
def certify(
    model,
    test_data: Tensor,
    *,
    tolerance: float,
    steps: int = 100,
    growth: int = 2,
    max_steps: Optional[int] = None,
    time_budget: Optional[float] = None,
    resume_file: Optional[str] = None,
    progress: bool = False,
    on_step=None,
    threads: Threads = "auto",
    **evaluate_kwargs,
) -> Certificate:
    """Run the evaluation (`raise_eval.evaluate`) at K = steps, growth x steps, ... until the sandwich closes within
    `tolerance` nats (see the module docstring for every condition) or the next K would pass `max_steps` or the
    `time_budget` (seconds, for the whole certified run, predicted from the measured seconds per step).

    Args:
        model, test_data, evaluate_kwargs: as for `evaluate` (not `log_f`, `exact_values` or `resume_file`);
            validated once (`plan_evaluation`), and each K is a `run_evaluation` of that plan at K, handed the
            exact values, log f(v) estimates and log f(v) check of the first.
        time_budget: seconds for this invocation (a resumed run starts a new budget).
        resume_file: a JSON file that keeps every finished K (and the evaluation in progress is resumed through
            `evaluate`'s own resume file, `<resume_file>.K<k>.pt`): the same call continues where it stopped.
        on_step: called with each finished `CertifyStep` (e.g. to print a line).
        threads: torch threads for the whole certified run, as for `evaluate`: 'auto' (default: the idle cores,
            at most torch's current count), an int, or None (torch's setting); the caller's count is restored.
    Returns:
        a `Certificate` (verdict, interval or reasons, every K tried, the last evaluation's report).
    """
    from raise_eval.evaluate import DEFAULT_RESUME_INTERVAL, EvaluationInterrupted, plan_evaluation, run_evaluation
    from raise_eval.resume import model_digest, tensor_digest

    for name in ("log_f", "resume_file", "exact_values"):
        if name in evaluate_kwargs:
            raise ValueError(f"certify manages {name} itself; do not pass it")
    resume_interval = evaluate_kwargs.pop("resume_interval", DEFAULT_RESUME_INTERVAL)
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"tolerance must be a positive number of nats, got {tolerance!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps (the first K) must be a positive integer, got {steps!r}")
    if isinstance(growth, bool) or not isinstance(growth, int) or growth < 2:
        raise ValueError(f"growth must be an integer of at least 2, got {growth!r}")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < steps):
        raise ValueError(f"max_steps must be an integer of at least the first K ({steps}), got {max_steps!r}")
    if time_budget is not None and not (
        isinstance(time_budget, (int, float)) and not isinstance(time_budget, bool) and math.isfinite(time_budget)
        and time_budget > 0
    ):
        raise ValueError(f"time_budget must be a positive number of seconds (parse_duration reads '30m'), got {time_budget!r}")
    if resume_file is not None:
        # A regular file or none, in a folder that exists (a named pipe would block the read, a device be replaced).
        if not check_output_path(resume_file, "resume_file"):
            resume_file = None  # the null device: nothing kept
    known = set(inspect.signature(plan_evaluation).parameters) - {"model", "test_data", "steps", "progress"}
    unknown = sorted(set(evaluate_kwargs) - known - {"resume_interval"})
    if unknown:
        raise TypeError(f"certify() got unexpected keyword arguments: {', '.join(unknown)} (it takes evaluate's settings)")
    if isinstance(evaluate_kwargs.get("schedule"), Tensor):
        raise ValueError("certify needs a named schedule (it grows K); an explicit schedule fixes K")
    start = time.perf_counter()
    # The settings are validated once; the K-independent stages (exact values, log f(v), its check) run once, in
    # the first evaluation, and are handed to the later ones.
    plan = plan_evaluation(model, test_data, steps=steps, progress=progress, **evaluate_kwargs)
    if max_steps is not None:
        plan.checked_at_steps(max_steps)  # the largest K must fit max_memory too: refused now, not hours from now
    fingerprint = {  # what the numbers at each K depend on (not the tolerance: the reasons are recomputed)
        "first_steps": steps,
        "growth": growth,
        "test_data": tensor_digest([plan.test]),
        "parameters": model_digest(model),
        **{
            k: v if isinstance(v, (int, float, str, type(None))) else tensor_digest([torch.as_tensor(v)])
            for k, v in sorted(evaluate_kwargs.items())
            if k not in ("settings", "max_memory")  # neither changes the numbers
        },
    }
    finished = _load_progress(resume_file, fingerprint)
    history: list[CertifyStep] = []
    notes: list[str] = []
    reused: dict[str, Any] = {}
    report = None
    k = steps
    reasons: list[str] = []
    verdict = "open"
    while True:
        saved = next((h for h in finished if h["steps"] == k), None)
        if saved is not None:  # finished in an earlier invocation: kept, not recomputed (reasons at this tolerance)
            step = CertifyStep(**saved)
            step.reasons_open = _reasons_of_step(step, tolerance)
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
                    resume_interval=resume_interval,
                )
            except EvaluationInterrupted as stop:
                partial = Certificate(
                    verdict="interrupted",
                    reasons=[f"interrupted during K = {k:,} ({stop.report.interrupted}); the finished Ks are above"],
                    interval=None,
                    tolerance=float(tolerance),
                    time_budget=time_budget,
                    max_steps=max_steps,
                    history=history,
                    needed_steps=None,
                    seconds=time.perf_counter() - start,
                    report=None,
                    notes=notes,
                    model=plan.settings.get("model", ""),
                )
                raise CertifyInterrupted(partial, stop.report) from None
            notes += [f"K = {k:,}: {n}" for n in report.notes if n.startswith("continued from")]
            reused.update(log_f=report.log_f, exact=report.exact_values, log_f_check=report.log_f_check)
            if reused["exact"] is None:
                del reused["exact"]
            history.append(_step_of(report, k, tolerance))
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
            reasons.append(f"the next K ({next_k:,}) would pass --max-steps {max_steps:,}")
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
            f"the gap stopped shrinking ({', '.join(f'{g:.3f}' for g in gaps)} at the last three K): more K alone may "
            "not close it (for a DBN, RAISE bounds the unrolled model, whose recognition proposal may cost a fixed "
            "amount; more RAISE chains per vector narrow that)"
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
        needed_steps=None if verdict == "closed" else _trend(history, tolerance),
        seconds=time.perf_counter() - start,
        report=report,
        notes=notes,
        model=plan.settings.get("model", ""),
        ais_label="AIS" if plan.log_f_method == "exact" else "AIS (log f-hat - log Z-hat)",
    )


def parse_duration(text: str) -> float:
    """Seconds in '90', '90s', '30m', '1.5h' (for --time-budget); ValueError saying the accepted forms."""
    t = str(text).strip().lower()
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration; write seconds (90, 90s), minutes (30m) or hours (1.5h)") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{text!r}: the duration must be a finite positive number")
    return value


__all__ = [
    "Certificate",
    "CertifyInterrupted",
    "CertifyStep",
    "certify",
    "closure_reasons",
    "parse_duration",
    "UNDERMINING",
]
