"""The evaluation's stages are each one object (`raise_eval.evaluation.stages`): the report's timing entries, the
labels, the seed streams, the memory plan's and the cost estimate's stages are theirs."""

import torch
from raise_eval.models import RBM

from raise_eval import evaluate
from raise_eval.evaluation.stages import LABELS as MEMORY_LABELS
from raise_eval.evaluation.stages import RUN_ORDER, STAGES
from raise_eval.seeds import EVALUATION_OFFSETS


def test_the_report_times_exactly_the_declared_stages():
    g = torch.Generator().manual_seed(0)
    model = RBM.random(8, 4, weight_std=0.3, generator=g)
    test = (torch.rand(20, 8, generator=g) < 0.5).float()
    report = evaluate(model, test, steps=5, ais_chains=4, raise_examples=4, raise_chains=2, init="uniform",
                      schedule="adaptive", pilot_chains=4, pilot_grid=4, threads=1)  # fmt: skip
    assert list(report.timing) == ["seconds", *(s.report_key for s in STAGES)]
    assert list(report.to_dict()["timing"]) == list(report.timing)
    ran = {"ais", "raise", "log_f", "exact", "pilot"}  # an RBM's log f(v) is exact: no check
    assert {s.name for s in STAGES if report.timing[s.report_key] is not None} == ran


def test_every_stage_is_one_object_with_its_own_stream():
    assert sorted(s.name for s in RUN_ORDER) == sorted(s.name for s in STAGES)
    assert {s.name: s.label for s in STAGES} == MEMORY_LABELS
    for s in STAGES:  # its run, its memory count, and a timer or a price: all on the one object
        assert callable(s.run) and callable(s.memory) and (s.timer is None) != (s.price is None), s.name
    streams = [s.stream for s in STAGES if s.stream is not None]
    assert len(set(streams)) == len(streams)
    assert {s.seed_offset for s in STAGES if s.stream} <= set(EVALUATION_OFFSETS.values())


def test_the_memory_plan_and_the_cost_estimate_go_through_the_stage_objects(monkeypatch):
    """A stage's memory and timer are read from its object: replacing them there changes the plan and the estimate."""
    import dataclasses

    from raise_eval.evaluation import estimate_cost, plan_evaluation, stages

    g = torch.Generator().manual_seed(0)
    model = RBM.random(8, 4, weight_std=0.3, generator=g)
    test = (torch.rand(20, 8, generator=g) < 0.5).float()
    small = dict(steps=5, ais_chains=4, raise_examples=4, raise_chains=2, init="uniform", threads=1)
    plan = plan_evaluation(model, test, **small)
    assert [s.name for s in plan.cost.stages] == ["ais", "exact", "raise"]  # an RBM: log f(v) in closed form
    ais = stages.STAGE["ais"]
    counted = dataclasses.replace(ais, memory=lambda held: ("counted here", [], False))
    timed = []

    def timer(context):
        timed.append(context.plan)
        return ais.timer(context)

    patched = dataclasses.replace(counted, timer=timer)
    monkeypatch.setattr(stages, "RUN_ORDER", tuple(patched if s is ais else s for s in RUN_ORDER))
    plan = plan_evaluation(model, test, **small)
    assert plan.cost.stages[0].work == "counted here"
    estimate_cost(plan, budget=0.01)
    assert timed and timed[0] is plan
