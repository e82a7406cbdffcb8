"""The evaluation's stages are declared once (`raise_eval.evaluation.stage_registry`): the report's timing entries,
the labels and the seed streams are theirs."""

import torch
from raise_eval.models import RBM

from raise_eval import evaluate
from raise_eval.evaluation.memory import STAGES as MEMORY_LABELS
from raise_eval.evaluation.stage_registry import STAGES
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


def test_every_stage_has_a_label_and_its_own_stream():
    assert {s.name: s.label for s in STAGES} == MEMORY_LABELS
    streams = [s.stream for s in STAGES if s.stream is not None]
    assert len(set(streams)) == len(streams)
    assert {s.seed_offset for s in STAGES if s.stream} <= set(EVALUATION_OFFSETS.values())
