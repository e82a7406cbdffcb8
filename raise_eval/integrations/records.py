"""One record of a training monitor's sandwich (`SandwichRecord`) and the columns of its history files: data,
written by `raise_eval.integrations.hooks` and drawn by `raise_eval.render.plots`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from raise_eval.evaluation.report import EvaluationReport

HISTORY_FIELDS = (
    "epoch",
    "ais",
    "ais_se",
    "raise",
    "raise_se",
    "gap",
    "exact",
    "log_z",
    "log_z_exact",
    "seconds",
    "warnings",
    "verdict",
)


@dataclass(frozen=True)
class SandwichRecord:
    """One evaluation during training: average test log-likelihoods in nats.

    ais, ais_se: AIS's estimate (optimistic) and its standard error (that of log Z-hat, as the report prints it);
    raise_, raise_se: RAISE's control-variate headline (conservative) and its standard error; gap = ais - raise_;
    exact: the exact average when enumeration was affordable (`exact='auto'`), else None; log_z: AIS's log Z-hat
    (for a DBN, the top RBM's), log_z_exact the exact one or None; seconds: wall time of the evaluation;
    warnings: the codes of the report's warnings (README, "How to read the numbers"); verdict: with a certified
    monitor (`until_gap`), 'closed' or 'open' (`LikelihoodMonitor.last_certificate` says why), else None.
    """

    epoch: int
    ais: float
    ais_se: float
    raise_: float
    raise_se: float
    gap: float
    exact: Optional[float]
    log_z: float
    log_z_exact: Optional[float]
    seconds: float
    warnings: tuple[str, ...] = ()
    verdict: Optional[str] = None

    @classmethod
    def from_report(cls, epoch: int, report: EvaluationReport, verdict: Optional[str] = None) -> SandwichRecord:
        return cls(
            epoch=int(epoch),
            ais=float(report.ais_mean),
            ais_se=float(report.ais.stderr),
            raise_=float(report.raise_mean),
            raise_se=float(report.raise_stderr),
            gap=float(report.gap),
            exact=report.exact_mean,
            log_z=float(report.ais.estimate),
            log_z_exact=report.log_z_exact,
            seconds=float(report.timing["seconds"]),
            warnings=tuple(w.code for w in report.warnings),
            verdict=verdict,
        )

    def to_dict(self) -> dict[str, Any]:
        """The record with the key 'raise' (not 'raise_'), in the order of the history files' columns."""
        values = (
            self.epoch,
            self.ais,
            self.ais_se,
            self.raise_,
            self.raise_se,
            self.gap,
            self.exact,
            self.log_z,
            self.log_z_exact,
            self.seconds,
            list(self.warnings),
            self.verdict,
        )
        return dict(zip(HISTORY_FIELDS, values))
