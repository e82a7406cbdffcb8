"""`CertifySettings`: the settings of a certified run, declared once (`raise_eval.settings`), holding the
`EvaluateSettings` of the evaluations it runs at each K (its `steps` is the first K)."""

from __future__ import annotations

from typing import Optional

from raise_eval.evaluation.settings import EvaluateSettings
from raise_eval.settings import SettingsError, setting, settings_class

CERTIFY_HELP = (
    "with --until-gap, run the sandwich at K = --steps, 2K, 4K, ... (reusing log f(v) and the exact values) until "
    "AIS - RAISE <= TOL with small standard errors and no warning that undermines either side, or until the next K "
    "would not fit --time-budget or --max-steps; the verdict says closed (with the interval) or open (why, and the "
    "K the trend needs)"
)


def _evaluation(value):
    if not isinstance(value, EvaluateSettings):
        raise SettingsError(f"evaluation must be an EvaluateSettings, got {type(value).__name__}", ("evaluation",))
    return value


@settings_class
class CertifySettings:
    """A certified run: the evaluation at K = evaluation.steps, growth x K, ... until the sandwich closes within
    `tolerance` nats, or the next K would pass `max_steps` or the `time_budget` (seconds for this invocation,
    predicted from the measured seconds per step)."""

    tolerance: float = setting(
        None,
        "certify the sandwich to TOL nats (AIS - RAISE <= TOL; the reported interval adds ±2 standard errors). "
        "Exit status: 0 closed, 3 open",
        kind="number", least=0, strictly=True, flag="--until-gap", metavar="TOL", group="certified evaluation",
    )  # fmt: skip
    max_steps: Optional[int] = setting(
        None, "with --until-gap: the largest K to try", kind="count", least=1, none="no limit",
        flag="--max-steps", metavar="K", group="certified evaluation",
    )  # fmt: skip
    time_budget: Optional[float] = setting(
        None, "with --until-gap: wall-time budget, e.g. 600, 90s, 30m, 1.5h", kind="duration", none="no limit",
        flag="--time-budget", metavar="DURATION", group="certified evaluation",
    )  # fmt: skip
    growth: int = setting(
        2, "factor by which K grows from one evaluation to the next", kind="count", numbers="result", least=2
    )
    evaluation: EvaluateSettings = setting(
        EvaluateSettings(), "the settings of each evaluation; its steps is the first K", kind="any",
        check=_evaluation,
    )  # fmt: skip

    def _validate(self) -> None:
        if self.evaluation.betas is not None:
            raise SettingsError("a certified run grows K: it needs a named {schedule}, not explicit {betas}")
        if self.max_steps is not None and self.max_steps < self.evaluation.steps:
            raise SettingsError(
                f"{{max_steps}} ({self.max_steps}) must be at least the first K, {{steps}} ({self.evaluation.steps})"
            )
