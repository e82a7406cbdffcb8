"""The measured shifts of a rounded path (`evaluation.rounding`), against exact answers on a tiny RBM.

The rounded paths run on CUDA only; here the chains anneal a surrogate W~ = W / 3 on the CPU (the program's
`surrogate` weights, `kernels.binary_program`) and the report's rounding is made the same W / 3, so that every shift
is large (1.57 nats in log Z, 8 or more standard errors) and its truth is enumerable. The tolerance is 4 of the
report's own standard errors (the delta method over AIS's chains): tests/statistics.py's false-alarm rate (about 6e-5)
for normal errors, more for weights as heavy-tailed as these (four seeds gave errors within 1.5 standard errors).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from raise_eval.models import LayeredBoltzmannMachine

from raise_eval import BoltzmannPath, ais, exact, linear_schedule
from raise_eval.evaluation import rounding
from raise_eval.evaluation.plan import plan_evaluation
from raise_eval.kernels.binary_program import BinaryGibbsProgram
from raise_eval.step_programs import loop_options

CHAINS = 100_000


def _shrink(products: str, weight: torch.Tensor) -> torch.Tensor:
    return weight / 3


def test_the_shifts_of_a_rounded_path_are_the_exact_ones(tiny_rbm, monkeypatch):
    model = tiny_rbm
    monkeypatch.setattr(rounding, "path_weights", _shrink)  # the report's rounding: the chains' surrogate
    twin = LayeredBoltzmannMachine([w / 3 for w in model.weights], model.biases, model.weight_scale)
    test = exact.binary_configurations(8)[torch.arange(0, 256, 7)]
    plan = plan_evaluation(model, test, exact="never", init="uniform")
    plan = dataclasses.replace(plan, settings=dataclasses.replace(plan.settings, gpu_products="half-path"))
    path = plan.path
    surrogate = [w / 3 for w in model.weights]
    monkeypatch.setattr(path, "step_program", lambda options: BinaryGibbsProgram(path, surrogate=surrogate))
    with loop_options(programs="always"):
        result = ais(path, linear_schedule(20), CHAINS, generator=torch.Generator().manual_seed(0))
    report = rounding.rounding_report(plan, result)

    log_z, log_z_twin = exact.log_partition(model), exact.log_partition(twin)
    log_f = exact.log_unnormalized_visible(model, test).double()
    log_f_twin = exact.log_unnormalized_visible(twin, test).double()
    se = report["shift_stderr"]
    assert report["weights"] == "float16" and abs(log_z - log_z_twin) > 8 * se
    # AIS's chains hold both estimates: log Z from their log-weights w, log Z~ from w less the gap at their last states
    assert abs(report["log_z_shift"] - (log_z - log_z_twin)) < 4 * se
    assert abs(report["test_log_f_shift"] - float((log_f - log_f_twin).mean())) < 1e-10
    truth = float((log_f - log_z).mean() - (log_f_twin - log_z_twin).mean())
    assert abs(report["raise_shift"] - truth) < 4 * se
    state = result.final_state
    twin_path = BoltzmannPath(twin, path.base_biases)
    gap = path.log_density_ratio(state, 0.0, 1.0) - twin_path.log_density_ratio(
        twin_path.state_from_layers(state.layers), 0.0, 1.0
    )
    assert abs(report["gap_sd"] - float(gap.std())) < 1e-10 and report["gap_sd"] > 0.1
    note = rounding.rounding_note("half-path", report)
    assert "RAISE estimates the rounded model" in note and f"{report['raise_shift']:+.2g} ± {se:.2g} nats" in note


def test_no_report_for_the_models_own_products(tiny_rbm):
    plan = plan_evaluation(tiny_rbm, exact.binary_configurations(8)[:4], exact="never", init="uniform")
    assert rounding.rounding_report(plan, None) is None


def test_passes_that_read_intermediate_rungs_and_certified_runs_refuse_rounded_paths(tiny_rbm):
    from raise_eval import certify
    from raise_eval.estimators.ladder import ladder_pass
    from raise_eval.estimators.smc import smc_ladder_pass
    from raise_eval.settings import SettingsError

    path = BoltzmannPath(tiny_rbm)
    with loop_options(products="half-path"):
        with pytest.raises(ValueError, match="the AIS ladder reads its log-weights at intermediate rungs"):
            ladder_pass(path, linear_schedule(4), 10, rungs=[2], generator=torch.Generator())
        with pytest.raises(ValueError, match="the SMC ladder reads"):
            smc_ladder_pass(path, linear_schedule(4), 10, rungs=[2], generator=torch.Generator(), resample_ess=0.5,
                            replicates=1)  # fmt: skip
    with pytest.raises(SettingsError, match="gpu_products tf32-path anneals the model with rounded weights"):
        certify(tiny_rbm, exact.binary_configurations(8)[:4], gpu_products="tf32-path", tolerance=1.0)


def test_evaluate_names_an_enclosing_blocks_products_it_does_not_take(tiny_rbm):
    """evaluate's products are its settings' (gpu_products): an enclosing loop_options block's are named, not used."""
    from raise_eval import evaluate

    test = exact.binary_configurations(8)[:4]
    with loop_options(products="half-path"), pytest.warns(UserWarning, match="pass gpu_products='half-path' instead"):
        report = evaluate(tiny_rbm, test, steps=2, ais_chains=4, raise_chains=2, init="uniform", exact="never",
                          progress=False)  # fmt: skip
    assert report.settings["gpu_products"] == "model"
