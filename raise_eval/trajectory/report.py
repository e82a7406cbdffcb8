"""What log Z along training produced, as data: `TrajectoryReport` (a saved run's checkpoints) and
`TrajectoryRecord` (a training monitor's call); `to_dict()` is the JSON document, the table and plot are drawn by
`raise_eval.render`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from raise_eval.diagnostics import Warning


@dataclass
class CheckpointEstimate:
    """One checkpoint's numbers (nats; log-likelihoods are averages over the test vectors).

    step: the training step (from the file name or the manifest) or the checkpoint's index; label: its name.
    log_z, log_z_stderr, ess, log_z_lower: AIS's log Z-hat from the pass through every checkpoint, its delta-method
        standard error, effective sample size and the low end of its ±3σ interval (-inf when not finite).
    log_z_bar, log_z_bar_stderr: BAR's log Z (the start's exact log Z plus the links' Deltas) and its bootstrap error.
    log_z_exact: by enumeration, or None.
    log_f_mean: the average log f(v) (exact, or estimated for a DBM: `log_f_method`).
    ais_mean = log_f_mean - log_z (optimistic), bar_mean = log_f_mean - log_z_bar.
    raise_mean, raise_stderr: RAISE's control-variate average (conservative) along the path truncated here, or None
        where RAISE did not run. exact_mean: the exact average log-likelihood, or None.
    resamplings: with SMC (resample_ess > 0), the resamplings (one replicate group at one sub-step) before this
        checkpoint; log_z is then the log of the replicates' average Z estimate and log_z_stderr their spread's
        standard error, ess the chains' since their group's last resampling (summed over the groups). None for
        plain AIS.
    """

    step: int
    label: str
    log_z: float
    log_z_stderr: float
    ess: float
    log_z_lower: float
    log_z_bar: float
    log_z_bar_stderr: float
    log_z_exact: Optional[float]
    log_f_mean: float
    log_f_method: str
    ais_mean: float
    bar_mean: float
    raise_mean: Optional[float] = None
    raise_stderr: Optional[float] = None
    exact_mean: Optional[float] = None
    resamplings: Optional[int] = None

    @property
    def gap(self) -> Optional[float]:
        return None if self.raise_mean is None else self.ais_mean - self.raise_mean

    def to_dict(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["gap"] = self.gap
        return out


@dataclass
class LinkReport:
    """BAR on one link of the ladder (from rung `start` to rung `end`, named by their labels) and its check."""

    link: int
    start: str
    end: str
    delta: float
    stderr: float
    forward: float
    reverse: float
    overlap: float
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "healthy": self.healthy}


@dataclass
class TrajectoryReport:
    """Log Z and the sandwich at every checkpoint of one run (`evaluate_trajectory`).

    settings: the `TrajectorySettings` as a dict and the labels (files, data); checkpoints: one
    `CheckpointEstimate` per checkpoint in training order; links: BAR's ladder (the start, then every checkpoint);
    verdict ('closed' or 'open'), interval (the last checkpoint's certified interval when closed) and reasons (why
    open) for the last checkpoint, at `settings['tolerance']`; warnings: the last checkpoint's diagnostics; timing:
    seconds per stage (of those that finished). interrupted: the stage Ctrl-C (or SIGTERM) stopped, None when the run
    finished; an interrupted report holds the checkpoints whose AIS, BAR and log f(v) finished (RAISE's where it
    ran), its verdict open.
    """

    settings: dict[str, Any]
    checkpoints: list[CheckpointEstimate]
    links: list[LinkReport]
    verdict: str
    interval: Optional[tuple[float, float]]
    reasons: list[str]
    warnings: list[Warning]
    num_test: int
    timing: dict[str, float]
    notes: list[str] = field(default_factory=list)
    interrupted: Optional[str] = None

    @property
    def complete(self) -> bool:
        return self.interrupted is None

    @property
    def final(self) -> Optional[CheckpointEstimate]:
        """The last checkpoint's estimate (None when a run interrupted early has none)."""
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def closed(self) -> bool:
        return self.verdict == "closed"

    @property
    def coarse_links(self) -> list[LinkReport]:
        """The links the health check flagged."""
        return [link for link in self.links if not link.healthy]

    def to_dict(self, names: Optional[dict[str, str]] = None) -> dict[str, Any]:
        from raise_eval.settings import render_names

        return {
            "complete": self.complete,
            "interrupted_during": self.interrupted,
            "settings": self.settings,
            "num_test": self.num_test,
            "checkpoints": [c.to_dict() for c in self.checkpoints],
            "links": [link.to_dict() for link in self.links],
            "verdict": self.verdict,
            "interval": None if self.interval is None else list(self.interval),
            "reasons_open": [render_names(r, names) for r in self.reasons],
            "warnings": [w.to_dict(names) for w in self.warnings],
            "timing": self.timing,
            "notes": [render_names(n, names) for n in self.notes],
        }

    def format_table(self, names: Optional[dict[str, str]] = None) -> str:
        """The table `raise-eval trajectory` prints (`raise_eval.render.text.trajectory_table`)."""
        from raise_eval.render.text import trajectory_table

        return trajectory_table(self, names)

    def plot(self, path: str) -> None:
        """Log Z and the sandwich against the training step (`raise_eval.render.plots.plot_trajectory`)."""
        from raise_eval.render.plots import plot_trajectory

        plot_trajectory(self, path)


class TrajectoryInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during `evaluate_trajectory`: `report` holds what finished (`report.interrupted` names the
    stage)."""

    def __init__(self, report: TrajectoryReport) -> None:
        super().__init__(f"interrupted during {report.interrupted}")
        self.report = report


@dataclass(frozen=True)
class TrajectoryRecord:
    """One call of a tracking training monitor (`LikelihoodMonitor(..., track=...)`), in nats.

    epoch: as the monitor got it; log_z, log_z_stderr, ess: the persistent chains' AIS estimate at this call's model
    (all pieces so far: one AIS run through the training trajectory); ais: mean log f(v) over the monitor's test
    vectors minus log_z, where log f(v) is exact (RBMs; DBMs enumerated), else None; log_z_exact, exact: by
    enumeration when the monitor's evaluation allows it, else None; raise_, raise_se, gap, verdict: on the calls
    that ran RAISE along the trajectory (final() and every verdict_every records), else None; seconds: this call's
    wall time; steps: the annealing steps so far.
    """

    epoch: int
    log_z: float
    log_z_stderr: float
    ess: float
    ais: Optional[float]
    log_z_exact: Optional[float]
    exact: Optional[float]
    raise_: Optional[float]
    raise_se: Optional[float]
    gap: Optional[float]
    verdict: Optional[str]
    seconds: float
    steps: int

    def to_dict(self) -> dict[str, Any]:
        """The record with the key 'raise' (not 'raise_'), in the order of the history files' columns."""
        values = dict(vars(self))
        values["raise"] = values.pop("raise_")
        return {k: values[k] for k in TRACK_FIELDS}


TRACK_FIELDS = (
    "epoch", "log_z", "log_z_stderr", "ess", "ais", "log_z_exact", "exact", "raise", "raise_se", "gap", "verdict",
    "seconds", "steps",
)  # fmt: skip
