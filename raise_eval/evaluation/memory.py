"""The memory model of an evaluation: the peak bytes of every stage, counted from the settings alone before any
work (`plan_memory`), and the check that refuses a plan whose peak passes the memory bound, naming the setting
that sets the largest part and how far to lower it (`check_memory`). It is the only judge of memory: the shard
sizes, the adaptive pilot, the exact enumeration's chunks and the log f(v) estimates are all counted here.

`plan_evaluation` counts the bytes of every stage the run will go through (the adaptive pilot and its grid, AIS's
shard of chains, its log-weights and its schedule, the exact enumeration's chunks, the log f(v) estimates' chunks,
RAISE's shard and log-weights, the log f(v) check), each with what the earlier stages keep (AIS's log-weights, the
log f(v) estimates, the test vectors). The bytes per chain, per step and per vector below are peak resident memory
measured on the CPU (784-500-1000 DBM, 784-500-2000 DBN, a 6-5-4 DBM with millions of chains or steps), with a
margin. `raise_eval.evaluation.timing.estimate_cost` adds the predicted seconds of each stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from raise_eval import exact as exact_mod
from raise_eval.estimators.unnormalized import _CHUNK_ELEMENTS as LOG_F_CHUNK_ELEMENTS
from raise_eval.estimators.unnormalized import ais_chunk_vectors
from raise_eval.evaluation.log_f_check import LOG_F_CHECK_FACTOR
from raise_eval.evaluation.stage_registry import LABELS
from raise_eval.paths.posterior import posterior_path
from raise_eval.runtime.sharding import bytes_per_chain, log_f_bytes, raise_vectors_per_shard, shard_bounds
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


STAGES = LABELS  # the stages' labels, declared with the stages (`evaluation.stage_registry`)


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


def _dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _log_f_chunk(plan, method: str, samples: int, chains: int, n: int) -> MemoryTerm:
    """One chunk of `log_unnormalized_estimate` on n vectors. Its size is fixed (about 2^23 state entries; 2^25 for
    a DBN's per-vector AIS) unless
    one vector's samples or chains pass that: the chunk is then one vector, and grows with the option."""
    model = plan.model
    if method == "importance":
        vectors = min(n, max(1, LOG_F_CHUNK_ELEMENTS // (samples * max(model.layer_sizes))))
        size, option, value = log_f_bytes(model, n, samples, LOG_F_CHUNK_ELEMENTS), "{log_f_samples}", samples
    else:
        posterior = posterior_path(model)
        elements = posterior.state_elements()
        vectors = min(n, ais_chunk_vectors(posterior, chains))
        per_entry = POSTERIOR_BYTES[plan.family](_dtype_size(model.dtype))
        start = vectors * sum(model.layer_sizes) * MEAN_FIELD_BYTES if plan.family == "DBM" else 0
        size, option, value = vectors * chains * elements * per_entry + start, "{log_f_ais_chains}", chains
    what = f"one chunk of {vectors:,} vector{'s' if vectors > 1 else ''}"
    return MemoryTerm(what, size, option, value, size // value if vectors == 1 else 0)


def _log_f_schedule(method: str, steps: int, factor: int = 1) -> MemoryTerm:
    """The schedule of per-vector AIS at `factor` times log_f_ais_steps (none for the other estimators)."""
    if method != "ais":
        return MemoryTerm("no schedule", 0)
    what = f"the schedule of {factor * steps:,} steps"
    return _term(what, steps + 1, factor * SCHEDULE_BYTES_PER_STEP, "{log_f_ais_steps}", extra=1)


@dataclass
class _Held:
    """What the stages of one plan share while their memory is counted: the plan, the model's float64 copy's size,
    the schedule, and the terms the run holds through every later stage (`kept`, grown by each stage)."""

    plan: Any
    params64: int
    schedule: MemoryTerm
    kept: list[MemoryTerm]


# A stage's memory: (what it computes, its terms besides those held, whether it depends on K), or None when the plan
# does not run it; it adds to `held.kept` what it leaves for the later stages.
StageMemory = Optional[tuple[str, list[MemoryTerm], bool]]


def _pilot_memory(held: _Held) -> StageMemory:
    plan = held.plan
    if plan.schedule_name != "adaptive":
        return None
    k, dtype = plan.steps, plan.model.dtype
    terms = [
        _term(f"the pilot's {plan.pilot_chains:,} chains", plan.pilot_chains,
              bytes_per_chain(sum(plan.path.model.layer_sizes), dtype), "{pilot_chains}", least=2),
        _term(f"the pilot's grid of {plan.pilot_grid:,} cells", plan.pilot_grid + 1, PILOT_BYTES_PER_CELL,
              "{pilot_grid}", extra=1),
        _term(f"the schedule of {k:,} steps placed from it", k + 1, PILOT_BYTES_PER_STEP, "{steps}", extra=1),
    ]  # fmt: skip
    return f"{plan.pilot_chains:,} chains x {plan.pilot_grid:,} grid cells", terms, False


def _ais_memory(held: _Held) -> StageMemory:
    plan = held.plan
    m, shard, k = plan.ais_chains, plan.shard_size, plan.steps
    shards = len(range(0, m, shard))
    terms = [
        _term(f"one shard of {min(m, shard):,} chains", min(m, shard),
              bytes_per_chain(sum(plan.path.model.layer_sizes), plan.model.dtype), "{shard_size}"),
        _term(f"the log-weights of {m:,} chains", m, LOG_WEIGHT_BYTES, "{ais_chains}", least=2),
        held.schedule,
    ]  # fmt: skip
    held.kept.append(_term(f"AIS's {m:,} log-weights", m, 8, "{ais_chains}", least=2))
    return f"{m:,} chains x {k:,} steps" + (f" in {shards:,} shards" if shards > 1 else ""), terms, False


def _exact_memory(held: _Held) -> StageMemory:
    plan = held.plan
    if not plan.use_exact:
        return None
    model, n = plan.model, plan.n_test
    cost = exact_mod.exact_cost(model, n)
    # exact_stage's chunk budget, or less when every configuration fits in one chunk (`exact.enumeration.plan_chunks`)
    budget = max(min(int(plan.max_memory) // 2, exact_mod.DEFAULT_MAX_BYTES), 1 << 20)
    units = max(cost.log_z_units, cost.log_f_units)
    chunk = exact_mod.chunk_bytes(model, n, plan.exact_log_f, budget)  # by the module that enumerates (binary, typed)
    terms = [
        MemoryTerm("one chunk of the enumeration", chunk),
        MemoryTerm("a float64 copy of the model", held.params64),
    ]
    if plan.exact_log_f:
        terms.append(_term("the exact log f(v) per test vector", n, 8 * (sum(model.layer_sizes[:2]) + 6),
                           "{test_subset}", least=2))  # fmt: skip
        if cost.log_f_route == "dbn":  # a deep DBN keeps a table over each directed layer
            layers = model.layer_sizes[1 : len(model.weights)]
            terms.append(MemoryTerm("the tables over the directed layers", 16 * sum(2**u for u in layers[1:])))
        held.kept.append(_term("the exact log f(v)", n, 8, "{test_subset}", least=2))
    return f"2^{units} states" + (f" x {n:,} vectors" if plan.exact_log_f else ""), terms, True


def _log_f_memory(held: _Held) -> StageMemory:
    plan = held.plan
    model, n, method, options = plan.model, plan.n_test, plan.log_f_method, plan.log_f_options
    out: StageMemory = None
    if method in ("importance", "ais"):
        chunk = _log_f_chunk(plan, method, options["num_samples"], options["ais_chains"], n)
        if method == "importance":
            work = f"{n:,} vectors x {options['num_samples']:,} importance samples"
        else:
            work = f"{n:,} vectors x {options['ais_chains']:,} chains x {options['ais_steps']:,} steps (per-vector AIS)"
        terms = [
            chunk,
            MemoryTerm("a float64 copy of the model", held.params64 if plan.family == "DBM" else 0),
            _term("the estimates", n, LOG_F_RESULT_BYTES, "{test_subset}", least=2),
            _log_f_schedule(method, options["ais_steps"]),
        ]
        out = work, terms, True
    elif method == "mean-field":
        terms = [
            _term("the mean-field marginals of every test vector", n,
                  sum(model.layer_sizes) * MEAN_FIELD_BYTES, "{test_subset}", least=2),
            MemoryTerm("a float64 copy of the model", held.params64),
        ]  # fmt: skip
        out = f"{n:,} vectors, mean-field bound", terms, True
    held.kept.append(_term("the log f(v) estimates", n, 16, "{test_subset}", least=2))
    return out


def _raise_memory(held: _Held) -> StageMemory:
    plan = held.plan
    model, family, shard, k = plan.model, plan.family, plan.shard_size, plan.steps
    r, c = min(plan.raise_examples, plan.n_test), plan.raise_chains
    vectors = min(raise_vectors_per_shard(shard, c), r)
    raise_shards = len(shard_bounds(r, raise_vectors_per_shard(shard, c)))
    how = ""
    if family == "DBM" or (family == "DBN" and plan.dbn_start == "heated"):
        how = " (heating and reverse)"
    elif family == "DBN":
        how = " (unrolled)"
    how += f" in {raise_shards:,} shards" if raise_shards > 1 else ""
    terms = [
        _term(f"one shard of {vectors:,} vectors x {c:,} chains", vectors * c,
              bytes_per_chain(sum(model.layer_sizes), model.dtype),
              "{shard_size}" if vectors > 1 else "{raise_chains}"),
        _term(f"the log-weights of {r:,} x {c:,} chains", r * c, LOG_WEIGHT_BYTES,
              "{raise_examples} x {raise_chains}", least=2),
        held.schedule,
    ]  # fmt: skip
    return f"{r:,} vectors x {c:,} chains x {k:,} steps{how}", terms, False


def _log_f_check_memory(held: _Held) -> StageMemory:
    plan = held.plan
    method, options = plan.log_f_method, plan.log_f_options
    checked = min(plan.log_f_check, plan.n_test)
    if method not in ("importance", "ais", "mean-field") or checked <= 0:
        return None
    r, c = min(plan.raise_examples, plan.n_test), plan.raise_chains
    factor = LOG_F_CHECK_FACTOR if method != "mean-field" else 1
    check_method = "ais" if method == "ais" else "importance"
    samples = options["num_samples"] * (factor if method == "importance" else 1)
    terms = [
        _log_f_chunk(plan, check_method, samples, options["ais_chains"], checked),
        _log_f_schedule(method, options["ais_steps"], factor),
        _term(f"RAISE's {r:,} x {c:,} log-weights", r * c, 8, "{raise_examples} x {raise_chains}", least=2),
    ]
    work = f"{checked:,} vectors, " + (f"{factor} times longer" if factor > 1 else "by importance sampling")
    return work, terms, True


# Each stage's memory, in the order the stages run (`evaluation.stage_registry` declares the rest of each stage).
STAGE_MEMORY = {
    "pilot": _pilot_memory,
    "ais": _ais_memory,
    "exact": _exact_memory,
    "log_f": _log_f_memory,
    "raise": _raise_memory,
    "log_f_check": _log_f_check_memory,
}


def plan_memory(plan) -> list[StageCost]:
    """The stages `plan` (an `evaluate.EvaluationPlan`) will run, in order, each with its peak bytes and what they
    are made of; seconds are left None (`estimate_cost` times them). Nothing is allocated."""
    model, n, k = plan.model, plan.n_test, plan.steps
    size = _dtype_size(model.dtype)
    held = _Held(
        plan,
        params64=8 * (sum(w.numel() for w in model.weights) + sum(b.numel() for b in model.biases)),
        schedule=_term(f"the schedule of {k:,} steps", k + 1, SCHEDULE_BYTES_PER_STEP, "{steps}", extra=1),
        kept=[_term("the test vectors (and the search for repeated ones)", n, 2 * model.n_visible * size + 24,
                    "{test_subset}", least=2)],
    )  # fmt: skip
    stages: list[StageCost] = []
    for name, memory in STAGE_MEMORY.items():
        kept = list(held.kept)  # what the earlier stages left
        found = memory(held)
        if found is not None:
            work, terms, steps_independent = found
            terms = terms + kept
            stages.append(
                StageCost(name, LABELS[name], work, sum(t.bytes for t in terms), None, steps_independent, tuple(terms))
            )
    return stages


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


__all__ = ["CostEstimate", "MemoryTerm", "StageCost", "check_memory", "format_duration", "plan_memory"]
