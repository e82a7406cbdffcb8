"""The measured shifts of a rounded path (`evaluation.rounding`), against exact answers on a tiny RBM.

The rounded paths run on CUDA only; here the chains anneal a surrogate W~ = W / 2 on the CPU (the program's
`surrogate` weights, `kernels.binary_program`) and the report's rounding is made the same W / 2, so that every shift
is large (tenths of a nat) and its truth is enumerable. Tolerances are 4 standard errors of the two AIS estimates
the log Z shift is made from (tests/statistics.py's false-alarm rate: about 6e-5 per check).
"""

from __future__ import annotations

import dataclasses

import torch
from raise_eval.models import LayeredBoltzmannMachine

from raise_eval import BoltzmannPath, ais, exact, linear_schedule
from raise_eval.evaluation import rounding
from raise_eval.evaluation.plan import plan_evaluation
from raise_eval.kernels.binary_program import BinaryGibbsProgram
from raise_eval.stats import summarize_log_weights
from raise_eval.step_programs import loop_options

CHAINS = 100_000


def _halve(products: str, weight: torch.Tensor) -> torch.Tensor:
    return weight / 2


def test_the_shifts_of_a_rounded_path_are_the_exact_ones(tiny_rbm, monkeypatch):
    model = tiny_rbm
    monkeypatch.setattr(rounding, "path_weights", _halve)  # the report's rounding: the chains' surrogate
    twin = LayeredBoltzmannMachine([w / 2 for w in model.weights], model.biases, model.weight_scale)
    test = exact.binary_configurations(8)[torch.arange(0, 256, 7)]
    plan = plan_evaluation(model, test, exact="never", init="uniform")
    plan = dataclasses.replace(plan, settings=dataclasses.replace(plan.settings, gpu_products="half-path"))
    path = plan.path
    surrogate = [w / 2 for w in model.weights]
    monkeypatch.setattr(path, "step_program", lambda options: BinaryGibbsProgram(path, surrogate=surrogate))
    with loop_options(programs="always"):
        result = ais(path, linear_schedule(3), CHAINS, generator=torch.Generator().manual_seed(3))
    report = rounding.rounding_report(plan, result)

    log_z, log_z_twin = exact.log_partition(model), exact.log_partition(twin)
    log_f = exact.log_unnormalized_visible(model, test).double()
    log_f_twin = exact.log_unnormalized_visible(twin, test).double()
    assert report["weights"] == "float16" and abs(log_z - log_z_twin) > 0.15
    # AIS's chains hold both estimates: log Z from their log-weights w, log Z~ from w less the gap at their last
    # states; the shift's error is within the sum of the two estimates' standard errors
    state = result.final_state
    gap = path.log_density_ratio(state, 0.0, 1.0) - BoltzmannPath(twin, path.base_biases).log_density_ratio(
        BoltzmannPath(twin, path.base_biases).state_from_layers(state.layers), 0.0, 1.0
    )
    se = sum(float(summarize_log_weights(w).stderr) for w in (result.log_weights, result.log_weights - gap))
    assert abs(report["log_z_shift"] - (log_z - log_z_twin)) < 4 * se
    assert abs(report["test_log_f_shift"] - float((log_f - log_f_twin).mean())) < 1e-10
    truth = float((log_f - log_z).mean() - (log_f_twin - log_z_twin).mean())
    assert abs(report["raise_shift"] - truth) < 4 * se
    assert abs(report["gap_sd"] - float(gap.std())) < 1e-10 and report["gap_sd"] > 0.1
    note = rounding.rounding_note("half-path", report)
    assert "RAISE estimates the rounded model" in note and f"{report['raise_shift']:+.2g} nats" in note


def test_no_report_for_the_models_own_products(tiny_rbm):
    plan = plan_evaluation(tiny_rbm, exact.binary_configurations(8)[:4], exact="never", init="uniform")
    assert rounding.rounding_report(plan, None) is None
