"""What a BDMC run produced, as data (`BDMCReport`); `to_dict()` is the JSON document, the table and plot are drawn
by `raise_eval.render`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from torch import Tensor

from raise_eval.diagnostics import GAP_NATS, Warning
from raise_eval.estimators.bdmc import BDMCResult
from raise_eval.stats import mean_and_stderr


@dataclass
class BDMCReport:
    """Results of `evaluate_bdmc`; `format_table()` prints them, `to_dict()` is the JSON document.

    A run stopped part-way (Ctrl-C, or an error in a stage) keeps the stages that finished: `interrupted` names the
    stage that did not, `error` says what went wrong (None for Ctrl-C), and the table and the JSON show the rest.
    """

    settings: dict[str, Any]
    sandwich: dict[int, BDMCResult]
    baselines: dict[str, Tensor]  # name -> per-example estimates (N,) on the simulated examples
    real: dict[str, Tensor] = field(default_factory=dict)  # name -> per-example estimates on real data
    aide: Optional[Any] = None
    step_sizes: Optional[dict] = None
    timing: dict[str, float] = field(default_factory=dict)
    interrupted: Optional[str] = None
    error: Optional[str] = None

    @property
    def complete(self) -> bool:
        return self.interrupted is None

    @property
    def ground_truth(self) -> Optional[Tensor]:
        """Per-example midpoint of the tightest sandwich (largest K), shaped (N,); None before any K finished."""
        if not self.sandwich:
            return None
        r = self.sandwich[max(self.sandwich)]
        return 0.5 * (r.lower + r.upper)

    @property
    def warnings(self) -> list[Warning]:
        """`bdmc-open` when the tightest sandwich may be wider than GAP_NATS (its gap, or its gap plus two standard
        errors): its midpoint is then no ground truth."""
        if not self.sandwich:
            return []
        k_max = max(self.sandwich)
        summary = self.sandwich[k_max].summary()["gap"]
        gap, se = summary["mean"], summary["stderr"]
        reach = gap + 2 * se if se == se else gap  # a NaN standard error (one example) adds nothing
        if reach <= GAP_NATS:
            return []
        if gap > GAP_NATS:
            width = f"is {gap:.2f} nats wide, more than the {GAP_NATS:g} nat"
        else:
            width = f"is {gap:.2f} ± {se:.2f} nats wide: within two standard errors of more than the {GAP_NATS:g} nat"
        return [
            Warning(
                "bdmc-open",
                f"the BDMC sandwich at K = {k_max} {width} by which models are commonly compared: the truth lies "
                f"anywhere between its ends, so its midpoint is no ground truth and the 'vs midpoint' differences are "
                f"uncertain by up to {reach / 2:.2f} nats. Raise K ({{steps}}) until the gap closes (or more "
                "examples, to narrow its standard error).",
            )
        ]

    def _baseline_summary(self, values: Tensor) -> dict:
        mean, se = mean_and_stderr(values)
        diff = diff_se = None
        if self.ground_truth is not None:
            diff, diff_se = mean_and_stderr(values.double() - self.ground_truth)
        return {"mean": mean, "stderr": se, "minus_bdmc_midpoint": diff, "minus_bdmc_midpoint_stderr": diff_se}

    def to_dict(self, names: Optional[dict[str, str]] = None) -> dict:
        truth = self.ground_truth
        out = {
            "complete": self.complete,
            "interrupted_during": self.interrupted,
            "error": self.error,
            "settings": self.settings,
            "simulated": {
                "bdmc": {str(k): r.to_dict() for k, r in self.sandwich.items()},
                "ground_truth_midpoint": None if truth is None else mean_and_stderr(truth)[0],
                **{name: self._baseline_summary(v) for name, v in self.baselines.items()},
            },
            "hmc_step_sizes": self.step_sizes,
            "timing": self.timing,
            "warnings": [w.to_dict(names) for w in self.warnings],
        }
        if self.real:
            out["real"] = {name: dict(zip(("mean", "stderr"), mean_and_stderr(v))) for name, v in self.real.items()}
        if self.aide is not None:
            out["aide"] = self.aide.to_dict()
        return out

    def format_table(self, names: Optional[dict[str, str]] = None) -> str:
        """The table `raise-eval bdmc` prints (`raise_eval.render.text.bdmc_table`)."""
        from raise_eval.render.text import bdmc_table

        return bdmc_table(self, names)

    def plot(self, path: str) -> None:
        """Bounds against K with the baselines as horizontal lines (`raise_eval.render.plots.plot_bdmc`)."""
        from raise_eval.render.plots import plot_bdmc

        plot_bdmc(self, path)


class BDMCInterrupted(KeyboardInterrupt):
    """Ctrl-C during `evaluate_bdmc`: `report` holds the stages that finished (`report.interrupted` names the
    stage in progress)."""

    def __init__(self, report: BDMCReport):
        super().__init__(f"interrupted during {report.interrupted}")
        self.report = report


class BDMCFailed(RuntimeError):
    """A stage of `evaluate_bdmc` raised: `report` holds the stages that finished before it (`report.interrupted`
    names the stage, `report.error` the error), and the error itself is the `__cause__`."""

    def __init__(self, report: BDMCReport):
        super().__init__(f"BDMC failed during {report.interrupted}: {report.error}")
        self.report = report
