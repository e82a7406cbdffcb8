"""Warnings a careful researcher would raise about an AIS / RAISE evaluation.

Each warning is a code and a sentence saying what it means and what to do (settings named as `{field}`).
`raise-eval evaluate` prints them under
its table and lists them in the JSON under `warnings`; the README's "How to read the numbers" says the same. The
certified verdict's thresholds and its log f(v) allowance are here too, where its table (`raise_eval.render.text`)
reads them without importing `raise_eval.certification`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from raise_eval.settings import Named, render_names

LOW_ESS_FRACTION = 0.1  # AIS ESS below this fraction of the chains
FEW_CHAINS = 30  # an ESS below this is "a few chains": too few for the standard error of log Z to be trusted
GAP_NATS = 1.0  # models are commonly compared by differences of about a nat
SIGMAS = 3.0  # "beyond the noise": more than 3 combined standard errors
TEST_MASS_MARGIN = 1.0  # nats of slack for the noise of estimated log f(v) in the test-mass check

# A gap shrinking by less than 7% per doubling of K is too flat to extrapolate; a trend's K beyond TREND_MAX_FACTOR
# times the last K is not given (the table says how slowly the gap shrinks instead).
FLAT_SLOPE = -0.1
TREND_MAX_FACTOR = 10_000


def log_f_advice(log_f_method: str) -> str:
    """What to change when an estimate of log f(v) by `log_f_method` is not to be trusted."""
    return {
        "importance": "{log_f_method} ais (per-vector AIS to the posterior), or a larger {log_f_samples}",
        "ais": "a larger {log_f_ais_steps} (or {log_f_ais_chains})",
        "mean-field": "{log_f_method} ais (the mean-field bound is loose by design)",
    }.get(log_f_method, "{log_f_method} ais")


@dataclass(frozen=True)
class Warning:
    """One diagnostic: a stable code and a sentence for the reader, naming settings as `{field}`
    (`raise_eval.settings.render_names`; `render(names)` writes them, e.g. as the command line's flags)."""

    code: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", Named(self.message))

    def render(self, names: Optional[dict[str, str]] = None) -> Warning:
        return Warning(self.code, render_names(self.message, names))

    def to_dict(self, names: Optional[dict[str, str]] = None) -> dict:
        return {"code": self.code, "message": render_names(self.message, names)}


def log_f_allowance(report) -> float:
    """Nats by which the AIS side may sit below the truth because log f(v) is estimated (it errs low): the rise of
    the log f(v) check, mean + 3 standard errors, at least 0; 0 when log f(v) is exact or not checked."""
    check = getattr(report, "log_f_check", None)
    if check is None:
        return 0.0
    se = check.mean_rise_stderr if math.isfinite(check.mean_rise_stderr) else 0.0
    return max(0.0, check.mean_rise + 3.0 * se)


@dataclass(frozen=True)
class SandwichNumbers:
    """The numbers of one sandwich that the warnings (and a trajectory's verdict) read: average test log-likelihoods
    in nats. `ais_mean` is None when log f(v) did not finish; RAISE's are None when it did not run. `log_z` is AIS's
    log Z-hat (its standard error `ais_stderr`, ESS `ais_ess` of `ais_chains` chains, `ais_lower` the low end of its
    ±3σ interval) and `log_test_mass` log sum_v f(v) over the distinct test vectors: Z is at least that sum, so a
    smaller log Z-hat is impossible. `num_test`: the number of test vectors (None: not known)."""

    ais_mean: Optional[float]
    ais_stderr: float
    ais_ess: float
    ais_chains: int
    ais_lower: float
    raise_mean: Optional[float]
    raise_stderr: Optional[float]
    exact_mean: Optional[float] = None
    log_z: Optional[float] = None
    log_test_mass: Optional[float] = None
    num_test: Optional[int] = None


def diagnose(
    numbers: SandwichNumbers,
    *,
    init: str = "uniform",
    log_f_method: str = "exact",
    log_f_check=None,
    log_f_estimated: bool = False,
    raise_start: Optional[str] = None,
) -> list[Warning]:
    """The warnings that apply to one evaluation's `numbers`. `init` and `log_f_method` tailor the advice.
    `log_f_check` is the `raise_eval.evaluation.log_f_check.LogFCheck` of an estimated log f(v) (`log_f_estimated`),
    or None when it was not run. `raise_start` is RAISE's start ('unrolled' for a DBN's paper start tailors the
    advice of a large gap)."""
    n = numbers
    ais_mean, ais_stderr, ais_ess = n.ais_mean, n.ais_stderr, n.ais_ess
    ais_chains, ais_lower = n.ais_chains, n.ais_lower
    raise_mean, raise_stderr, exact_mean, log_z = n.raise_mean, n.raise_stderr, n.exact_mean, n.log_z
    log_test_mass, num_test = n.log_test_mass, n.num_test
    out = []
    if num_test == 1:
        out.append(
            Warning(
                "one-test-vector",
                "the test data holds a single vector: the average test log-likelihood is that one vector's, and "
                "RAISE's standard error, taken over test vectors, is undefined (NaN; null in the JSON). Evaluate on "
                "a test set of many vectors (a .npy/.npz file shaped (N, n_visible) with N > 1).",
            )
        )
    if log_f_check is not None and log_f_check.biased:
        out.append(
            Warning(
                "log-f-biased",
                f"the estimates of log f(v) are not trustworthy: {log_f_check.describe()}. The estimator misses "
                "posterior mass (its own standard errors cannot show this), so log f-hat is too low and the AIS "
                f"log-likelihood is off by at least about the rise. Use {log_f_advice(log_f_method)}, until the check "
                "stops rising.",
            )
        )
    elif log_f_estimated and log_f_check is None:
        out.append(
            Warning(
                "log-f-unchecked",
                "log f(v) is estimated and was not checked for bias ({log_f_check} 0): an estimate whose proposal "
                "misses posterior modes is confidently wrong, so the AIS log-likelihood may be off by more than its "
                "standard error. Run with {log_f_check} N (default 100).",
            )
        )
    base_rates_hint = "" if init == "base-rates" else ", or try {init} base-rates"
    if log_z is not None and log_test_mass is not None and log_z + TEST_MASS_MARGIN < log_test_mass:
        out.append(
            Warning(
                "log-z-below-test-mass",
                f"AIS's log Z ({log_z:.2f}) is below the log of the summed unnormalized probabilities of the test "
                f"vectors themselves ({log_test_mass:.2f}): the model would give the test set a probability above "
                "1, so AIS has missed most of the model's mass and its log-likelihood is far too high. Raise K "
                f"({{steps}}) a lot{base_rates_hint}; trust RAISE's number more than AIS's here.",
            )
        )
    if ais_ess < LOW_ESS_FRACTION * ais_chains:
        if ais_ess < FEW_CHAINS:  # few in number: more chains help as well as a larger K
            why = "log Z rests on a few chains, its standard error is unreliable"
            fix = f"Raise K ({{steps}}) or run more chains{base_rates_hint}"
        else:  # many chains, but a small share of them: the annealing is too coarse, whatever the chain count
            why = (
                f"the weights are as uneven as if only {ais_ess / ais_chains:.1%} of the chains counted, a sign that "
                "the annealing is too coarse; the standard error of log Z may understate its error"
            )
            fix = f"Raise K ({{steps}}){base_rates_hint}"
        out.append(
            Warning(
                "low-ess",
                f"AIS's effective sample size is {ais_ess:,.0f} of {ais_chains:,} chains: {why}, and AIS "
                f"probably still overestimates the log-likelihood. {fix}.",
            )
        )
    if not math.isfinite(ais_lower):
        out.append(
            Warning(
                "interval-not-finite",
                "the ±3σ interval of Z-hat reaches zero, so log Z has no finite lower end: the AIS weights are so "
                "uneven that 3 standard errors exceed the estimate itself, and neither log Z nor the AIS "
                "log-likelihood is pinned down. Raise K ({steps}) until the interval is finite and narrow.",
            )
        )
    if ais_mean is None or raise_mean is None or raise_stderr is None:
        return out
    noise = math.hypot(ais_stderr, raise_stderr if math.isfinite(raise_stderr) else 0.0)
    gap = ais_mean - raise_mean
    if -gap > SIGMAS * noise:
        out.append(
            Warning(
                "raise-above-ais",
                f"RAISE is {-gap:.2f} nats above AIS, more than {SIGMAS:g} times their combined standard error "
                f"({noise:.2f}): the annealing model fits the test data better than the model itself, so neither "
                "number is the model's log-likelihood (RAISE bounds the annealing model's, AIS overestimates the "
                "model's). Raise K ({steps}) until RAISE is at or below AIS."
                + (
                    ""
                    if log_f_method == "exact"
                    else " Here AIS also rests on the estimated log f(v), a lower bound"
                    + (
                        ": the mean-field bound can sit below log f(v) by more than the gap; try {log_f_method} "
                        "importance."
                        if log_f_method == "mean-field"
                        else "."
                    )
                ),
            )
        )
    if abs(gap) > GAP_NATS:
        out.append(
            Warning(
                "large-gap",
                f"AIS and RAISE differ by {abs(gap):.2f} nats, more than the {GAP_NATS:g} nat by which models are "
                "commonly compared: at least one of them is inaccurate, and AIS (the optimistic one) may flatter "
                "the model. Raise K ({steps}) until the gap closes; do not compare models on these numbers."
                + (
                    " RAISE started from one draw of the recognition distribution ({dbn_start} unrolled), whose "
                    "mismatch K does not anneal: {dbn_start} heated does."
                    if raise_start == "unrolled"
                    else ""
                ),
            )
        )
    if exact_mean is not None:
        low = min(raise_mean, ais_mean) - SIGMAS * noise
        high = max(raise_mean, ais_mean) + SIGMAS * noise
        if not low <= exact_mean <= high:
            out.append(
                Warning(
                    "exact-outside-sandwich",
                    f"the exact log-likelihood {exact_mean:.4f} lies outside the AIS-RAISE sandwich "
                    f"[{low:.4f}, {high:.4f}] (3 standard errors added): the estimates are not yet accurate for "
                    "this model. Raise K ({steps}).",
                )
            )
    return out
