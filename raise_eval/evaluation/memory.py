"""The memory model of an evaluation: what a stage's memory is made of (`MemoryTerm`, `StageCost`), the bytes per
chain, per step and per vector that every stage's count uses, and the check that refuses a plan whose peak passes the
memory bound, naming the setting that sets the largest part and how far to lower it (`check_memory`). Each stage
counts its own bytes (its `memory`, in `raise_eval.evaluation.stages`); `stages.plan_memory` adds up a plan's, each
with what the earlier stages keep (AIS's log-weights, the log f(v) estimates, the test vectors). It is the only judge
of memory: the shard sizes, the adaptive pilot, the exact enumeration's chunks and the log f(v) estimates are all
counted by it.

The bytes per chain, per step and per vector below are peak resident memory measured on the CPU (784-500-1000 DBM,
784-500-2000 DBN, a 6-5-4 DBM with millions of chains or steps), with a margin. `raise_eval.evaluation.timing
.estimate_cost` adds the predicted seconds of each stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from raise_eval.settings import SettingsError, format_size, render_names
from raise_eval.units import format_duration

# Peak bytes measured (RSS) with a margin; see the module docstring.
SCHEDULE_BYTES_PER_STEP = 80  # the betas, their Python floats in `anneal`, a flipped copy (64 to 73 measured)
PILOT_BYTES_PER_CELL = 96  # the pilot's grid, its floats and increments, the schedule's cumulative length (73)
PILOT_BYTES_PER_STEP = 160  # `schedule_from_increments`' arrays over the K + 1 betas (118 measured)
LOG_WEIGHT_BYTES = 40  # per chain: float64 log-weights of the shards, their concatenation, the summaries (17 to 28)
LOG_F_RESULT_BYTES = 32  # per test vector: the log f(v) estimates and their standard errors, and their chunks
# Per state entry of a chunk of per-vector AIS: states, the kernel's buffers and the float64 weight update
# (DBM: 50.6 bytes measured in float32, 60.3 in float64; DBN: 6.3 in float32).
POSTERIOR_BYTES = {"DBM": lambda size: 5 * size + 40, "DBN": lambda size: 2 * size + 4}
MEAN_FIELD_BYTES = 40  # per test vector and unit: the float64 marginals and their updates (30 measured)


def parameter_entries(model) -> int:
    """The numbers a model's parameters hold, by the family it declares: a fully visible model's fields and
    couplings; a Boltzmann machine's weights and biases."""
    if model.family == "fully-visible":
        return sum(t.numel() for t in model.digest_parts()[0])
    return sum(w.numel() for w in model.weights) + sum(b.numel() for b in model.biases)


@dataclass(frozen=True)
class MemoryTerm:
    """One part of a stage's memory: `count` items of `each` bytes, set by `option` (as on the command line; None
    when no option sets it) whose value is `count - extra` (e.g. K steps make K + 1 betas) and at least `least`."""

    what: str
    bytes: int
    option: Optional[str] = None
    count: int = 0
    each: int = 0
    least: int = 1
    extra: int = 0


def term(what: str, count: int, each: int, option: Optional[str] = None, least: int = 1, extra: int = 0) -> MemoryTerm:
    return MemoryTerm(what, int(count) * int(each), option, int(count), int(each), least, extra)


@dataclass
class StageCost:
    """What one stage of an evaluation costs.

    name: 'pilot', 'ais', 'exact', 'log_f', 'raise' or 'log_f_check' (the run's order); label: its name in words;
    work: what it computes, e.g. '1,000 chains x 1,000 steps'; bytes: peak bytes while it runs, what earlier stages
    keep included; seconds: predicted wall time (None until `estimate_cost` timed it); steps_independent: whether
    its time does not depend on K (--steps); terms: the parts of `bytes`.
    """

    name: str
    label: str
    work: str
    bytes: int
    seconds: Optional[float] = None
    steps_independent: bool = False
    terms: tuple[MemoryTerm, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "work": self.work,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "depends_on_steps": not self.steps_independent,
        }


