"""What an evaluation produced, as data: `EvaluationReport` (and `ExactValues`, the enumerated values a certified
run reuses). `to_dict()` is the JSON document; the table is drawn by `raise_eval.render.text`.

The JSON document's keys:

    log_z.ais.estimate, log_z.ais.stderr, log_z.exact,
    log_likelihood.ais.mean, log_likelihood.raise.mean, log_likelihood.raise.stderr,
    log_likelihood.exact, log_likelihood.gap, settings, timing.seconds

(null where not applicable, e.g. exact values of large models).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.diagnostics import SandwichNumbers, Warning, diagnose
from raise_eval.estimators.ais import AISResult
from raise_eval.estimators.control_variates import ControlVariateEstimate
from raise_eval.estimators.raise_ import RAISEResult
from raise_eval.estimators.thermodynamic import ThermodynamicResult
from raise_eval.estimators.unnormalized import LogUnnormalizedEstimate
from raise_eval.evaluation.log_f_check import LogFCheck
from raise_eval.evaluation.memory import CostEstimate
from raise_eval.settings import render_names


@dataclass
class ExactValues:
    """Exact log Z and exact log f(v) of the test vectors (None for an RBM, whose log f(v) is closed-form), computed
    once by enumeration; `certify` hands them to the evaluations at later K instead of recomputing them.

    log_f: float64 shaped (N,) or None.
    """

    log_z: float
    log_f: Optional[Tensor]
    seconds: float
    route: str = ""


@dataclass
class EvaluationReport:
    """Everything `raise-eval evaluate` prints; `to_dict()` gives the JSON document.

    A run stopped part-way (Ctrl-C, or log-weights that turned NaN: `error` says what went wrong, None for Ctrl-C)
    leaves the stages that did not finish as None and names the stage it was in `interrupted`; the table and the
    JSON then show what finished. `notes` and the warnings name settings as
    `{field}` (rendered by `to_dict(names)` and the text renderer).
    """

    settings: dict[str, Any]
    num_test: int
    ais: Optional[AISResult]
    raise_: Optional[RAISEResult]
    ais_mean: Optional[float]
    raise_mean: Optional[float]
    raise_stderr: Optional[float]
    control_variate: Optional[ControlVariateEstimate]
    log_f: Optional[LogUnnormalizedEstimate]
    log_z_exact: Optional[float]
    exact_mean: Optional[float]
    timing: dict[str, Optional[float]]
    notes: list[str] = field(default_factory=list)
    interrupted: Optional[str] = None
    distinct_test: Optional[Tensor] = None  # indices of the distinct test vectors (for the test-mass check)
    log_f_check: Optional[LogFCheck] = None  # the longer re-estimate of log f(v) on a subset (estimated log f only)
    exact_values: Optional[ExactValues] = None
    cost_estimate: Optional[CostEstimate] = None  # what the run was predicted to cost (`estimate_cost`), if asked
    error: Optional[str] = None  # why the run stopped in stage `interrupted` (None: Ctrl-C, or finished)
    # log Z by thermodynamic integration beside AIS (`ti_chains`; fully visible models): never in the sandwich
    thermodynamic: Optional[ThermodynamicResult] = None

    @property
    def complete(self) -> bool:
        return self.interrupted is None

    @property
    def warnings(self) -> list[Warning]:
        """What a careful reader should distrust in these numbers (see `raise_eval.diagnostics`)."""
        if self.ais is None:
            return []
        numbers = SandwichNumbers(
            ais_mean=self.ais_mean,
            ais_stderr=float(self.ais.stderr),
            ais_ess=float(self.ais.ess),
            ais_chains=self.ais.num_chains,
            ais_lower=float(self.ais.lower),
            raise_mean=self.raise_mean,
            raise_stderr=self.raise_stderr,
            exact_mean=self.exact_mean,
            log_z=self.ais.estimate,
            log_test_mass=self.log_test_mass,
            num_test=self.num_test,
        )
        return diagnose(
            numbers,
            init=self.settings.get("init", "uniform"),
            log_f_method="exact" if self.log_f is None else self.log_f.method,
            log_f_check=self.log_f_check,
            log_f_estimated=self.log_f is not None and self.log_f.method != "exact",
            raise_start=None if self.raise_ is None else self.raise_.start,
        )

    @property
    def log_test_mass(self) -> Optional[float]:
        """log sum_v f(v) over the distinct test vectors (f estimated for DBMs and DBNs): a lower bound on log Z."""
        if self.log_f is None or self.distinct_test is None or self.settings.get("likelihood") == "density":
            return None  # densities of real vectors: their sum bounds nothing
        return float(torch.logsumexp(self.log_f.log_unnormalized[self.distinct_test], 0))

    @property
    def gap(self) -> Optional[float]:
        """AIS - RAISE average log-likelihood (a large positive gap: at least one estimate is off)."""
        if self.ais_mean is None or self.raise_mean is None:
            return None
        return self.ais_mean - self.raise_mean

    def to_dict(self, names: Optional[dict[str, str]] = None) -> dict[str, Any]:
        """The JSON document; `names` writes the settings that notes and warnings name (e.g. as flags)."""
        r, a = self.raise_, self.ais
        raise_doc = None
        if r is not None:
            raise_doc = {
                "mean": self.raise_mean,
                "stderr": self.raise_stderr,
                "subset_mean": r.mean,
                "subset_stderr": r.stderr,
                "headline": "control_variate",
                "control_variate": self.control_variate.to_dict(),
                "start": r.start,
                "num_examples": int(r.log_likelihood.shape[0]),
                "num_chains": r.num_chains,
                "per_example": r.log_likelihood,
            }
        ais_doc = None
        if a is not None:
            ais_doc = {
                "estimate": a.estimate,
                "stderr": float(a.stderr),
                "interval_3sigma": [float(a.lower), float(a.upper)],
                "ess": float(a.ess),
                "num_chains": a.num_chains,
            }
        return {
            "complete": self.complete,
            "interrupted_during": self.interrupted,
            "error": self.error,
            "log_z": {
                "ais": ais_doc,
                "exact": self.log_z_exact,
                **({} if self.thermodynamic is None else {"thermodynamic_integration": self.thermodynamic.to_dict()}),
            },
            "log_likelihood": {
                "ais": {"mean": self.ais_mean},
                "raise": raise_doc,
                "exact": self.exact_mean,
                "gap": self.gap,
                "log_unnormalized": None
                if self.log_f is None
                else {
                    **self.log_f.to_dict(),
                    "check": None if self.log_f_check is None else self.log_f_check.to_dict(),
                },
                "num_test": self.num_test,
            },
            "settings": self.settings,
            "timing": dict(self.timing),
            "notes": [render_names(n, names) for n in self.notes],
            "warnings": [w.to_dict(names) for w in self.warnings],
            "log_test_mass": self.log_test_mass,
            "cost_estimate": None if self.cost_estimate is None else self.cost_estimate.to_dict(names),
        }

    def format_table(self, names: Optional[dict[str, str]] = None) -> str:
        """The table `raise-eval evaluate` prints (`raise_eval.render.text.evaluation_table`)."""
        from raise_eval.render.text import evaluation_table

        return evaluation_table(self, names)


class EvaluationInterrupted(KeyboardInterrupt):
    """Ctrl-C during `evaluate`: `report` holds what finished (`report.interrupted` names the stage)."""

    def __init__(self, report: EvaluationReport):
        super().__init__(f"interrupted during {report.interrupted}")
        self.report = report


class EvaluationFailed(RuntimeError):
    """A stage of `evaluate` stopped on log-weights that turned NaN or +inf (`NonFiniteLogWeightError`, the
    `__cause__`): `report` holds what finished (`report.interrupted` names the stage, `report.error` the error)."""

    def __init__(self, report: EvaluationReport):
        super().__init__(f"evaluation failed during {report.interrupted}: {report.error}")
        self.report = report
