"""The cost estimate of an energy model's evaluation (`evaluation.energy_cost`): the kernel's timed transition at each
stage's batch times the stage's transitions (the pilot's do not grow with K beyond pilot_steps), in the Boltzmann
machines' `CostEstimate` form."""

from __future__ import annotations

import pytest
import torch

from raise_eval.evaluation.energy import EnergySettings
from raise_eval.evaluation.energy_checks import PROBE_CHAINS, PROBE_STEPS
from raise_eval.evaluation.energy_cost import PILOT_CHAINS, PILOT_WARMUP, energy_cost, estimate_energy_cost
from tests.energy_models import gaussian_energy, neural_energy


def test_the_cost_is_a_transition_s_time_times_the_stage_s_transitions():
    def per_batch(batch):  # a transition costing 1e-4 s per chain
        return 1e-4 * batch

    settings = EnergySettings(steps=1000, ais_chains=100, raise_chains=10, pilot_steps=200)
    estimate = energy_cost(6, settings, "hmc", 24, per_batch)
    assert [s.name for s in estimate.stages] == ["pilot", "ais", "raise"]
    assert estimate.stage("ais").seconds == pytest.approx(1000 * 100 * 1e-4)
    assert estimate.stage("raise").seconds == pytest.approx(1000 * 6 * 10 * 1e-4)
    pilot = estimate.stage("pilot")
    assert pilot.seconds == pytest.approx((2 * 201 + PILOT_WARMUP) * PILOT_CHAINS * 1e-4) and pilot.steps_independent
    longer = energy_cost(6, EnergySettings(steps=2000, ais_chains=100, raise_chains=10), "hmc", 24, per_batch)
    assert longer.stage("ais").seconds == pytest.approx(2 * estimate.stage("ais").seconds)
    assert longer.stage("pilot").seconds == pytest.approx(pilot.seconds)  # K beyond pilot_steps: the same pilot
    assert estimate.stage("ais").work == "100 chains x 1,000 transitions (10 forward-and-backward passes each)"
    text = estimate.format()
    assert text.startswith("estimated time ") and "(bound" not in text  # an energy's memory has no bound
    sites = energy_cost(6, EnergySettings(steps=10, kernel="metropolis"), "metropolis", 8, per_batch)
    assert [s.name for s in sites.stages] == ["ais", "raise"]  # no pilot on discrete support
    # a base fitted to training data: the run also probes it (PROBE_STEPS transitions of PROBE_CHAINS, its pilot)
    fitted = energy_cost(6, settings, "hmc", 24, per_batch, fitted=True)
    assert [s.name for s in fitted.stages] == ["pilot", "ais", "probe", "raise"]
    probe_pilot = (2 * (min(PROBE_STEPS, 200) + 1) + PILOT_WARMUP) * PILOT_CHAINS
    assert fitted.stage("probe").seconds == pytest.approx((PROBE_STEPS * PROBE_CHAINS + probe_pilot) * 1e-4)


@pytest.mark.parametrize("kind", ["hmc", "gibbs-with-gradients"])
def test_the_estimate_times_the_run_s_own_kernel_on_the_energy(kind):
    if kind == "hmc":
        model, _ = gaussian_energy(3)
    else:
        model = neural_energy("binary", 5, seed=3)
    test = torch.zeros(4, *model.event_shape, dtype=model.dtype)
    settings = EnergySettings(steps=100, ais_chains=32, raise_chains=2, pilot_steps=10, kernel=kind)
    estimate = estimate_energy_cost(model, test, settings, kind)
    assert all(s.seconds > 0 for s in estimate.stages) and estimate.seconds == sum(s.seconds for s in estimate.stages)
    assert f"transitions of the {kind} kernel on this energy" in estimate.timing
    document = estimate.to_dict()
    assert document["per_stage"]["ais"]["depends_on_steps"] and document["seconds"] == estimate.seconds
