"""Log Z along training: a saved run's checkpoints annealed through in one pass (AIS at every checkpoint, BAR between
neighbouring ones with a health check per link, RAISE along the path for the conservative side, a verdict on the last
checkpoint), and the persistent chains of a training monitor.

settings.py (`TrajectorySettings`, `TrackSettings`), run.py (`evaluate_trajectory`), online.py (`TrajectoryTracker`),
report.py (`TrajectoryReport`, `TrajectoryRecord`: data). May import the core, `evaluation` (the start's biases),
`certification` (the verdict's conditions), `runtime` and `io`; never the CLI or the renderers (the report's
`format_table`/`plot` call `raise_eval.render` lazily).
"""

from raise_eval.trajectory.report import (
    CheckpointEstimate,
    LinkReport,
    TrajectoryInterrupted,
    TrajectoryRecord,
    TrajectoryReport,
)
from raise_eval.trajectory.run import evaluate_trajectory
from raise_eval.trajectory.settings import TrackSettings, TrajectorySettings

__all__ = [
    "CheckpointEstimate",
    "LinkReport",
    "TrackSettings",
    "TrajectoryInterrupted",
    "TrajectoryRecord",
    "TrajectoryReport",
    "TrajectorySettings",
    "evaluate_trajectory",
]
