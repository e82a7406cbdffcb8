"""What an evaluation will cost before it runs: the peak memory of every stage, and its wall time.

Memory (`plan_memory`, from the settings alone): `evaluate.plan_evaluation` counts the bytes of every stage the run
will go through (the adaptive pilot and its grid, AIS's shard of chains, its log-weights and its schedule, the exact
enumeration's chunks, the log f(v) estimates' chunks, RAISE's shard and log-weights, the log f(v) check), each with
what the earlier stages keep (AIS's log-weights, the log f(v) estimates, the test vectors), and refuses a plan whose
peak passes `max_memory` before anything is allocated, naming the option that sets the largest part and how far to
lower it (`check_memory`). The bytes per chain, per step and per vector below are peak resident memory measured on
the CPU (784-500-1000 DBM, 784-500-2000 DBN, a 6-5-4 DBM with millions of chains or steps), with a margin.

Time (`estimate_cost`): each stage's own code (`ais`, `raise_log_likelihood`, per-vector AIS, importance sampling,
the pilot) runs a few steps on the actual model, device and dtype, on chains of its own (the run's random streams
are untouched), and the seconds per chain and step are multiplied by the stage's chain-steps. A first timing on a
small batch (PROBE_ELEMENTS state entries) says where the run spends its time; a second one, on batches up to the
run's own, spends at most TIMING_BUDGET seconds (and at most TIMING_FRACTION of the predicted run), half shared out
in proportion to the stages' predicted shares and half equally: per-chain costs depend on the batch (per-call
overhead in small ones; cache and page faults in large ones: per-vector AIS on the 784-500-1000 DBM cost 1.7 times
more per chain at 559 vectors than at 70), so every stage is timed on a batch of a useful size and the one that
dominates close to its real one. The exact enumeration is counted (`exact.exact_cost`) and the count priced with a
timed float64 product and softplus. The estimate is for one process on a machine as loaded as it is while it is
measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

import torch

from raise_eval import exact as exact_mod
from raise_eval.adaptive import pilot_run
from raise_eval.annealing import anneal
from raise_eval.estimators.ais import ais
from raise_eval.estimators.raise_ import raise_log_likelihood
from raise_eval.estimators.unnormalized import _CHUNK_ELEMENTS as LOG_F_CHUNK_ELEMENTS
from raise_eval.estimators.unnormalized import log_unnormalized_estimate
from raise_eval.log_f_check import LOG_F_CHECK_FACTOR
from raise_eval.paths.posterior import posterior_path
from raise_eval.schedules import linear_schedule
from raise_eval.sharding import (
    bytes_per_chain,
    format_size,
    log_f_bytes,
    raise_vectors_per_shard,
    shard_bounds,
)

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

# Steps run per stage in the first (small) timing and in the second; the first step of each is not counted (see
# `_StepClock.step_seconds`).
PROBE_STEPS = 3
TIMED_STEPS = 2
START_VECTORS = 8  # test vectors whose per-vector AIS start (the mean field) is timed
PROBE_ELEMENTS = 2**18  # state entries (chains x units) of the first timing of each stage
TIMING_BUDGET = 0.5  # seconds the second timing may take in all: half shared out by the stages' predicted shares,
TIMING_FRACTION = 0.01  # half equally (at most this share of the predicted run)
# The exact enumeration priced with a timed product and softplus ran 1.5 to 1.9 times faster than the enumeration
# itself (the configurations' bits, the running log-sum-exp; 784-20-500 DBM and DBN, 500 vectors): this factor.
EXACT_OVERHEAD = 1.7

STAGES = {
    "pilot": "adaptive pilot",
    "ais": "AIS",
    "exact": "exact",
    "log_f": "log f(v)",
    "raise": "RAISE",
    "log_f_check": "log f(v) check",
}


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


def _term(what: str, count: int, each: int, option: Optional[str] = None, least: int = 1, extra: int = 0) -> MemoryTerm:
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

    def to_dict(self) -> dict[str, Any]:
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
            "notes": list(self.notes),
        }

    def format(self) -> str:
        """The estimate as printed by `raise-eval evaluate`: the total, then one line per stage."""
        total = self.seconds
        head = "estimated cost" if total is None else f"estimated time {format_duration(total)}"
        lines = [f"{head}, peak memory {format_size(self.bytes)} (bound {format_size(self.max_memory)}):"]
        for s in self.stages:
            took = "" if s.seconds is None else format_duration(s.seconds)
            share = "" if not total or s.seconds is None else f"{s.seconds / total:.0%}"
            lines.append(f"  {s.label:15}{took:>10}{share:>6}  {format_size(s.bytes):>9}  {s.work}")
        lines += [f"  {n}" for n in self.notes]
        if self.timing:
            lines.append(f"  ({self.timing})")
        return "\n".join(lines)


def format_duration(seconds: float) -> str:
    """'42 s', '21 min', '5.2 h', '3.1 days'."""
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


# ----------------------------------------------------------------------------------------------------- memory
def _dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _log_f_chunk(plan, method: str, samples: int, chains: int, n: int) -> MemoryTerm:
    """One chunk of `log_unnormalized_estimate` on n vectors. Its size is fixed (about 2^23 state entries) unless
    one vector's samples or chains pass that: the chunk is then one vector, and grows with the option."""
    model = plan.model
    if method == "importance":
        vectors = min(n, max(1, LOG_F_CHUNK_ELEMENTS // (samples * max(model.layer_sizes))))
        size, option, value = log_f_bytes(model, n, samples, LOG_F_CHUNK_ELEMENTS), "--log-f-samples", samples
    else:
        elements = posterior_path(model).state_elements()
        vectors = min(n, max(1, LOG_F_CHUNK_ELEMENTS // (chains * elements)))
        per_entry = POSTERIOR_BYTES[plan.family](_dtype_size(model.dtype))
        start = vectors * sum(model.layer_sizes) * MEAN_FIELD_BYTES if plan.family == "DBM" else 0
        size, option, value = vectors * chains * elements * per_entry + start, "--log-f-chains", chains
    what = f"one chunk of {vectors:,} vector{'s' if vectors > 1 else ''}"
    return MemoryTerm(what, size, option, value, size // value if vectors == 1 else 0)


def _log_f_schedule(method: str, steps: int, factor: int = 1) -> MemoryTerm:
    """The schedule of per-vector AIS at `factor` times --log-f-steps (none for the other estimators)."""
    if method != "ais":
        return MemoryTerm("no schedule", 0)
    what = f"the schedule of {factor * steps:,} steps"
    return _term(what, steps + 1, factor * SCHEDULE_BYTES_PER_STEP, "--log-f-steps", extra=1)


def plan_memory(plan) -> list[StageCost]:
    """The stages `plan` (an `evaluate.EvaluationPlan`) will run, in order, each with its peak bytes and what they
    are made of; seconds are left None (`estimate_cost` times them). Nothing is allocated."""
    model, family, n, k = plan.model, plan.family, plan.n_test, plan.steps
    size = _dtype_size(model.dtype)
    annealed = plan.path.model
    params64 = 8 * (sum(w.numel() for w in model.weights) + sum(b.numel() for b in model.biases))
    kept = [_term("the test vectors (and the search for repeated ones)", n, 2 * model.n_visible * size + 24,
                  "--test-subset", least=2)]  # fmt: skip
    schedule = _term(f"the schedule of {k:,} steps", k + 1, SCHEDULE_BYTES_PER_STEP, "--steps", extra=1)
    stages: list[StageCost] = []

    def add(name: str, work: str, terms: list[MemoryTerm], steps_independent: bool = False) -> None:
        terms = terms + kept
        stages.append(
            StageCost(name, STAGES[name], work, sum(t.bytes for t in terms), None, steps_independent, tuple(terms))
        )

    if plan.schedule_name == "adaptive":
        add(
            "pilot",
            f"{plan.pilot_chains:,} chains x {plan.pilot_grid:,} grid cells",
            [
                _term(f"the pilot's {plan.pilot_chains:,} chains", plan.pilot_chains,
                      bytes_per_chain(sum(annealed.layer_sizes), model.dtype), "--pilot-chains", least=2),
                _term(f"the pilot's grid of {plan.pilot_grid:,} cells", plan.pilot_grid + 1, PILOT_BYTES_PER_CELL,
                      "--pilot-grid", extra=1),
                _term(f"the schedule of {k:,} steps placed from it", k + 1, PILOT_BYTES_PER_STEP, "--steps", extra=1),
            ],
        )  # fmt: skip
    m, shard = plan.ais_chains, plan.shard_size
    shards = len(range(0, m, shard))
    add(
        "ais",
        f"{m:,} chains x {k:,} steps" + (f" in {shards:,} shards" if shards > 1 else ""),
        [
            _term(f"one shard of {min(m, shard):,} chains", min(m, shard),
                  bytes_per_chain(sum(annealed.layer_sizes), model.dtype), "--shard-size"),
            _term(f"the log-weights of {m:,} chains", m, LOG_WEIGHT_BYTES, "--ais-chains", least=2),
            schedule,
        ],
    )  # fmt: skip
    kept = kept + [_term(f"AIS's {m:,} log-weights", m, 8, "--ais-chains", least=2)]
    if plan.use_exact:
        cost = exact_mod.exact_cost(model, n)
        # exact_stage's chunk budget, or less when every configuration fits in one chunk (`exact._plan`)
        budget = max(min(int(plan.max_memory) // 2, exact_mod.DEFAULT_MAX_BYTES), 1 << 20)
        units = max(cost.log_z_units, cost.log_f_units)
        per_config = 8 * (2 * units + 2 * max(model.layer_sizes) + 4)
        per_pair = 8 * (model.layer_sizes[1] + 1) if plan.exact_log_f else 0
        chunk = min(budget, 2**units * (per_config + n * per_pair))
        terms = [MemoryTerm("one chunk of the enumeration", chunk), MemoryTerm("a float64 copy of the model", params64)]
        if plan.exact_log_f:
            terms.append(_term("the exact log f(v) per test vector", n, 8 * (sum(model.layer_sizes[:2]) + 6),
                               "--test-subset", least=2))  # fmt: skip
            if cost.log_f_route == "dbn":  # a deep DBN keeps a table over each directed layer
                layers = model.layer_sizes[1 : len(model.weights)]
                terms.append(MemoryTerm("the tables over the directed layers", 16 * sum(2**u for u in layers[1:])))
        add("exact", f"2^{units} states" + (f" x {n:,} vectors" if plan.exact_log_f else ""), terms, True)
        if plan.exact_log_f:
            kept = kept + [_term("the exact log f(v)", n, 8, "--test-subset", least=2)]
    method = plan.log_f_method
    options = plan.log_f_options
    if method in ("importance", "ais"):
        chunk = _log_f_chunk(plan, method, options["num_samples"], options["ais_chains"], n)
        if method == "importance":
            work = f"{n:,} vectors x {options['num_samples']:,} importance samples"
        else:
            work = f"{n:,} vectors x {options['ais_chains']:,} chains x {options['ais_steps']:,} steps (per-vector AIS)"
        add(
            "log_f",
            work,
            [
                chunk,
                MemoryTerm("a float64 copy of the model", params64 if family == "DBM" else 0),
                _term("the estimates", n, LOG_F_RESULT_BYTES, "--test-subset", least=2),
                _log_f_schedule(method, options["ais_steps"]),
            ],
            True,
        )
    elif method == "mean-field":
        add(
            "log_f",
            f"{n:,} vectors, mean-field bound",
            [
                _term("the mean-field marginals of every test vector", n,
                      sum(model.layer_sizes) * MEAN_FIELD_BYTES, "--test-subset", least=2),
                MemoryTerm("a float64 copy of the model", params64),
            ],
            True,
        )  # fmt: skip
    kept = kept + [_term("the log f(v) estimates", n, 16, "--test-subset", least=2)]
    r, c = min(plan.raise_examples, n), plan.raise_chains
    vectors = min(raise_vectors_per_shard(shard, c), r)
    raise_shards = len(shard_bounds(r, raise_vectors_per_shard(shard, c)))
    how = " (heating and reverse)" if family == "DBM" else " (unrolled)" if family == "DBN" else ""
    how += f" in {raise_shards:,} shards" if raise_shards > 1 else ""
    add(
        "raise",
        f"{r:,} vectors x {c:,} chains x {k:,} steps{how}",
        [
            _term(f"one shard of {vectors:,} vectors x {c:,} chains", vectors * c,
                  bytes_per_chain(sum(model.layer_sizes), model.dtype),
                  "--shard-size" if vectors > 1 else "--raise-chains"),
            _term(f"the log-weights of {r:,} x {c:,} chains", r * c, LOG_WEIGHT_BYTES,
                  "--raise-examples x --raise-chains", least=2),
            schedule,
        ],
    )  # fmt: skip
    checked = min(plan.log_f_check, n)
    if method in ("importance", "ais", "mean-field") and checked > 0:
        factor = LOG_F_CHECK_FACTOR if method != "mean-field" else 1
        check_method = "ais" if method == "ais" else "importance"
        samples = options["num_samples"] * (factor if method == "importance" else 1)
        chunk = _log_f_chunk(plan, check_method, samples, options["ais_chains"], checked)
        add(
            "log_f_check",
            f"{checked:,} vectors, " + (f"{factor} times longer" if factor > 1 else "by importance sampling"),
            [
                chunk,
                _log_f_schedule(method, options["ais_steps"], factor),
                _term(f"RAISE's {r:,} x {c:,} log-weights", r * c, 8, "--raise-examples x --raise-chains", least=2),
            ],
            True,
        )
    return stages


def check_memory(stages: list[StageCost], max_memory: int) -> None:
    """ValueError naming the first stage whose peak passes `max_memory`, the part that dominates it, the option that
    sets that part and how far to lower it."""
    for stage in stages:
        if stage.bytes <= max_memory:
            continue
        biggest = max(stage.terms, key=lambda t: t.bytes)
        fix = "raise --max-memory"
        if biggest.option and biggest.each:
            fits = (max_memory - (stage.bytes - biggest.bytes)) // biggest.each - biggest.extra
            if fits >= biggest.least:
                fix = f"lower {biggest.option} (about {fits:,} fit) or raise --max-memory"
        elif stage.name == "exact":
            fix = "use --exact never or raise --max-memory"
        elif biggest.option:
            fix = f"lower {biggest.option} or raise --max-memory"
        value = f" ({biggest.option} {biggest.count - biggest.extra:,})" if biggest.option and biggest.each else ""
        raise ValueError(
            f"{stage.label} ({stage.work}) needs about {format_size(stage.bytes)}, over the memory bound of "
            f"{format_size(max_memory)} (--max-memory), {format_size(biggest.bytes)} of it for {biggest.what}{value}; "
            f"{fix}; nothing was computed"
        )


# ----------------------------------------------------------------------------------------------------- time
class _StepClock:
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
            stamps.append(self.now())

        return stamp

    def step_seconds(self, phase: str) -> float:
        """Mean seconds of a step of `phase`, the first left out: a new batch's first step pays once for what the
        others reuse (the kernels chosen for its shapes, the first touch of its memory; a whole run's first step
        too, but that is one step in thousands)."""
        times = [self.looping[phase], *self.stamps[phase]]
        if len(times) > 2:
            times = times[1:]
        return (times[-1] - times[0]) / (len(times) - 1)

    def start_seconds(self, phase: str, first: Optional[str] = None) -> float:
        """Seconds from the start of phase `first` (default `phase`) to `phase`'s loop: drawing the start."""
        return self.looping[phase] - self.begun[first or phase]


@dataclass
class _Timer:
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

    def seconds(self) -> float:
        return self.item_steps * self.per_step + self.items * self.per_start

    def measure(self, batch: int, steps: int) -> None:
        batch = max(self.step, batch // self.step * self.step)
        self.per_step, self.per_start = self.run(batch, steps)
        self.batch = batch


def _batch(full: int, elements_per_item: int, step: int = 1) -> int:
    """A first timing's batch: about PROBE_ELEMENTS state entries, whole groups of `step`, at most `full`."""
    items = max(step, PROBE_ELEMENTS // max(1, elements_per_item) // step * step)
    return max(1, min(full, items))


def _timers(plan, generator: torch.Generator) -> dict[str, _Timer]:
    model, family, device, k = plan.model, plan.family, plan.model.device, plan.steps
    path = plan.path.with_clamped(plan.path.clamped)  # its own caches: the run's path is left as it was
    test = plan.test
    timers: dict[str, _Timer] = {}
    units = sum(path.model.layer_sizes)

    def time_ais(batch: int, steps: int) -> tuple[float, float]:
        clock = _StepClock(device)
        ais(path, linear_schedule(steps), batch, generator=generator, checkpoint=clock)
        return clock.step_seconds("AIS") / batch, clock.start_seconds("AIS") / batch

    m = plan.ais_chains
    timers["ais"] = _Timer(time_ais, float(m) * k, m, min(m, plan.shard_size), _batch(min(m, plan.shard_size), units))

    if plan.schedule_name == "adaptive":

        def time_pilot(batch: int, steps: int) -> tuple[float, float]:
            # the pilot has no step callback: a run of one cell and one of `steps` + 1 cells, the difference
            clock, chains, seconds = _StepClock(device), max(2, batch), []
            for cells in (1, steps + 1):
                begin = clock.now()
                pilot_run(path, num_chains=chains, grid_size=cells, generator=generator)
                seconds.append(clock.now() - begin)
            per_cell = (seconds[1] - seconds[0]) / steps
            return (per_cell if per_cell > 0 else seconds[1] / (steps + 1)) / chains, 0.0

        p = plan.pilot_chains
        timers["pilot"] = _Timer(time_pilot, float(p) * plan.pilot_grid, 0, p, max(2, _batch(p, units)))

    r, c = min(plan.raise_examples, plan.n_test), plan.raise_chains
    unroll = model if family == "DBN" else None

    def time_raise(batch: int, steps: int) -> tuple[float, float]:
        vectors = max(1, batch // c)
        clock = _StepClock(device)
        raise_log_likelihood(
            path, test[:vectors], linear_schedule(steps), c, generator=generator, unroll=unroll, checkpoint=clock
        )
        chains = vectors * c
        per_step = clock.step_seconds("RAISE") + (clock.step_seconds("heating") if "heating" in clock.stamps else 0.0)
        first = "heating" if "heating" in clock.stamps else "RAISE"
        start = clock.start_seconds(first, "RAISE")
        return per_step / chains, start / chains

    full = min(raise_vectors_per_shard(plan.shard_size, c), r) * c
    timers["raise"] = _Timer(time_raise, float(r) * c * k, r * c, full, _batch(full, sum(model.layer_sizes), c), c)

    method, options = plan.log_f_method, plan.log_f_options
    n = plan.n_test
    checked = min(plan.log_f_check, n)
    if method == "ais":
        posterior = posterior_path(model)
        chains, steps = options["ais_chains"], options["ais_steps"]

        start_seconds: list[float] = []  # per vector, timed once

        def time_log_f_ais(batch: int, steps: int) -> tuple[float, float]:
            # What `log_unnormalized_estimate` does per chunk: the proposal's start (the mean field of each vector),
            # then AIS. The start is timed on a few vectors; the steps on `batch` chains of two vectors, which cost
            # what as many chains spread over more vectors cost (the tensors have the same sizes).
            clock = _StepClock(device)
            if not start_seconds:
                vectors = min(n, START_VECTORS)
                posterior.start(test[:1], 1, generator)  # warm-up
                begin = clock.now()
                posterior.start(test[:vectors], 1, generator)
                start_seconds.append((clock.now() - begin) / vectors)
            vectors = min(n, 2)
            per_vector = max(1, batch // vectors)
            state, _ = posterior.start(test[:vectors], per_vector, generator)
            anneal(posterior, state, linear_schedule(steps), generator=generator, on_step=clock.on_step("log f(v)"))
            return clock.step_seconds("log f(v)") / (vectors * per_vector), start_seconds[0] / chains

        vectors = min(n, max(1, LOG_F_CHUNK_ELEMENTS // (chains * posterior.state_elements())))
        probe = _batch(vectors * chains, posterior.state_elements(), chains)
        timers["log_f"] = _Timer(
            time_log_f_ais, float(n) * chains * steps, n * chains, vectors * chains, probe, chains, start_scales=False
        )
        if checked:
            check_steps = steps * LOG_F_CHECK_FACTOR
            timers["log_f_check"] = _Timer(
                time_log_f_ais, float(checked) * chains * check_steps, checked * chains,
                min(checked, vectors) * chains, probe, chains, start_scales=False,
            )  # fmt: skip
    if method in ("importance", "mean-field"):

        def importance_timer(samples: int, vectors: int) -> _Timer:
            def time_importance(batch: int, steps: int) -> tuple[float, float]:
                clock = _StepClock(device)
                begin = clock.now()
                log_unnormalized_estimate(model, test[:batch], method="importance", num_samples=samples,
                                          generator=generator)  # fmt: skip
                return (clock.now() - begin) / batch, 0.0

            chunk = max(1, LOG_F_CHUNK_ELEMENTS // (samples * max(model.layer_sizes)))
            full = min(vectors, chunk)
            return _Timer(
                time_importance, vectors, 0, full, _batch(full, samples * max(model.layer_sizes)), unit="vectors"
            )

        s = options["num_samples"]
        if method == "importance":
            timers["log_f"] = importance_timer(s, n)
            if checked:
                timers["log_f_check"] = importance_timer(LOG_F_CHECK_FACTOR * s, checked)
        else:

            def time_mean_field(batch: int, steps: int) -> tuple[float, float]:
                clock = _StepClock(device)
                begin = clock.now()
                model.mean_field_bound(test[:batch])
                return (clock.now() - begin) / batch, 0.0

            timers["log_f"] = _Timer(time_mean_field, n, 0, n, _batch(n, sum(model.layer_sizes)), unit="vectors")
            if checked:
                timers["log_f_check"] = importance_timer(s, checked)
    return timers


def _exact_seconds(plan) -> float:
    """The exact stage's seconds: its multiply-adds and softplus/exp evaluations (`exact.exact_cost`) priced with a
    timed float64 product of the enumeration's shape and a timed softplus, times EXACT_OVERHEAD."""
    cost = exact_mod.exact_cost(plan.model, plan.n_test)
    device = plan.model.device
    units = max(cost.log_z_units, cost.log_f_units, 16)
    clock = _StepClock(device)
    a = torch.rand(1024, units, dtype=torch.float64, device=device)
    b = torch.rand(units, 2048, dtype=torch.float64, device=device)
    x = torch.rand(2**18, dtype=torch.float64, device=device)
    rates = []
    for work, op in ((1024 * units * 2048, lambda: torch.mm(a, b)), (x.numel(), lambda: exact_mod._softplus_(x))):
        op()  # warm-up
        begin, calls = clock.now(), 0
        while calls < 3 or clock.now() - begin < 0.01:
            op()
            calls += 1
        rates.append(work * calls / (clock.now() - begin))
    macs = cost.multiply_adds if plan.exact_log_f else cost.log_z_macs
    exps = cost.log_z_exps + (cost.log_f_exps if plan.exact_log_f else 0)
    return EXACT_OVERHEAD * (macs / rates[0] + exps / rates[1])


def estimate_cost(plan, *, budget: float = TIMING_BUDGET) -> CostEstimate:
    """The predicted wall time and peak memory of `plan` (an `evaluate.EvaluationPlan`), stage by stage.

    Runs each stage's kernels for a few steps on chains of its own (see the module docstring; `budget` bounds the
    seconds of the second, larger timings), so that the estimate is this model's on this device, dtype and thread
    count. The plan and its random streams are left as they were.
    """
    begin = time.perf_counter()
    stages = [replace(s) for s in (plan.cost.stages if getattr(plan, "cost", None) is not None else plan_memory(plan))]
    generator = torch.Generator(device=plan.model.device).manual_seed(0)
    timers = _timers(plan, generator)
    with torch.no_grad():
        for t in timers.values():
            t.measure(t.probe, PROBE_STEPS)
        predicted = {name: t.seconds() for name, t in timers.items()}
        total = sum(predicted.values())
        allowed = min(budget, TIMING_FRACTION * total)
        for name, t in timers.items():
            if t.full <= t.batch or t.per_step <= 0 or total <= 0:
                continue
            # a batch whose start and TIMED_STEPS steps take this stage's part of the allowance
            share = 0.5 * predicted[name] / total + 0.5 / len(timers)
            batch = int(allowed * share / (TIMED_STEPS * t.per_step + t.start_scales * t.per_start))
            if batch > t.batch:
                t.measure(min(batch, t.full), TIMED_STEPS)
        exact_seconds = _exact_seconds(plan) if plan.use_exact else None
    for s in stages:
        s.seconds = exact_seconds if s.name == "exact" else timers[s.name].seconds() if s.name in timers else 0.0
    batches = ", ".join(f"{STAGES[name]} {t.batch:,} {t.unit}" for name, t in timers.items())
    threads = torch.get_num_threads()
    how = (
        f"timed in {time.perf_counter() - begin:.2f} s: a few steps of each stage's own code on this model "
        f"({batches}), {threads} thread{'s' if threads != 1 else ''}"
        + ("; the exact enumeration counted and priced" if plan.use_exact else "")
    )
    estimate = CostEstimate(stages, int(plan.max_memory), how, time.perf_counter() - begin)
    log_f = estimate.stage("log_f")
    if log_f is not None and estimate.seconds and log_f.seconds / estimate.seconds >= 0.5:
        check = estimate.stage("log_f_check")
        share = (log_f.seconds + (check.seconds if check else 0.0)) / estimate.seconds
        estimate.notes.append(
            f"log f(v) and its check are {share:.0%} of the time and do not depend on --steps: --test-subset N "
            f"estimates on N of the {plan.n_test:,} test vectors (or lower --log-f-steps/--log-f-chains/"
            "--log-f-samples)"
        )
    return estimate


__all__ = ["CostEstimate", "MemoryTerm", "StageCost", "check_memory", "estimate_cost", "format_duration", "plan_memory"]
