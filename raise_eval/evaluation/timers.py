"""How a stage is timed for the cost model (`raise_eval.evaluation.timing.estimate_cost`): `StepClock` (a checkpoint
that saves nothing and notes when each phase and step ends), `Timer` (a stage's timings at growing batches, and its
predicted seconds from them) and `TimingContext` (what the stages' timers share: the plan, a path with caches of its
own, the generator). Each stage builds its own `Timer` (its `timer`, in `raise_eval.evaluation.stages`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from raise_eval.runtime.sharding import chain_units

# Steps run per stage in the first (small) timing and in the second; the first step of each is not counted (see
# `StepClock.step_seconds`).
PROBE_STEPS = 3
TIMED_STEPS = 2
START_VECTORS = 8  # test vectors whose per-vector AIS start (the mean field) is timed
PROBE_ELEMENTS = 2**18  # state entries (chains x units) of the first timing of each stage
TIMING_BUDGET = 0.5  # seconds the second timing may take in all: half shared out by the stages' predicted shares,
TIMING_FRACTION = 0.01  # half equally (at most this share of the predicted run)
# The exact enumeration priced with a timed product and softplus ran 1.5 to 1.9 times faster than the enumeration
# itself (the configurations' bits, the running log-sum-exp; 784-20-500 DBM and DBN, 500 vectors): this factor.
EXACT_OVERHEAD = 1.7
# After the second timing a third one on WIDER_FACTOR times its batch is made where it should take at most
# WIDER_TIMING_LIMIT seconds and WIDER_TIMING_FRACTION of the predicted run (priced at the second's cost per item, which
# over-prices a step of mostly fixed cost). A stage's timings separate a step's fixed cost when the largest batch's step
# cost at least FIT_MIN_GROWTH times the smallest's, or when they span 2 * WIDER_FACTOR times the batch (a flat step
# over that range is fixed cost, not noise); else the largest batch's cost per item is used as it is.
FIT_MIN_GROWTH = 1.2
WIDER_FACTOR = 8
WIDER_TIMING_LIMIT = 4.0
WIDER_TIMING_FRACTION = 0.02


class StepClock:
    """A `checkpoint` (the protocol of `resume.ShardCheckpoint`) that saves nothing and notes when each phase starts
    (`restore`), when its annealing loop starts (`on_step`) and when each step ends."""

    def __init__(self, device: torch.device):
        self.device = device
        self.begun: dict[str, float] = {}
        self.looping: dict[str, float] = {}
        self.stamps: dict[str, list[float]] = {}

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def restore(self, phase: str, path) -> None:
        self.begun.setdefault(phase, self.now())
        return None

    def on_step(self, phase: str, extra: Optional[dict] = None):
        self.looping[phase] = self.now()
        stamps = self.stamps.setdefault(phase, [])

        def stamp(step: int, state, log_weights) -> None:
            stamps.append((step, self.now()))

        return stamp

    def step_seconds(self, phase: str) -> float:
        """Mean seconds of a step of `phase`, the first left out: a new batch's first step pays once for what the
        others reuse (the kernels chosen for its shapes, the first touch of its memory; a whole run's first step
        too, but that is one step in thousands). A step program on CUDA reports once per graph of steps
        (`annealing.anneal`'s on_step): the first graph, which pays for its capture, is left out too."""
        stamps = self.stamps[phase]
        first_step = stamps[0][0] - 1 if stamps else 0
        points = [(first_step, self.looping[phase]), *stamps]
        spans = [(s1 - s0, t1 - t0) for (s0, t0), (s1, t1) in zip(points, points[1:])]
        if len(spans) > 1:
            spans = spans[1:]
        if len(spans) > 1 and spans[0][0] > 1:
            spans = spans[1:]
        return sum(t for _, t in spans) / sum(n for n, _ in spans)

    def start_seconds(self, phase: str, first: Optional[str] = None) -> float:
        """Seconds from the start of phase `first` (default `phase`) to `phase`'s loop: drawing the start."""
        return self.looping[phase] - self.begun[first or phase]


@dataclass
class Timer:
    """How one stage is timed: `run(batch, steps)` times `steps` steps on `batch` items (chains; vectors for
    importance sampling and the mean-field bound, which have no steps) and returns (seconds per item and step,
    seconds per item started); the stage makes
    `item_steps` item-steps and starts `items` items; `full` is its largest batch, `probe` the first timing's,
    `step` rounds batches (whole vectors of `step` chains)."""

    run: Callable[[int, int], tuple[float, float]]
    item_steps: float
    items: float
    full: int
    probe: int
    step: int = 1
    unit: str = "chains"
    start_scales: bool = True  # whether timing the start costs more at a larger batch
    per_step: float = 0.0
    per_start: float = 0.0
    batch: int = 0
    timings: list = field(default_factory=list)  # (batch, seconds per item and step) of each measurement
    fit_fixed_cost: bool = True  # False on a CPU: see `step_cost_at_full`

    def seconds(self) -> float:
        return self.item_steps * self.step_cost_at_full() + self.items * self.per_start

    def measure(self, batch: int, steps: int) -> None:
        batch = max(self.step, batch // self.step * self.step)
        self.per_step, self.per_start = self.run(batch, steps)
        self.batch = batch
        self.timings.append((batch, self.per_step))

    def step_cost_at_full(self) -> float:
        """Seconds per item and step at the run's own batch `full`. A step costs a fixed part (kernel launches and
        Python: on a GPU most of a step of a 784-500 RBM with 5,000 chains, 0.36 ms around 0.20 ms of products) plus
        a part per item; the smallest and the largest timed batch separate them (a line through both), and the fixed
        part is then shared by `full` items rather than by the timed batch's. Where the per-item cost grows with the
        batch (a CPU's caches) the line's fixed part is negative: then the larger batch's own cost per item stands.
        On a CPU (`fit_fixed_cost` False) it always stands: there the cost per item grows with the batch through the
        caches as the fixed part shrinks, and the line under-priced a DBN's per-vector AIS (146 to 182 s predicted
        from 30 to 480 chains for 211 s on 3,000; the cost per item at 480 chains, 220 to 248 s)."""
        if len(self.timings) < 2 or self.batch >= self.full or not self.fit_fixed_cost:
            return self.per_step
        (b1, c1), (b2, c2) = min(self.timings), max(self.timings)
        if b2 <= b1:
            return self.per_step
        if not self.grew() and b2 < 2 * WIDER_FACTOR * b1:
            # the larger batch's step barely cost more over a narrow range: noise decides the line's slope (a CPU
            # timing a DBN's sweep on 30 and 60 chains), so the larger batch's own cost per item stands
            return c2
        per_item = max(0.0, (c2 * b2 - c1 * b1) / (b2 - b1))  # the line's slope (noise can make it negative)
        fixed = c2 * b2 - per_item * b2  # seconds per step: the line's intercept
        if fixed <= 0:
            return c2
        return per_item + fixed / self.full

    def grew(self) -> bool:
        """Whether the largest timed batch's step cost at least FIT_MIN_GROWTH times the smallest's."""
        (b1, c1), (b2, c2) = min(self.timings), max(self.timings)
        return c2 * b2 >= FIT_MIN_GROWTH * c1 * b1


def probe_batch(full: int, elements_per_item: int, step: int = 1) -> int:
    """A first timing's batch: about PROBE_ELEMENTS state entries, whole groups of `step`, at most `full`."""
    items = max(step, PROBE_ELEMENTS // max(1, elements_per_item) // step * step)
    return max(1, min(full, items))


@dataclass
class TimingContext:
    """What the stages' timers share: the plan, a copy of its path with caches of its own (the run's path is left as
    it was), the generator of the timings (never the run's streams), and `memo` (what one stage's timer measured once
    for another: the per-vector start of log f(v) by AIS)."""

    plan: Any
    path: Any
    generator: torch.Generator
    memo: dict = field(default_factory=dict)

    @classmethod
    def for_plan(cls, plan, generator: torch.Generator) -> TimingContext:
        return cls(plan, plan.path.with_clamped(plan.path.clamped), generator)

    @property
    def device(self) -> torch.device:
        return self.plan.model.device

    @property
    def units(self) -> int:
        """Units of the annealed machine (a DBN's top RBM): a chain's state entries."""
        return chain_units(self.path.model)


__all__ = ["StepClock", "Timer", "TimingContext", "probe_batch"]
