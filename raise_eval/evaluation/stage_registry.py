"""The stages of an evaluation, each declared once: its name (the cost estimate's and the memory plan's key), the
label the tables write, the report's timing entry, its random stream (`raise_eval.seeds`), what a resume file keeps
of it and how an interruption names it. `run_evaluation`, the memory plan and the cost estimate look stages up here;
the work of each is in `raise_eval.evaluation.stages`, its memory in `evaluation.memory`, its timer in
`evaluation.timing`.

A leaf module (it imports only `raise_eval.seeds`), so that every module of the evaluation can read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from raise_eval.seeds import EVALUATION_OFFSETS


@dataclass(frozen=True)
class Stage:
    """One stage of an evaluation.

    name: its key ('ais'); label: as tables write it ('AIS'); report_key: its entry in the report's timing
    ('ais_seconds'); stream: its entry in `raise_eval.seeds.EVALUATION_OFFSETS` (None: it draws no random numbers);
    resume_stage: what a resume file keeps of it ('ais' shards, 'raise' shards, the 'log_f' estimates; None:
    nothing); interrupted: how a report stopped during it names it ('the log f(v) estimates').
    """

    name: str
    label: str
    report_key: str
    stream: Optional[str]
    resume_stage: Optional[str]
    interrupted: str

    @property
    def seed_offset(self) -> Optional[int]:
        """Its stream's seed is the run's seed plus this (None: no stream)."""
        return None if self.stream is None else EVALUATION_OFFSETS[self.stream]


# In the order of the report's timing entries (the JSON's keys keep it).
STAGES = (
    Stage("ais", "AIS", "ais_seconds", "ais", "ais", "AIS"),
    Stage("raise", "RAISE", "raise_seconds", "raise", "raise", "RAISE"),
    Stage("log_f", "log f(v)", "log_f_seconds", "log_f", "log_f", "the log f(v) estimates"),
    Stage("exact", "exact", "exact_seconds", None, None, "the exact answer"),
    Stage("pilot", "adaptive pilot", "pilot_seconds", "pilot", None, "the adaptive schedule's pilot"),
    Stage("log_f_check", "log f(v) check", "log_f_check_seconds", "log_f_check", None, "the log f(v) check"),
)
STAGE = {s.name: s for s in STAGES}
LABELS = {s.name: s.label for s in STAGES}

__all__ = ["LABELS", "STAGE", "STAGES", "Stage"]
