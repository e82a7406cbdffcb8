"""What a training monitor (`integrations.hooks.LikelihoodMonitor`) does for a user's energy model (`EnergyModel`,
the 'energy' family): its settings (`EnergySettings`, cheap defaults `MONITOR_ENERGY`), one evaluation per call
(`evaluate_energy`, as a stand-alone `raise_eval.evaluate` of that epoch's model gives it), the exact value where it
is known, and the `SandwichRecord` of the report.

The exact value: `exact_log_z(model)` when the user gives it (e.g. a 2-D energy integrated on a fine grid), else
log Z by enumeration for an energy on discrete support of at most 2^EXACT_UNITS configurations
(`raise_eval.exact.energy.log_partition`: well under a second for a small network), else none.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from torch import Tensor

from raise_eval.evaluation.energy import EnergySettings
from raise_eval.exact import energy as exact_energy
from raise_eval.integrations.records import SandwichRecord
from raise_eval.settings import SettingsError

# An energy model's monitor evaluation by default: cheap, for a trend (the seed is the same at every call, so the
# differences between epochs are the model's); `raise_eval.evaluate`'s defaults are for final numbers.
MONITOR_ENERGY = EnergySettings(steps=100, ais_chains=100, raise_chains=5, pilot_steps=50)
# What only an energy model's monitor takes (keywords of `LikelihoodMonitor`).
ENERGY_KEYWORDS = ("train_data", "base", "exact_log_z")
# A discrete energy of at most 2^EXACT_UNITS configurations is enumerated at every record (its exact value).
EXACT_UNITS = 16


def energy_settings(value) -> Optional[EnergySettings]:
    """The `energy` setting of a monitor: True for `MONITOR_ENERGY`, an `EnergySettings`, or None/False (not an
    energy model's monitor)."""
    if value is True:
        return MONITOR_ENERGY
    if value is None or value is False:
        return None
    if not isinstance(value, EnergySettings):
        raise SettingsError(
            f"{{energy}} must be an EnergySettings, True (its monitor defaults) or None, got {type(value).__name__}",
            ("energy",),
        )
    return value


def check_energy_keywords(energy: Optional[EnergySettings], given: dict[str, Any], evaluation_overrides) -> None:
    """Refuse, before training, an energy model's keywords (train_data, base, exact_log_z) on a monitor that is not
    an energy model's, the evaluation's keyword settings on one that is (its settings are all in `energy`), and
    both train_data and base."""
    named = [name for name in ENERGY_KEYWORDS if given.get(name) is not None]
    if energy is None:
        if named:
            raise SettingsError(
                f"{', '.join(named)} {'applies' if len(named) == 1 else 'apply'} to an energy model's monitor: pass "
                "energy=True (or energy=EnergySettings(...)) too"
            )
        return
    if evaluation_overrides:
        raise SettingsError(
            f"{', '.join(sorted(evaluation_overrides))}: an energy model's monitor takes its evaluation's settings in "
            "{energy} (an EnergySettings: steps, ais_chains, raise_chains, kernel, num_leapfrog, pilot_steps, seed, "
            "tolerance), not as keywords"
        )
    if given.get("train_data") is not None and given.get("base") is not None:
        raise SettingsError("give train_data (to fit the base to) or base, not both")
    exact_log_z = given.get("exact_log_z")
    if exact_log_z is not None and not callable(exact_log_z):
        raise TypeError(f"exact_log_z must be a callable exact_log_z(model) -> float, got {type(exact_log_z).__name__}")


def energy_exact(model, report, exact_log_z: Optional[Callable[[Any], float]]):
    """(the exact average test log-likelihood, the exact log Z), or (None, None) where neither is known: from the
    user's `exact_log_z(model)` (None: not known for this model; anything but one finite number is refused), else
    by enumeration on a discrete support of at most 2^EXACT_UNITS configurations. The average log f(v) is the
    report's: upper = log f(v) - log Z-hat."""
    log_z = None
    if exact_log_z is not None:
        given = exact_log_z(model)
        try:
            log_z = float(given)
        except (TypeError, ValueError, RuntimeError):
            log_z = None
        if given is None:
            return None, None  # not known for this model: the record's exact is None
        if log_z is None or not math.isfinite(log_z):
            shown = repr(given) if log_z is None else repr(log_z)
            raise ValueError(f"exact_log_z(model) must return one finite number (the model's log Z), got "
                             f"{shown[:80]}: fix the function given as exact_log_z, or leave it out")  # fmt: skip
    elif model.support.discrete:
        if exact_energy.configuration_units(model) <= EXACT_UNITS:
            log_z = exact_energy.log_partition(model, max_units=EXACT_UNITS)
    if log_z is None:
        return None, None
    mean_log_f = float(report.upper.double().mean()) + report.log_z
    return mean_log_f - log_z, log_z


def shared_settings(energy: EnergySettings) -> dict[str, Any]:
    """The fields of `energy` that a certified run's `EvaluateSettings` carry (the first K, the chains, the seed)."""
    return {name: getattr(energy, name) for name in ("steps", "ais_chains", "raise_chains", "seed")}


def certify_keywords(energy: EnergySettings) -> dict[str, Any]:
    """The fields of `energy` only an energy model has, as `certify`'s keywords."""
    return {name: getattr(energy, name) for name in ("kernel", "num_leapfrog", "pilot_steps")}


def energy_record(epoch: int, report, exact: Optional[float], log_z_exact: Optional[float],
                  verdict: Optional[str] = None) -> SandwichRecord:  # fmt: skip
    """The `SandwichRecord` of an `EnergyReport`: AIS's side log f(v) - log Z-hat (its standard error log Z-hat's, as
    a Boltzmann machine's record has it), RAISE's average over the test vectors and its standard error."""
    return SandwichRecord(
        epoch=int(epoch), ais=float(report.upper_mean), ais_se=float(report.log_z_stderr),
        raise_=float(report.lower_mean), raise_se=float(report.lower_stderr), gap=float(report.gap), exact=exact,
        log_z=float(report.log_z), log_z_exact=log_z_exact, seconds=float(report.total_seconds),
        warnings=tuple(w.code for w in report.warnings), verdict=verdict,
    )  # fmt: skip


def energy_plot_title(energy: EnergySettings) -> str:
    return (
        f"K = {energy.steps} (linear), {energy.ais_chains} AIS chains, RAISE from every test vector x "
        f"{energy.raise_chains}, kernel {energy.kernel}, seed {energy.seed}"
    )


def energy_test_data(test_data) -> Tensor:
    """An energy model's test examples as a tensor (checked against the model's support at each evaluation)."""
    import torch

    data = torch.as_tensor(test_data)
    if data.dim() < 2 or data.shape[0] == 0:
        raise ValueError(f"test data must be shaped (N, *event_shape) with N >= 1, got {tuple(data.shape)}")
    return data
