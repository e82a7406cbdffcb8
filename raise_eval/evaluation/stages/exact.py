"""The exact values: log Z and (for DBMs and DBNs) log f(v) of every test vector, enumerated in chunks within the
memory bound (`raise_eval.exact`); counted and priced rather than timed."""

from __future__ import annotations

import time

import torch

from raise_eval import exact as exact_mod
from raise_eval.evaluation.memory import Held, MemoryTerm, StageMemory, term
from raise_eval.evaluation.report import ExactValues
from raise_eval.evaluation.stages.stage import Stage
from raise_eval.evaluation.timers import EXACT_OVERHEAD, StepClock


def exact_stage(plan) -> ExactValues:
    """Exact log Z and (for DBMs and DBNs) exact log f(v) of every test vector, enumerated in chunks within the
    memory bound."""
    model, test = plan.model, plan.test
    t0 = time.perf_counter()
    cost = exact_mod.exact_cost(model, test.shape[0])
    limit = max(plan.max_exact_units, cost.log_z_units, cost.log_f_units)
    # Chunks beyond a few hundred MB are no faster: at most exact.DEFAULT_MAX_BYTES, and half the memory bound.
    budget = {"max_bytes": max(min(int(plan.max_memory) // 2, exact_mod.DEFAULT_MAX_BYTES), 1 << 20)}
    log_z = exact_mod.log_partition(model, max_units=limit, progress=plan.progress, **budget)
    log_f = None
    if plan.exact_log_f:
        log_f = exact_mod.log_unnormalized_visible(model, test, max_units=limit, progress=plan.progress, **budget)
    words = {"odd": "odd-layer", "even": "even-hidden-layer", "dbn": "directed-layer"}.get(cost.log_f_route, "")
    route = f"log f(v) over 2^{cost.log_f_units} {words} configurations" if plan.exact_log_f else ""
    return ExactValues(float(log_z), log_f, time.perf_counter() - t0, route)


def exact_memory(held: Held) -> StageMemory:
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
        terms.append(term("the exact log f(v) per test vector", n, 8 * (sum(model.layer_sizes[:2]) + 6),
                           "{test_subset}", least=2))  # fmt: skip
        if cost.log_f_route == "dbn":  # a deep DBN keeps a table over each directed layer
            layers = model.layer_sizes[1 : len(model.weights)]
            terms.append(MemoryTerm("the tables over the directed layers", 16 * sum(2**u for u in layers[1:])))
        held.kept.append(term("the exact log f(v)", n, 8, "{test_subset}", least=2))
    return f"2^{units} states" + (f" x {n:,} vectors" if plan.exact_log_f else ""), terms, True


def exact_seconds(plan) -> float:
    """The exact stage's seconds: its multiply-adds and softplus/exp evaluations (`exact.exact_cost`) priced with a
    timed float64 product of the enumeration's shape and a timed softplus, times EXACT_OVERHEAD."""
    cost = exact_mod.exact_cost(plan.model, plan.n_test)
    device = plan.model.device
    units = max(cost.log_z_units, cost.log_f_units, 16)
    clock = StepClock(device)
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


EXACT = Stage(
    "exact", "exact", "exact_seconds", None, None, "the exact answer", run=exact_stage, memory=exact_memory,
    price=exact_seconds,
)
