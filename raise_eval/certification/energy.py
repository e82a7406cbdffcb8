"""A certified run of a user's energy model (`EnergyModel`): `evaluate_energy` at each K of the certified loop
(`certification.loop`), with the settings, the verdict's functions, the `CertifyStep`s and the `Certificate` of a
Boltzmann machine's certified run.

The `CertifySettings` give the tolerance, max_steps, time_budget and growth; of its evaluation's settings an energy
model's evaluation reads steps (the first K), ais_chains, raise_chains, seed, progress and threads. What only an
energy model has (kernel, num_leapfrog, pilot_steps; train_data or base for the base) is given by keyword.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.annealing import NonFiniteLogWeightError
from raise_eval.certification.loop import Stopped
from raise_eval.certification.report import CertifyStep
from raise_eval.certification.settings import CertifySettings
from raise_eval.certification.verdict import sandwich_interval
from raise_eval.evaluation.energy import (
    EnergyInterrupted,
    EnergyReport,
    EnergySettings,
    check_base_source,
    check_kernel_options,
    energy_names,
    evaluate_energy,
    kernel_kind,
)
from raise_eval.evaluation.energy_resume import base_digest, energy_digest
from raise_eval.evaluation.settings import EvaluateSettings
from raise_eval.models.energy_check import check_energy_dtype
from raise_eval.runtime.resume import model_digest, tensor_digest

# The evaluation settings an energy model's evaluation reads; any other given is refused by name, never ignored.
ENERGY_EVALUATION_FIELDS = ("steps", "ais_chains", "raise_chains", "seed", "progress", "threads", "resume_interval")
# What only an energy model's evaluation has (`EnergySettings` fields, and where its base comes from).
ENERGY_ONLY = ("kernel", "num_leapfrog", "pilot_steps", "train_data", "base")


def refuse_foreign(names) -> None:
    """Refuse (ValueError, naming them) evaluation settings that an energy model's evaluation does not read."""
    foreign = sorted(name for name in names if name not in ENERGY_EVALUATION_FIELDS)
    if foreign:
        raise ValueError(
            f"an energy model's certified run has no setting {', '.join(foreign)} (of the evaluation's "
            f"settings it takes {', '.join(ENERGY_EVALUATION_FIELDS)}; and {', '.join(ENERGY_ONLY)})"
        )


def refused_evaluation_fields(evaluation: EvaluateSettings) -> list[str]:
    """The evaluation settings that differ from their defaults but that an energy model's evaluation does not read."""
    defaults = EvaluateSettings()
    return [
        f.name
        for f in dataclasses.fields(EvaluateSettings)
        if f.name not in ENERGY_EVALUATION_FIELDS and getattr(evaluation, f.name) != getattr(defaults, f.name)
    ]


class EnergyRuns:
    """The evaluations of an energy model's certified run (the `runs` of `certification.loop.grow_until_closed`):
    `evaluate_energy` at K, the same model, test vectors, base and seeds at every K.

    test_data: (N, *event_shape); energy: the `EnergySettings` fields only an energy model has (kernel,
    num_leapfrog, pilot_steps); train_data (M, *event_shape) or base: the base, as for `evaluate_energy`.
    """

    legacy_fields: tuple = ()  # every energy certified file records all its settings
    fixed_cost_note = ""
    ais_label = "AIS"
    names = energy_names(None)  # the reasons' settings as an energy model's report says them

    def __init__(self, model, test_data: Tensor, settings: CertifySettings, energy: dict[str, Any],
                 train_data: Optional[Tensor] = None, base: Any = None):  # fmt: skip
        refuse_foreign(refused_evaluation_fields(settings.evaluation))
        check_energy_dtype(model)
        check_base_source(model, train_data, base)
        self.model, self.test, self.train_data, self.base = model, test_data, train_data, base
        e = settings.evaluation
        self.tolerance = settings.tolerance
        self.progress, self.resume_interval = e.progress, e.resume_interval
        # Checked now (a ValueError naming the field), not after the first K.
        self.energy = self.settings_at(e.steps, e, energy)
        check_kernel_options(kernel_kind(model, self.energy.kernel), self.energy)
        self.model_label = model.describe()
        self.fingerprint = {
            "family": "energy",
            "first_steps": e.steps,
            "growth": settings.growth,
            **{name: getattr(self.energy, name) for name in ("seed", "ais_chains", "raise_chains", "kernel",
                                                              "num_leapfrog", "pilot_steps")},
            "dtype": str(model.dtype),
            "device": str(model.device),
            "test_data": tensor_digest([torch.as_tensor(test_data)]),
            "parameters": model_digest(model),
            "energy": energy_digest(model),
            "base": base_digest(model, train_data, base),
        }  # fmt: skip
        self.known = None  # the first K's base probe and exact log Z, handed to every larger K (`KIndependent`)

    def settings_at(self, steps: int, e: EvaluateSettings, energy: dict[str, Any]) -> EnergySettings:
        return EnergySettings(steps=steps, ais_chains=e.ais_chains, raise_chains=e.raise_chains, seed=e.seed,
                              tolerance=self.tolerance, **energy)  # fmt: skip

    @staticmethod
    def legacy(missing) -> dict:
        return {name: None for name in missing}

    def run(self, k: int, resume_file: Optional[str]):
        """(the `EnergyReport` at K = k, its `CertifyStep`, its notes); raises `Stopped`."""
        try:
            report = evaluate_energy(self.model, self.test, dataclasses.replace(self.energy, steps=k),
                                     train_data=self.train_data, base=self.base, progress=self.progress,
                                     resume_file=resume_file, resume_interval=self.resume_interval,
                                     known=self.known)  # fmt: skip
        except NonFiniteLogWeightError as e:
            raise Stopped(True, f"K = {k:,} stopped during {e.stage}: {e}", None, e) from None
        except EnergyInterrupted as stop:
            raise Stopped(False, f"interrupted during K = {k:,} ({stop.stage})", None, stop) from None
        except KeyboardInterrupt as stop:
            raise Stopped(False, f"interrupted during K = {k:,}", None, stop) from None
        self.known = report.k_independent
        return report, energy_step(report, k), report.notes


def energy_step(report: EnergyReport, steps: int) -> CertifyStep:
    """The `CertifyStep` of an energy evaluation at K = `steps`: the AIS side log f(v) - log Z-hat, the RAISE side,
    their standard errors as the verdict reads them (AIS's of log Z, RAISE's with the control variate log f(v)), its
    reasons (`report.reasons`, at the run's tolerance) and its interval (given even when open, as a Boltzmann
    machine's)."""
    numbers = SimpleNamespace(ais=SimpleNamespace(stderr=report.log_z_stderr), raise_stderr=report.lower_stderr,
                              ais_mean=report.upper_mean, raise_mean=report.lower_mean)  # fmt: skip
    low, high = sandwich_interval(numbers) if math.isfinite(report.lower_stderr) else (None, None)
    return CertifyStep(
        steps=steps, ais_mean=report.upper_mean, ais_stderr=report.log_z_stderr, raise_mean=report.lower_mean,
        raise_stderr=report.lower_stderr, ais_ess=report.ais_ess, exact_mean=report.exact_mean,
        seconds=report.seconds["AIS"] + report.seconds["RAISE"], total_seconds=report.total_seconds,
        warnings=[w.code for w in report.warnings], reasons_open=list(report.reasons), interval_low=low,
        interval_high=high, fixed_seconds=report.seconds.get("pilot", 0.0) + report.seconds.get("probe", 0.0),
    )  # fmt: skip
