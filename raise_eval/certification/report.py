"""What a certified run produced, as data: one `CertifyStep` per K and the `Certificate` (verdict, interval or
reasons). `to_dict()` is the JSON document; the table and the plot are drawn by `raise_eval.render`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from raise_eval.settings import render_names


class CertifyInterrupted(KeyboardInterrupt):
    """Ctrl-C during `certify`: `certificate` holds the finished Ks (verdict 'interrupted'), `report` the partial
    evaluation of the K in progress."""

    def __init__(self, certificate: Certificate, report):
        super().__init__("certified run interrupted")
        self.certificate = certificate
        self.report = report


class CertifyFailed(RuntimeError):
    """A K of `certify` stopped on log-weights that turned NaN or +inf (the evaluation's `EvaluationFailed` is the
    `__cause__`): `certificate` holds the finished Ks (verdict 'failed', the reason names the K, the stage and the
    error), `report` the partial evaluation of that K."""

    def __init__(self, certificate: Certificate, report):
        super().__init__(certificate.reasons[0] if certificate.reasons else "certified run failed")
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

    def to_dict(self, names: Optional[dict[str, str]] = None) -> dict[str, Any]:
        """The step's fields and its gap; its reasons written with `names` (the settings as the caller calls them)."""
        d = dict(vars(self))
        d["reasons_open"] = [render_names(r, names) for r in self.reasons_open]
        d["gap"] = self.gap
        return d


@dataclass
class Certificate:
    """The verdict of `certify` and every K it tried.

    verdict: 'closed' (the log-likelihood lies in `interval`) or 'open' (`reasons` say why); 'interrupted' (Ctrl-C)
        or 'failed' (log-weights turned NaN) for a run that stopped with the finished Ks.
    interval: (low, high) in nats when closed: [min(AIS, RAISE) - 2σ, max(AIS, RAISE) + 2σ + a], σ their combined
        standard error and a the log f(v) allowance (`log_f_allowance`: the AIS side rests on log f-hat, which errs
        low, when log f(v) is estimated); None when open.
    needed_steps: when open and the gap shrank, the K at which it would reach the tolerance if the trend of the
        last Ks (gap ~ K^-a) holds; None when it cannot be said.
    gap_per_doubling: when open on the gap, the factor by which the gap changed per doubling of K over the last
        Ks (the same fit); None when fewer than two Ks or the gap is within the tolerance.
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
    gap_per_doubling: Optional[float] = None
    # What the reasons' settings are called for this model whatever the caller's names (an energy model's RAISE runs
    # from every test vector: {raise_examples} is 'more test vectors').
    own_names: dict[str, str] = field(default_factory=dict)

    @property
    def closed(self) -> bool:
        return self.verdict == "closed"

    def to_dict(self, names: Optional[dict[str, str]] = None) -> dict[str, Any]:
        names = {**(names or {}), **self.own_names} if self.own_names else names
        return {
            "model": self.model,
            "verdict": self.verdict,
            "reasons": [render_names(r, names) for r in self.reasons],
            "interval": None if self.interval is None else list(self.interval),
            "tolerance": self.tolerance,
            "time_budget_seconds": self.time_budget,
            "max_steps": self.max_steps,
            "needed_steps": self.needed_steps,
            "gap_per_doubling": self.gap_per_doubling,
            "seconds": self.seconds,
            "history": [s.to_dict(names) for s in self.history],
            "notes": [render_names(n, names) for n in self.notes],
            "last_evaluation": None if self.report is None else self.report.to_dict(names),
        }

    def format_table(self, names: Optional[dict[str, str]] = None) -> str:
        """The verdict's table (`raise_eval.render.text.certificate_table`)."""
        from raise_eval.render.text import certificate_table

        return certificate_table(self, {**(names or {}), **self.own_names} if self.own_names else names)

    def plot(self, path: str) -> None:
        """AIS and RAISE against K (`raise_eval.render.plots.plot_certificate`; needs matplotlib)."""
        from raise_eval.render.plots import plot_certificate

        plot_certificate(self, path)
