"""What a stage of an evaluation is: one object holding its declaration (name, label, report key, random stream,
what a resume file keeps of it, how an interruption names it) and its behaviour (its run, its memory count, its
timer or its price). `raise_eval.evaluation.stages` lists them; `run_evaluation`, the memory plan and the cost
estimate go through that list, so that a new stage is one module there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from raise_eval.evaluation.memory import Held, StageMemory
from raise_eval.evaluation.timers import Timer, TimingContext
from raise_eval.seeds import EVALUATION_OFFSETS


@dataclass(frozen=True)
class Stage:
    """One stage of an evaluation.

    name: its key ('ais'); label: as tables write it ('AIS'); report_key: its entry in the report's timing
    ('ais_seconds'); stream: its entry in `raise_eval.seeds.EVALUATION_OFFSETS` (None: it draws no random numbers);
    resume_stage: what a resume file keeps of it ('ais' shards, 'raise' shards, the 'log_f' estimates; None:
    nothing); interrupted: how a report stopped during it names it ('the log f(v) estimates').
    run: its work, a function of the plan (and of what earlier stages produced): `run_evaluation` calls it.
    memory: its peak bytes, `memory(held) -> (work, terms, steps_independent)` or None where the plan does not run
        it; it adds to `held.kept` what it leaves for later stages (`stages.plan_memory`).
    timer: how the cost model times it, `timer(context) -> Timer` (None: the plan does not run it); or
    price: its seconds counted from its work rather than timed, `price(plan) -> float` (the exact enumeration).
    """

    name: str
    label: str
    report_key: str
    stream: Optional[str]
    resume_stage: Optional[str]
    interrupted: str
    run: Callable[..., Any]
    memory: Callable[[Held], StageMemory]
    timer: Optional[Callable[[TimingContext], Optional[Timer]]] = None
    price: Optional[Callable[[Any], float]] = None

    @property
    def seed_offset(self) -> Optional[int]:
        """Its stream's seed is the run's seed plus this (None: no stream)."""
        return None if self.stream is None else EVALUATION_OFFSETS[self.stream]
