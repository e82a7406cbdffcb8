"""The cost model of an evaluation: its predicted wall time, stage by stage (`estimate_cost`).

Each stage's own code (`ais`, `raise_log_likelihood`, per-vector AIS, importance sampling, the pilot) runs a few steps
on the actual model, device and dtype, on chains of its own (the run's random streams are untouched), and the seconds
per chain and step are multiplied by the stage's chain-steps. A first timing on a small batch (PROBE_ELEMENTS state
entries) says where the run spends its time; a second one, on batches up to the run's own, aims at TIMING_BUDGET seconds
(and at most TIMING_FRACTION of the predicted run), half shared out in proportion to the stages' predicted shares and
half equally, but is at least twice the first batch, and a third one on a batch 8 times larger follows where it takes at
most WIDER_TIMING_LIMIT seconds (and 2% of the predicted run): per-chain costs depend on the batch (per-call overhead in
small ones; cache and page faults in large ones: per-vector AIS on the 784-500-1000 DBM cost 1.7 times more per chain at
559 vectors than at 70), so every stage is timed on a batch of a useful size and the one that dominates close to its
real one. On a GPU the timings of a stage also separate a step's fixed cost (launches, Python) from its cost per chain,
so that a step that is mostly fixed cost at the timed batches is not priced as if each chain paid it
(`_Timer.step_cost_at_full`). The exact enumeration is counted (`exact.exact_cost`) and the count priced with a timed
float64 product and softplus. The estimate is for one process on a machine as loaded as it is while it is measured. The
memory of each stage is `raise_eval.evaluation.memory`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import torch

from raise_eval import exact as exact_mod
from raise_eval.adaptive import pilot_run
from raise_eval.annealing import anneal
from raise_eval.estimators.ais import ais
from raise_eval.estimators.raise_ import raise_log_likelihood
from raise_eval.estimators.unnormalized import _CHUNK_ELEMENTS as LOG_F_CHUNK_ELEMENTS
from raise_eval.estimators.unnormalized import ais_chunk_vectors, log_unnormalized_estimate
from raise_eval.evaluation.log_f_check import LOG_F_CHECK_FACTOR
from raise_eval.evaluation.memory import STAGES, CostEstimate, plan_memory
from raise_eval.evaluation.plan import plan_loop_options
from raise_eval.paths.posterior import posterior_path
from raise_eval.runtime import product_routes
from raise_eval.runtime.sharding import raise_vectors_per_shard
from raise_eval.schedules import linear_schedule
from raise_eval.settings import Named
from raise_eval.step_programs import current_loop_options, loop_options

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
# After the second timing a third one on WIDER_FACTOR times its batch is made where it should take at most
# WIDER_TIMING_LIMIT seconds and WIDER_TIMING_FRACTION of the predicted run (priced at the second's cost per item, which
# over-prices a step of mostly fixed cost). A stage's timings separate a step's fixed cost when the largest batch's step
# cost at least FIT_MIN_GROWTH times the smallest's, or when they span 2 * WIDER_FACTOR times the batch (a flat step
# over that range is fixed cost, not noise); else the largest batch's cost per item is used as it is.
FIT_MIN_GROWTH = 1.2
WIDER_FACTOR = 8
WIDER_TIMING_LIMIT = 4.0
WIDER_TIMING_FRACTION = 0.02


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
            path, test[:vectors], linear_schedule(steps), c, generator=generator, unroll=unroll,
            dbn_start=plan.dbn_start, checkpoint=clock,
        )  # fmt: skip
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
            anneal(posterior, state, linear_schedule(steps), generator=generator, on_step=clock.on_step("log f(v)"),
                   desc="log f(v) by AIS")
            return clock.step_seconds("log f(v)") / (vectors * per_vector), start_seconds[0] / chains

        vectors = min(n, ais_chunk_vectors(posterior, chains))
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
    for work, op in ((1024 * units * 2048, lambda: torch.mm(a, b)), (x.numel(), lambda: exact_mod.softplus_(x))):
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
    with product_routes.forced_route(plan.settings.product_route), loop_options(**plan_loop_options(plan.settings)):
        # the timed steps fuse their elementwise work as the run's long stages will ('auto' decides by a run's
        # length, and the timings are short)
        chains = max(plan.ais_chains, min(plan.raise_examples, plan.n_test) * plan.raise_chains)
        with loop_options(fuse=current_loop_options().fuse_for(plan.model.device, chains * plan.steps)):
            return _estimate(plan, budget)


def _graph_steps(plan) -> dict[str, int]:
    """The steps to time for the stages (AIS, RAISE) whose path runs as a step program in CUDA graphs: the first
    eager step and three graphs."""
    options = current_loop_options()
    per_graph = options.steps_per_graph
    if plan.model.device.type != "cuda" or not per_graph or plan.path.step_program(options) is None:
        return {}
    steps = {"ais": 1 + 3 * per_graph}
    if plan.family != "DBN":  # a DBN's RAISE anneals its posterior path, which has no program
        steps["raise"] = 1 + 3 * per_graph
    return steps


def _estimate(plan, budget: float) -> CostEstimate:
    begin = time.perf_counter()
    stages = [replace(s) for s in (plan.cost.stages if getattr(plan, "cost", None) is not None else plan_memory(plan))]
    generator = torch.Generator(device=plan.model.device).manual_seed(0)
    timers = _timers(plan, generator)
    for t in timers.values():
        t.fit_fixed_cost = plan.model.device.type != "cpu"
    # Stages that run as step programs in CUDA graphs are timed over graphs (the first eager step, the first graph
    # with its capture, then the graphs that count): a few eager steps would price the launches a graph saves.
    graphed = _graph_steps(plan)
    with torch.no_grad():
        for name, t in timers.items():
            t.measure(t.probe, graphed.get(name, PROBE_STEPS))
        predicted = {name: t.seconds() for name, t in timers.items()}
        total = sum(predicted.values())
        allowed = min(budget, TIMING_FRACTION * total)
        for name, t in timers.items():
            if t.full <= t.batch or t.per_step <= 0 or total <= 0:
                continue
            # a batch whose start and TIMED_STEPS steps take this stage's part of the allowance
            share = 0.5 * predicted[name] / total + 0.5 / len(timers)
            batch = int(allowed * share / (TIMED_STEPS * t.per_step + t.start_scales * t.per_start))
            # at least twice the first batch, so that the two timings separate a step's fixed cost (`_Timer`)
            t.measure(min(max(batch, 2 * t.batch), t.full), graphed.get(name, TIMED_STEPS))
            wider = min(WIDER_FACTOR * t.batch, t.full)
            wider_limit = min(WIDER_TIMING_LIMIT, WIDER_TIMING_FRACTION * total)
            if wider > t.batch and TIMED_STEPS * t.per_step * wider <= wider_limit:
                # a batch several times larger: the line through the smallest and the largest timing is then
                # decided by the cost of the batch, not by noise in the small timing
                t.measure(wider, graphed.get(name, TIMED_STEPS))
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
            Named(
                f"log f(v) and its check are {share:.0%} of the time and do not depend on {{steps}}: {{test_subset}} N "
                f"estimates on N of the {plan.n_test:,} test vectors (or lower "
                "{log_f_ais_steps}/{log_f_ais_chains}/"
                "{log_f_samples})"
            )
        )
    return estimate


__all__ = ["estimate_cost"]
