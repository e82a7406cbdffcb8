"""When a sandwich is closed: the conditions of a certified verdict, the interval, and the trend of the gap.

AIS's log-likelihood errs high and RAISE's errs low (in expectation), so once AIS - RAISE <= tol the log-likelihood
lies in [RAISE, AIS] up to their noise. The sandwich is only called closed when, in addition,

- the standard errors are small against tol (their combined standard error at most tol / 2),
- RAISE is not above AIS beyond noise (then the annealing model, not the model, is what RAISE bounds),
- AIS's effective sample size is not low and its ±3σ interval is finite (log Z-hat rests on many chains),
- AIS's log Z is not below the test vectors' own mass (an impossible value),
- log f(v) is exact, or its estimate passed the log f(v) check (a longer estimate on a subset did not rise),
- where the exact value is known, it lies inside the sandwich.
"""

from __future__ import annotations

import math
from typing import Optional

from raise_eval.certification.report import CertifyStep
from raise_eval.diagnostics import FLAT_SLOPE, LOW_ESS_FRACTION, TREND_MAX_FACTOR, log_f_advice, log_f_allowance
from raise_eval.settings import Named

# The warnings that undermine one side of the sandwich: a sandwich with any of them is never called closed.
UNDERMINING = {
    "low-ess": f"AIS's effective sample size is under {LOW_ESS_FRACTION:.0%} of its chains: the weights are uneven, so "
    "log Z-hat may still be far too low",
    "interval-not-finite": "AIS's ±3σ interval of Z-hat reaches zero: log Z is not pinned down",
    "log-z-below-test-mass": "AIS's log Z is below the test vectors' own mass: AIS has missed most of the model",
    "raise-above-ais": "RAISE is above AIS beyond noise: RAISE bounds the annealing model, not the model",
    "exact-outside-sandwich": "the exact log-likelihood lies outside the sandwich",
    "log-f-biased": "the log f(v) estimates rose with a longer estimate: the AIS log-likelihood rests on a biased "
    "log f",
    "log-f-unchecked": "log f(v) is estimated and was not checked for bias",
    "base-misses-mass": "AIS from the broad default base found mass that the fitted base's run missed: AIS and RAISE "
    "both miss a part of the model",
    "improper-energy": "the energy looks improper (its tails grow too slowly for exp(-E) to integrate, or the AIS "
    "chains drifted outward without settling): log Z-hat estimates no finite log Z, at any K",
    "heavy-tails": "the energy's tails are heavy (E grows little faster than d log r): AIS and RAISE both miss the "
    "mass far out, at any K",
}
FILE_FORMAT = "raise-eval certify 1"
# Reasons that no K can remove: log f(v) and its check are made once, whatever K is.
K_INDEPENDENT = ("log-f-biased", "log-f-unchecked")


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
    noise = math.hypot(
        float(report.ais.stderr), report.raise_stderr if math.isfinite(report.raise_stderr) else math.inf
    )
    exact = getattr(report, "exact_mean", None)
    interval = sandwich_interval(report) if exact is not None and math.isfinite(noise) else None
    return verdict_reasons(
        gap=report.gap,
        noise=noise,
        codes={w.code for w in report.warnings},
        exact=exact,
        interval=interval,
        allowance=log_f_allowance(report),
        method=getattr(getattr(report, "log_f", None), "method", ""),
        tolerance=tolerance,
    )


def reasons_of_step(step: CertifyStep, tolerance: float) -> list[str]:
    """`closure_reasons` from what a `CertifyStep` keeps (for a resumed run at another tolerance)."""
    if step.gap is None:
        return ["AIS or RAISE did not finish"]
    raise_se = step.raise_stderr if step.raise_stderr is not None and math.isfinite(step.raise_stderr) else math.inf
    interval = None if step.interval_low is None else (step.interval_low, step.interval_high)
    return verdict_reasons(
        gap=step.gap,
        noise=math.hypot(step.ais_stderr, raise_se),
        codes=set(step.warnings),
        exact=step.exact_mean,
        interval=interval,
        allowance=step.log_f_allowance,
        method=step.log_f_method,
        tolerance=tolerance,
    )


def verdict_reasons(*, gap, noise, codes, exact, interval, allowance, method, tolerance) -> list[str]:
    """Why a sandwich with these numbers is not closed at `tolerance` nats (empty: closed): `gap` = AIS - RAISE,
    `noise` their combined standard error, `codes` the warnings' codes, `exact` the exact value or None,
    `interval` the reported interval (or None), `allowance` the log f(v) check's allowance, `method` log f(v)'s
    estimator. For reports other than an `EvaluationReport` (e.g. the final checkpoint of a trajectory)."""
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
            "({ais_chains}, {raise_examples}, {raise_chains})"
        )
    reasons += [UNDERMINING[c] for c in UNDERMINING if c in codes]
    return [Named(r) for r in reasons]


def _gap_slope(history: list[CertifyStep], tolerance: float) -> Optional[float]:
    """The slope of log gap against log K over the last (up to 3) Ks with a positive gap; None when the gap is
    within the tolerance (not what keeps the sandwich open) or fewer than two such Ks."""
    if not history or history[-1].gap is None or history[-1].gap <= tolerance:
        return None
    pts = [(s.steps, s.gap) for s in history if s.gap is not None and s.gap > 0][-3:]
    if len(pts) < 2:
        return None
    xs = [math.log(k) for k, _ in pts]
    ys = [math.log(g) for _, g in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def gap_per_doubling(history: list[CertifyStep], tolerance: float) -> Optional[float]:
    """The factor by which the gap changed per doubling of K (fitted as `trend` fits it: 0.84 means it shrank
    by 16% a doubling), or None when it cannot be said."""
    slope = _gap_slope(history, tolerance)
    return None if slope is None else 2.0**slope


def trend(history: list[CertifyStep], tolerance: float) -> Optional[int]:
    """K at which the gap would reach `tolerance` if log gap is linear in log K over the last (up to 3) Ks with a
    positive gap; None when fewer than two such Ks, the gap is not shrinking, or that K is more than
    TREND_MAX_FACTOR times the last (`gap_per_doubling` then says how slowly it shrinks)."""
    slope = _gap_slope(history, tolerance)
    if slope is None or slope >= FLAT_SLOPE:
        return None
    last = history[-1]  # its gap is above the tolerance (`_gap_slope`)
    needed = last.steps * (tolerance / last.gap) ** (1.0 / slope)
    if needed > TREND_MAX_FACTOR * last.steps:
        return None
    return int(math.ceil(needed * (1 - 1e-9)))


def step_of(report, steps: int, tolerance: float) -> CertifyStep:
    t = report.timing
    varying = sum(t.get(k) or 0.0 for k in ("ais_seconds", "raise_seconds"))
    a = report.ais
    interval = (
        (None, None) if report.gap is None or not math.isfinite(report.raise_stderr) else sandwich_interval(report)
    )
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