@dataclass
class CostEstimate:
    """An evaluation's predicted cost: its stages in the order they run (`StageCost`), the memory bound it was
    checked against, and how the seconds were measured (None: memory only, not timed).

    `seconds` is the sum over the stages, `bytes` the largest stage's peak. `to_dict()` gives the JSON entry
    {"seconds", "bytes", "max_memory", "per_stage": {name: {...}}, "timing"}; `format()` the printed form.
    """

    stages: list[StageCost]
    max_memory: int
    timing: Optional[str] = None
    measured_in: float = 0.0  # seconds the timing itself took
    notes: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return max((s.bytes for s in self.stages), default=0)

    @property
    def seconds(self) -> Optional[float]:
        if any(s.seconds is None for s in self.stages):
            return None
        return float(sum(s.seconds for s in self.stages))

    def stage(self, name: str) -> Optional[StageCost]:
        return next((s for s in self.stages if s.name == name), None)

    def to_dict(self, names: Optional[dict[str, str]] = None) -> dict[str, Any]:
        total = self.seconds
        per_stage = {}
        for s in self.stages:
            entry = s.to_dict()
            entry["share"] = None if not total or s.seconds is None else s.seconds / total
            per_stage[s.name] = entry
        return {
            "seconds": total,
            "bytes": self.bytes,
            "max_memory": self.max_memory,
            "per_stage": per_stage,
            "timing": self.timing,
            "timing_seconds": self.measured_in,
            "notes": [render_names(n, names) for n in self.notes],
        }

    def format(self, names: Optional[dict[str, str]] = None) -> str:
        """The estimate as printed by `raise-eval evaluate` (`raise_eval.render.text.cost_estimate_text`)."""
        from raise_eval.render.text import cost_estimate_text

        return cost_estimate_text(self, names)


def dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass
class Held:
    """What the stages of one plan share while their memory is counted: the plan, the model's float64 copy's size,
    the schedule, and the terms the run holds through every later stage (`kept`, grown by each stage)."""

    plan: Any
    params64: int
    schedule: MemoryTerm
    kept: list[MemoryTerm]


# A stage's memory: (what it computes, its terms besides those held, whether it depends on K), or None when the plan
# does not run it; it adds to `held.kept` what it leaves for the later stages.
StageMemory = Optional[tuple[str, list[MemoryTerm], bool]]


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def check_memory(stages: list[StageCost], max_memory: int) -> None:
    """SettingsError naming the first stage whose peak passes `max_memory`, the part that dominates it, the setting
    that sets that part and how far to lower it."""
    for stage in stages:
        if stage.bytes <= max_memory:
            continue
        biggest = max(stage.terms, key=lambda t: t.bytes)
        fix = None
        if biggest.option and biggest.each:
            fits = (max_memory - (stage.bytes - biggest.bytes)) // biggest.each - biggest.extra
            if fits >= biggest.least:
                fix = f"lower {biggest.option} (about {fits:,} fit) or raise {{max_memory}}"
        if fix is None and stage.name == "exact":
            fix = "use {exact} never or raise {max_memory}"
        elif fix is None:  # no one setting is enough: every setting that sets a part, the largest first
            options = list(dict.fromkeys(t.option for t in sorted(stage.terms, key=lambda t: -t.bytes) if t.option))
            fix = f"lower {_and(options)}, or raise {{max_memory}}" if options else "raise {max_memory}"
        value = f" ({biggest.option} {biggest.count - biggest.extra:,})" if biggest.option and biggest.each else ""
        raise SettingsError(
            f"{stage.label} ({stage.work}) needs about {format_size(stage.bytes)}, over the memory bound of "
            f"{format_size(max_memory)} ({{max_memory}}), {format_size(biggest.bytes)} of it for "
            f"{biggest.what}{value}; "
            f"{fix}; nothing was computed"
        )


__all__ = [
    "CostEstimate",
    "Held",
    "MemoryTerm",
    "StageCost",
    "StageMemory",
    "check_memory",
    "dtype_size",
    "format_duration",
    "term",
]
