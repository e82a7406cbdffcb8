"""One evaluation of a user's energy model (`EnergyModel`): `evaluate_energy(model, test_data, ...)`, which
`raise_eval.evaluate` runs for a model of the 'energy' family.

AIS estimates log Z (its estimate is a stochastic lower bound, so log f(v) - log Z-hat is a stochastic upper bound on
log p(v)); RAISE, from each test vector itself, a stochastic lower bound on log p_ann(v). The report gives both
averages over the test vectors, their gap and its standard error, the kernels' mean acceptance rates and the
seconds. On real support HMC's (or MALA's) step sizes are tuned first in a pilot run with its own random stream and
then frozen. The streams, declared in `raise_eval.seeds.ENERGY_OFFSETS`: pilot (seed), AIS (seed + 1), RAISE
(seed + 2), the probe of the energy's tails (seed + 3) and the AIS of the probe of a fitted base (seed + 4; its pilot
takes the pilot's stream).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import weakref
from collections.abc import Collection
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.annealing import NonFiniteLogWeightError
from raise_eval.diagnostics import GAP_NATS, SandwichNumbers, diagnose
from raise_eval.estimators.ais import AISResult, ais
from raise_eval.estimators.control_variates import control_variate_mean
from raise_eval.estimators.raise_ import RAISEResult, raise_log_likelihood
from raise_eval.evaluation.energy_checks import (
    PROBE_CHAINS,
    PROBE_STEPS,
    DriftWatch,
    base_probe_warning,
    data_distance,
    improper_warning,
    non_finite_warning,
    tail_warning,
    watches_drift,
)
from raise_eval.evaluation.energy_resume import (
    StageCheckpoint,
    base_digest,
    energy_resume_settings,
    open_store,
)
from raise_eval.exact import energy as exact_energy
from raise_eval.kernels.energy_hmc import EnergyHMCKernel, tune_step_sizes
from raise_eval.kernels.energy_sites import GibbsWithGradientsKernel, MetropolisScanKernel
from raise_eval.kernels.hmc import StepSizeSchedule
from raise_eval.models.contracts import declared_family
from raise_eval.models.energy import default_base, describe_default_base, fit_base
from raise_eval.models.energy_check import check_energy_dtype
from raise_eval.paths.energy import EnergyPath
from raise_eval.runtime.interrupts import deferred_interrupts
from raise_eval.runtime.resume import DEFAULT_INTERVAL, model_digest
from raise_eval.runtime.threads import Threads, using_threads
from raise_eval.schedules import linear_schedule
from raise_eval.seeds import ENERGY_OFFSETS, stage_seed
from raise_eval.settings import SettingsError, render_names, setting, settings_class
from raise_eval.stats import mean_and_stderr

KERNELS = {"real": ("hmc", "mala"), "discrete": ("metropolis", "gibbs-with-gradients")}
# A discrete energy of at most 2^EXACT_UNITS configurations gets its exact log Z and test log-likelihood beside the
# estimates (about a second for an MLP energy on a CPU), and the verdict checks the sandwich against them.
EXACT_UNITS = 16
TUNED_KERNELS = KERNELS["real"]  # the kernels whose step sizes a pilot tunes


KERNEL_CHOICES = ("auto", *KERNELS["real"], *KERNELS["discrete"])
ENERGY_GROUP = "your own energy (--model)"


@settings_class
class EnergySettings:
    """The settings of an energy model's evaluation, checked when built (a SettingsError, a ValueError, naming the
    field); `replace(**changes)` gives a checked copy.

    steps: annealing steps K of AIS and RAISE (a linear schedule); ais_chains: AIS chains; raise_chains: RAISE
    chains per test vector; kernel: 'auto' (HMC on real support, the Metropolis scan on discrete), 'hmc', 'mala',
    'metropolis' or 'gibbs-with-gradients'; num_leapfrog: HMC's leapfrog steps; pilot_steps: the step-size pilot's
    temperatures at most; seed: the random streams' seed; tolerance: the verdict's tolerance in nats (closed when
    AIS - RAISE is within it, with small standard errors and no warning that undermines either side: the conditions
    of a certified evaluation, `raise_eval.certification.verdict`).
    The command line's `evaluate --model` takes kernel, num_leapfrog and pilot_steps from these declarations
    (--kernel, --leapfrog, --pilot-steps); the others from `EvaluateSettings`' options of the same names.
    """

    steps: int = setting(1000, "annealing steps K of AIS and RAISE", kind="count", numbers="result", least=1)
    ais_chains: int = setting(100, "AIS chains", kind="count", numbers="result", least=1)
    raise_chains: int = setting(10, "RAISE chains per test vector", kind="count", numbers="result", least=1)
    kernel: str = setting(
        "auto", "the transition kernel: auto is HMC on real support and the palindromic Metropolis scan on discrete "
        "support; mala (HMC with one leapfrog step) on real support; gibbs-with-gradients (Grathwohl et al. 2021) "
        "on discrete support", kind="choice", numbers="result", choices=KERNEL_CHOICES, flag="--kernel",
        group=ENERGY_GROUP,
    )  # fmt: skip
    num_leapfrog: int = setting(
        10, "HMC's leapfrog steps per transition (each a forward and backward pass of the energy)", kind="count",
        numbers="result", least=1, flag="--leapfrog", metavar="L", group=ENERGY_GROUP,
    )  # fmt: skip
    pilot_steps: int = setting(
        200, "HMC's and MALA's step-size pilot: the most inverse temperatures at which it tunes the step sizes (a "
        "short run before AIS and RAISE)", kind="count", numbers="result", least=1, flag="--pilot-steps", metavar="N",
        group=ENERGY_GROUP,
    )  # fmt: skip
    seed: int = setting(0, "the random streams' seed", kind="seed", numbers="result")
    tolerance: float = setting(
        GAP_NATS, "the verdict's tolerance in nats", kind="number", numbers="result", least=0, strictly=True
    )


@dataclasses.dataclass(frozen=True)
class KIndependent:
    """What an energy evaluation finds that does not depend on K, so that a certified run
    (`certification.energy.EnergyRuns`) computes it once and hands it to each larger K: the probe of a fitted base
    (what it found, `EnergyReport.data['probe']`, or the note saying why it stopped) and the exact log Z of an
    enumerable discrete energy. `model` (a weak reference) and `key` (`k_independent_key`) name what it belongs to:
    an evaluation given one of another model object, parameters, kernel, seed or source of base refuses it."""

    model: weakref.ref
    key: tuple
    probe: Optional[dict] = None
    probe_note: Optional[str] = None
    exact_log_z: Optional[float] = None

    def belongs_to(self, model, key: tuple) -> bool:
        return self.model is not None and self.model() is model and self.key == key

    def __getstate__(self) -> dict:
        """Picklable (with its report): the weak reference is left out, so an unpickled one belongs to no model."""
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, "model": None}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)


def k_independent_key(model, kind: str, settings: EnergySettings, base: str) -> tuple:
    """What the K-independent parts depend on besides the model object itself: its parameters, dtype and device, the
    kernel and its pilot (the probe's), the seed, and the base (`energy_resume.base_digest`: the probe runs for a
    fitted one, against that base's run). Not the energy's values: an energy repeatable only to rounding (as
    `check_energy` allows) must not tell two evaluations of one model apart."""
    return (model_digest(model), str(model.dtype), str(model.device), kind, settings.num_leapfrog,
            settings.pilot_steps, settings.seed, base)  # fmt: skip


@dataclasses.dataclass
class EnergyReport:
    """What `evaluate_energy` found (data; `to_dict()` is its JSON document, `format_table()` its table, drawn by
    `raise_eval.render.energy`).

    log_z, log_z_stderr, ais_ess: AIS's estimate of log Z, its delta-method standard error, its weights' ESS.
    upper: log f(v) - log Z-hat per test vector (N,); lower: RAISE's estimate per test vector (N,).
    upper_mean, lower_mean: the average test log-likelihood by AIS (log f(v) - log Z-hat, optimistic) and by RAISE
    (conservative); their standard errors are the estimators' noise on this test set, as a Boltzmann machine's:
    upper_stderr AIS's of log Z (log f(v) is exact), lower_stderr RAISE's with the control variate log f(v)
    (alpha = 1, `estimators.control_variates`: sd(lower - log f(v)) / sqrt(N), so the test vectors' own spread of
    log f(v), which no number of chains shrinks, is left out); upper_plain_stderr, lower_plain_stderr: the plain
    standard errors over the test vectors (that spread included: how much another test set's average would differ).
    gap: upper_mean - lower_mean, gap_stderr: its standard error (the test vectors' paired differences, which equal
    RAISE's control-variate ones, and AIS's own, added in quadrature; NaN for one test vector, as RAISE's).
    acceptance: mean acceptance rate of the AIS and RAISE passes; seconds: per stage.
    warnings: what a careful reader would say of these numbers (`raise_eval.diagnostics.diagnose`, as for a
    Boltzmann machine: AIS's ESS, a gap beyond the noise, RAISE above AIS, log Z below the test set's own mass; and
    an improper energy, `evaluation.energy_checks`).
    verdict: 'closed' or 'open' at settings['tolerance'], by the functions of a certified evaluation
    (`certification.verdict.closure_reasons`); interval: [low, high] where closed (`sandwich_interval`: ±2 standard
    errors), else None; reasons: why it is open (settings named as `{field}`).
    data: what was evaluated: test (the number of test vectors), train (training vectors the base was fitted to, or
    None), base ('fitted', 'given', "the model's" or 'default'), test_file / train_file (set by the command line).
    total_seconds: the whole evaluation's wall time.
    exact_log_z, exact_mean: a discrete energy of at most 2^EXACT_UNITS configurations: log Z by enumeration and the
    exact average test log-likelihood (seconds['exact'] their time); None elsewhere.
    """

    model: str
    settings: dict
    kernel: str
    log_z: float
    log_z_stderr: float
    ais_ess: float
    upper: Tensor
    lower: Tensor
    upper_mean: float
    upper_stderr: float
    lower_mean: float
    lower_stderr: float
    gap: float
    gap_stderr: float
    acceptance: dict
    seconds: dict
    upper_plain_stderr: float = math.nan
    lower_plain_stderr: float = math.nan
    warnings: list = dataclasses.field(default_factory=list)
    verdict: str = "open"
    interval: Optional[list] = None
    reasons: list = dataclasses.field(default_factory=list)
    data: dict = dataclasses.field(default_factory=dict)
    total_seconds: float = math.nan
    notes: list = dataclasses.field(default_factory=list)
    cost_estimate: Any = None  # what the run was predicted to cost (`evaluation.energy_cost`), if asked
    exact_log_z: Optional[float] = None
    exact_mean: Optional[float] = None
    k_independent: Optional[KIndependent] = None  # for a larger K of a certified run; not in the JSON

    def to_dict(self, names: Optional[dict] = None) -> dict:
        """The JSON document (`names`: the command's flags, for the warnings' and reasons' settings)."""
        estimate = self.cost_estimate
        out = {"complete": True, **dataclasses.asdict(dataclasses.replace(self, cost_estimate=None,
                                                                             k_independent=None))}
        del out["k_independent"]
        out["cost_estimate"] = None if estimate is None else estimate.to_dict(names)
        out["upper"], out["lower"] = self.upper.tolist(), self.lower.tolist()
        out["warnings"] = [w.to_dict(energy_names(names)) for w in self.warnings]
        out["reasons"] = [render_names(r, energy_names(names)) for r in self.reasons]
        return out

    def format_table(self, names: Optional[dict] = None) -> str:
        from raise_eval.render.energy import energy_table

        return energy_table(self, energy_names(names))


@dataclasses.dataclass
class EnergyPartial:
    """What an interrupted `evaluate_energy` finished (data; `to_dict()` its JSON document, marked incomplete;
    `format_table()` its table): the model, settings, kernel and data as an `EnergyReport` names them, the stage it
    was in (`interrupted`), AIS's log Z, its standard error and ESS where AIS finished (else None), and the seconds
    of the stages that finished."""

    model: str
    settings: dict
    kernel: str
    interrupted: str
    data: dict
    seconds: dict
    log_z: Optional[float] = None
    log_z_stderr: Optional[float] = None
    ais_ess: Optional[float] = None
    total_seconds: float = math.nan

    def to_dict(self, names: Optional[dict] = None) -> dict:
        out = dataclasses.asdict(self)
        return {"complete": False, "interrupted_during": out.pop("interrupted"), **out}

    def format_table(self, names: Optional[dict] = None) -> str:
        from raise_eval.render.energy import energy_partial_table

        return energy_partial_table(self)


class EnergyInterrupted(KeyboardInterrupt):
    """Ctrl-C during `evaluate_energy`: `stage` is where ('the pilot', 'AIS', 'the base probe' or 'RAISE'); with a
    resume file, the finished stages and the annealing state of this one are kept in it (`saved`: whether anything
    was); `partial` (an `EnergyPartial`) holds what finished, for the table and the JSON."""

    def __init__(self, stage: str, saved: bool, partial: Optional[EnergyPartial] = None):
        super().__init__(f"interrupted during {stage}")
        self.stage, self.saved, self.partial = stage, saved, partial


def energy_names(names: Optional[dict]) -> dict:
    """`names` (the command's flags, or None: the fields' names) with what a certified verdict's reasons call
    `{raise_examples}` said as it is for an energy model: RAISE runs from every test vector."""
    return {"train_data": "train_data", **(names or {}), "raise_examples": "more test vectors"}


@dataclasses.dataclass(frozen=True)
class _Sandwich:
    """What `certification.verdict` reads of a report, from an energy evaluation's numbers: `ais.stderr` is AIS's
    standard error of log Z (as an `EvaluationReport`'s), `raise_stderr` RAISE's with the control variate log f(v)."""

    ais: Any
    ais_mean: float
    raise_mean: float
    raise_stderr: float
    gap: float
    warnings: list
    exact_mean: Optional[float] = None


class _Recording:
    """A kernel whose calls record its mean acceptance and its share of proposals rejected for a non-finite log
    acceptance (info 'non_finite', where the kernel gives it) (an `InfoKernel` run as a plain transition). The sums
    stay on the kernel's device: no host-device synchronisation per annealing step, one when `mean` is read. `live`
    holds the running totals (what a resume file's save keeps, `energy_resume.StageCheckpoint`); `load` restores
    them."""

    def __init__(self, kernel, watch=None):
        self.kernel, self.total, self.count, self.watch = kernel, None, 0, watch
        self.non_finite_total: Optional[Tensor] = None
        self.live: dict[str, Any] = {}

    def __call__(self, state, beta: float, generator: torch.Generator):
        state, info = self.kernel.step(state, beta, generator)
        step_mean = info["acceptance"].double().mean()
        self.total = step_mean if self.total is None else self.total.add_(step_mean)
        non_finite = info.get("non_finite")
        if non_finite is not None:
            share = non_finite.double().mean()
            self.non_finite_total = share if self.non_finite_total is None else self.non_finite_total.add_(share)
        self.count += 1
        if self.watch is not None:
            self.watch(self.count, state)
        self.live.update(self.record())
        return state

    def record(self) -> dict[str, Any]:
        """The running totals: the acceptance sum (a scalar tensor) and count, the drift watch's distances, the sum of
        the steps' shares of non-finite proposals (a scalar tensor, or None where the kernel reports none)."""
        drift = {} if self.watch is None else {str(f): d for f, d in self.watch.recorded.items()}
        return {"acceptance_total": self.total, "acceptance_count": self.count, "drift": drift,
                "non_finite_total": self.non_finite_total}

    def load(self, totals: dict[str, Any]) -> None:
        total = totals.get("acceptance_total")
        self.total = None if total is None else total.to(torch.float64).clone()
        self.count = int(totals.get("acceptance_count", 0))
        non_finite = totals.get("non_finite_total")
        self.non_finite_total = None if non_finite is None else non_finite.to(torch.float64).clone()
        if self.watch is not None:
            self.watch.recorded = {float(f): d for f, d in totals.get("drift", {}).items()}

    @property
    def mean(self) -> float:
        return float(self.total) / self.count if self.count else math.nan

    @property
    def non_finite_share(self) -> float:
        """The mean share of proposals rejected for a non-finite log acceptance (0 where none, or not reported)."""
        return float(self.non_finite_total) / self.count if self.count and self.non_finite_total is not None else 0.0


def evaluate_energy(
    model,
    test_data: Tensor,
    settings: Optional[EnergySettings] = None,
    *,
    threads: Threads = None,
    **keywords,
) -> EnergyReport:
    """AIS and RAISE on an `EnergyModel` (`_evaluate_energy`'s arguments), with torch's thread count `threads` for
    the call ('auto': the idle cores; None, the default: the caller's), the caller's restored on return."""
    with using_threads(threads) if threads is not None else contextlib.nullcontext():
        return _evaluate_energy(model, test_data, settings, **keywords)


def _evaluate_energy(
    model,
    test_data: Tensor,
    settings: Optional[EnergySettings] = None,
    *,
    train_data: Optional[Tensor] = None,
    base: Any = None,
    progress: bool = False,
    resume_file: Optional[str] = None,
    resume_interval: float = DEFAULT_INTERVAL,
    cost_estimate: Any = None,
    known: Optional[KIndependent] = None,
    **overrides,
) -> EnergyReport:
    """AIS and RAISE on an `EnergyModel` (see the module docstring).

    Args:
        model: the `EnergyModel`.
        test_data: test vectors (N, *event_shape) in the model's convention.
        settings: an `EnergySettings`; keyword `overrides` change its fields (`steps=4000`).
        train_data: training vectors to fit the base to (`fit_base`); else `base`, the model's own or the default.
        base: a `GaussianBase` / `SiteBase` (not with train_data).
        resume_file: keep the pilot's step sizes, each finished stage and the annealing state of the stage in
            progress (every `resume_interval` seconds, and at Ctrl-C) in this file, and continue from what it holds
            with the bits of an uninterrupted run (`evaluation.energy_resume`); refused when written with other
            settings.
        cost_estimate: the run's predicted cost (`evaluation.energy_cost.estimate_energy_cost`), kept in the report.
        known: an earlier report's `k_independent` (the same model, kernel and seed at another K): its base probe and
            exact log Z are taken instead of computed again (the same numbers: neither depends on K).

    Raises `EnergyInterrupted` at Ctrl-C (after saving, with a resume file).
    """
    began = time.perf_counter()
    if declared_family(model) != "energy":
        raise TypeError(f"evaluate_energy takes an EnergyModel, got a {type(model).__name__}")
    check_energy_dtype(model)
    names = [f.name for f in dataclasses.fields(EnergySettings)]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ValueError(f"an energy model's evaluation has no setting {', '.join(unknown)} (its settings: "
                         f"{', '.join(names)}, and train_data, base, progress, threads)")  # fmt: skip
    if settings is not None and not isinstance(settings, EnergySettings):
        raise TypeError(f"settings of an energy model's evaluation are EnergySettings, got {type(settings).__name__}")
    settings = dataclasses.replace(settings or EnergySettings(), **overrides)
    check_base_source(model, train_data, base)
    test = model.state_from_data(test_data, "test_data")
    if test.dim() != 1 + len(model.event_shape) or test.shape[0] == 0:
        raise ValueError(f"test_data must be shaped (N, {', '.join(map(str, model.event_shape))}) with N >= 1, got "
                         f"{tuple(test_data.shape)}")  # fmt: skip
    kind = kernel_kind(model, settings.kernel)
    check_kernel_options(kind, settings)
    data = {"test": int(test.shape[0]), "train": None if train_data is None else int(train_data.shape[0]),
            "base": "fitted" if train_data is not None else "given" if base is not None else
            "the model's" if model.base is not None else "default"}  # fmt: skip
    digest = base_digest(model, train_data, base)  # hashes the training data: once, for the key and the resume file
    key = k_independent_key(model, kind, settings, digest)
    if known is not None and not known.belongs_to(model, key):
        raise ValueError("known (the K-independent parts of an earlier evaluation) belongs to another model, "
                         "kernel, seed or base: pass the k_independent of a report of this model object with these "
                         "settings and this base, or None")  # fmt: skip
    if data["base"] == "default":  # which of default_base's three it is, for the table's data row
        data["default_base"] = describe_default_base(model)
    store = None
    if resume_file is not None:  # refused now (other settings), before any work
        store = open_store(resume_file, energy_resume_settings(model, test, settings, digest), resume_interval)
    if train_data is not None:
        base = fit_base(model, train_data)
    path = EnergyPath(model, base)
    # the energy's tails, probed before any estimate (a few energy evaluations): an improper energy is named at any K
    tail = tail_warning(model, path.base, _generator(model, settings.seed, "tail"))
    betas = linear_schedule(settings.steps)
    seconds = {}
    stage = "the pilot"
    missed = probe_note = None  # the probe of a fitted base: its warning and note, where it runs
    forward = None
    try:
        with deferred_interrupts() if store is not None else contextlib.nullcontext():
            start = time.perf_counter()
            kernel = _kernel(path, kind, betas, settings, progress, store)
            if kind in TUNED_KERNELS:  # the discrete kernels have no pilot: no "pilot 0.0 s" in the report
                seconds["pilot"] = time.perf_counter() - start
            drift = DriftWatch(path.base, settings.steps) if watches_drift(model, path.base) else None
            recorders = {"AIS": _Recording(kernel, drift), "RAISE": _Recording(kernel)}
            stage = "AIS"
            start = time.perf_counter()
            forward = _ais_stage(path, betas, settings, recorders["AIS"], store, progress)
            seconds["AIS"] = time.perf_counter() - start
            if data["base"] == "fitted" and known is not None:  # the probe does not depend on K: found once
                probe_note, data["probe"] = known.probe_note, known.probe
                if known.probe is not None:
                    missed = _probe_warning(model, forward, known.probe)
            elif data["base"] == "fitted":  # does the fitted base miss a part of the model that a broad one finds?
                stage = "the base probe"
                start = time.perf_counter()
                missed, probe_note, data["probe"] = _base_probe(model, kind, settings, forward)
                seconds["probe"] = time.perf_counter() - start
            stage = "RAISE"
            start = time.perf_counter()
            reverse = _raise_stage(path, test_data, betas, settings, recorders["RAISE"], store, progress)
            seconds["RAISE"] = time.perf_counter() - start
    except NonFiniteLogWeightError as error:  # say where an energy's NaN comes from: states beyond the data
        base_words = {"fitted": "the Gaussian fitted to the training data", "default": data.get("default_base"),
                      "given": "the base you gave", "the model's": "the model's base"}[data["base"]]  # fmt: skip
        fix = ("make it finite at every configuration" if model.support.discrete else "make it finite everywhere"
               if model.support.bounded else "make it finite everywhere, or bound the support with a box")
        hint = (f"the energy was NaN (or -inf) at states the chains reached: the base's draws ({base_words}) and the "
                "annealing's states go beyond the data, where the energy must be finite too; evaluate it on draws "
                f"of that base to find where, and {fix}")  # fmt: skip
        raise NonFiniteLogWeightError(error.stage, error.detail, hint, error.steps, error.num_steps) from error
    except KeyboardInterrupt:
        saved = store is not None and not store.discard and store.path.exists()
        partial = EnergyPartial(
            model=model.describe(), settings=_report_settings(model, settings, kind), kernel=kind, interrupted=stage,
            data=data, seconds=seconds, total_seconds=time.perf_counter() - began,
            **({} if forward is None else {"log_z": float(forward.estimate), "log_z_stderr": float(forward.stderr),
                                           "ais_ess": float(forward.ess)}),
        )  # fmt: skip
        raise EnergyInterrupted(stage, saved, partial) from None
    notes = [] if probe_note is None else [probe_note]
    if store is not None and store.continued:
        notes.append(f"continued from {resume_file}: {'; '.join(store.continued)} (the times shown are this "
                     "invocation's)")  # fmt: skip
        notes += [f"resumed with {change}: the continued run is bit-identical only where these agree"
                  for change in store.context_changes]  # fmt: skip
    upper = reverse.log_unnormalized - forward.log_normalizer
    lower = reverse.log_likelihood
    exact_log_z = exact_mean = None
    if known is not None and known.exact_log_z is not None:
        exact_log_z = known.exact_log_z
        exact_mean = float((reverse.log_unnormalized - exact_log_z).mean())
    elif model.support.discrete and exact_energy.configuration_units(model) <= EXACT_UNITS:
        start = time.perf_counter()
        exact_log_z = exact_energy.log_partition(model, max_units=EXACT_UNITS)
        exact_mean = float((reverse.log_unnormalized - exact_log_z).mean())
        seconds["exact"] = time.perf_counter() - start
    upper_mean, upper_se = mean_and_stderr(upper)
    gap_mean = mean_and_stderr(upper - lower)[0]
    ais_se = float(forward.stderr)
    # RAISE's standard error as a Boltzmann machine's: with the control variate log f(v) (alpha = 1), over every test
    # vector (RAISE ran from each): the estimators' noise, not the test vectors' spread, which more chains cannot
    # shrink and which would hold the verdict open however good the estimates. The gap's paired differences are the
    # same numbers less log Z-hat (upper - lower = log f(v) - RAISE - log Z-hat), so its standard error adds AIS's.
    raise_se = control_variate_mean(lower, reverse.log_unnormalized, reverse.log_unnormalized).stderr
    numbers = SandwichNumbers(
        ais_mean=upper_mean, ais_stderr=ais_se, ais_ess=float(forward.ess),
        ais_chains=settings.ais_chains, ais_lower=float(forward.lower), raise_mean=reverse.mean,
        raise_stderr=raise_se, log_z=forward.estimate, num_test=int(upper.numel()),
        log_test_mass=_log_test_mass(model, test, reverse.log_unnormalized), exact_mean=exact_mean,
    )  # fmt: skip
    warnings = diagnose(numbers, init="base-rates")
    improper = tail
    if improper is None and drift is not None:
        improper = improper_warning(drift.distances, data_distance(path.base, test))
    # First: it says why the other warnings' advice (a larger K) cannot help.
    warnings = warnings if improper is None else [improper, *warnings]
    non_finite = non_finite_warning({stage: r.non_finite_share for stage, r in recorders.items()})
    warnings += [] if non_finite is None else [non_finite]
    warnings += [] if missed is None else [missed]
    sandwich = _Sandwich(ais=forward, ais_mean=upper_mean, raise_mean=reverse.mean, raise_stderr=raise_se,
                         gap=gap_mean, warnings=warnings, exact_mean=exact_mean)  # fmt: skip
    # Imported here: raise_eval.certification's package imports this one (through evaluation.run), so a module-level
    # import would run certification/__init__ while this module is half made.
    from raise_eval.certification.verdict import closure_reasons, sandwich_interval

    reasons = closure_reasons(sandwich, settings.tolerance)
    return EnergyReport(
        model=model.describe(), settings=_report_settings(model, settings, kind), kernel=kind,
        log_z=forward.estimate,
        log_z_stderr=ais_se, ais_ess=float(forward.ess), upper=upper, lower=lower, upper_mean=upper_mean,
        upper_stderr=ais_se, lower_mean=reverse.mean, lower_stderr=raise_se, gap=gap_mean,
        gap_stderr=math.hypot(raise_se, ais_se), acceptance={k: r.mean for k, r in recorders.items()}, seconds=seconds,
        upper_plain_stderr=_with(upper_se, ais_se), lower_plain_stderr=reverse.stderr,
        warnings=warnings, verdict="open" if reasons else "closed",
        interval=None if reasons else list(sandwich_interval(sandwich)), reasons=reasons, data=data,
        total_seconds=time.perf_counter() - began, notes=notes, cost_estimate=cost_estimate, exact_log_z=exact_log_z,
        exact_mean=exact_mean, k_independent=KIndependent(weakref.ref(model), key, data.get("probe"), probe_note,
                                                              exact_log_z),
    )  # fmt: skip


def _report_settings(model, settings: EnergySettings, kind: str) -> dict:
    """The settings a report keeps: the fields (None for those the kernel `kind` does not read: num_leapfrog but
    for HMC, pilot_steps but for HMC and MALA), and what the numbers were computed with (dtype, device, threads)."""
    fields = dataclasses.asdict(settings)
    if kind != "hmc":
        fields["num_leapfrog"] = None
    if kind not in TUNED_KERNELS:
        fields["pilot_steps"] = None
    return {**fields, "dtype": str(model.dtype).replace("torch.", ""), "device": str(model.device),
            "threads": torch.get_num_threads()}  # fmt: skip


def _ais_stage(path, betas: Tensor, settings: EnergySettings, recorder: _Recording, store, progress: bool):
    """AIS (its `AISResult`), read back from `store` when it finished there, else run (continued from a saved
    step when `store` holds one) and kept in it."""
    generator = _generator(path.model, settings.seed, "ais")
    done = None if store is None else store.shards("ais").get(0)
    if done is not None:
        store.note_read_back("AIS", 1, 1)
        recorder.load(done)
        log_w = done["log_weights"].to(path.model.device)
        return AISResult.from_log_weights(log_w, settings.steps, time.perf_counter())
    checkpoint = None if store is None else StageCheckpoint(store, "ais", generator, recorder)
    forward = ais(path, betas, settings.ais_chains, generator=generator, kernel=recorder, progress=progress,
                  checkpoint=checkpoint)  # fmt: skip
    if store is not None:
        store.save_shard("ais", 0, {"log_weights": forward.log_weights, **recorder.record()})
    return forward


def _base_probe(model, kind: str, settings: EnergySettings, forward: AISResult):
    """(the 'base-misses-mass' warning or None, a note or None, what the probe found or None: log Z, its standard
    error and ESS, for the report's data) (`energy_checks.base_probe_warning`; the note where the probe stopped on
    non-finite log-weights, which leaves the run's numbers alone): a short AIS (PROBE_STEPS steps, PROBE_CHAINS
    chains, the run's kernel with its own pilot, the AIS on its own random stream) from the broad default base,
    against this run's log Z from the fitted base."""
    probe_path = EnergyPath(model, default_base(model))
    probe = settings.replace(steps=PROBE_STEPS, ais_chains=PROBE_CHAINS, pilot_steps=min(settings.pilot_steps,
                                                                                          PROBE_STEPS))  # fmt: skip
    betas = linear_schedule(probe.steps)
    try:
        kernel = _kernel(probe_path, kind, betas, probe, progress=False)
        result = ais(probe_path, betas, probe.ais_chains, generator=_generator(model, settings.seed, "probe"),
                     kernel=kernel)  # fmt: skip
    except NonFiniteLogWeightError as e:  # the energy is NaN where the broad base puts chains: no probe, said so
        return None, f"the probe of the fitted base (AIS from the broad default base) stopped: {e}", None
    found = {"log_z": float(result.estimate), "log_z_stderr": float(result.stderr), "ess": float(result.ess),
             "chains": PROBE_CHAINS, "steps": PROBE_STEPS}  # fmt: skip
    return _probe_warning(model, forward, found), None, found


def _probe_warning(model, forward: AISResult, found: dict):
    """The 'base-misses-mass' warning or None: what the probe `found` against this run's log Z (`forward`)."""
    return base_probe_warning(float(forward.estimate), float(forward.stderr), found["log_z"], found["log_z_stderr"],
                              found["ess"], describe_default_base(model), model.support)  # fmt: skip


def _raise_stage(path, test_data, betas: Tensor, settings: EnergySettings, recorder: _Recording, store,
                 progress: bool):  # fmt: skip
    """RAISE (its `RAISEResult`), as `_ais_stage` runs AIS."""
    generator = _generator(path.model, settings.seed, "raise")
    done = None if store is None else store.shards("raise").get(0)
    if done is not None:
        store.note_read_back("RAISE", 1, 1)
        recorder.load(done)
        device = path.model.device
        return RAISEResult.from_log_weights(done["log_weights"].to(device), done["log_unnormalized"].to(device),
                                            settings.steps, time.perf_counter(), "test vector")  # fmt: skip
    checkpoint = None if store is None else StageCheckpoint(store, "raise", generator, recorder)
    reverse = raise_log_likelihood(path, test_data, betas, settings.raise_chains, generator=generator,
                                   kernel=recorder, progress=progress, checkpoint=checkpoint)  # fmt: skip
    if store is not None:
        record = {"log_weights": reverse.log_weights, "log_unnormalized": reverse.log_unnormalized}
        store.save_shard("raise", 0, {**record, **recorder.record()})
    return reverse


def _log_test_mass(model, test: Tensor, log_f: Tensor) -> Optional[float]:
    """log of the summed f(v) over the distinct test vectors (test: states (N, ...), log_f: (N,)), a floor for
    log Z where v is discrete (a probability: Z is at least that sum); None on real support (f is a density)."""
    if not model.support.discrete:
        return None
    _, inverse = torch.unique(test.reshape(test.shape[0], -1), dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), test.shape[0], dtype=torch.long, device=inverse.device)
    first.scatter_reduce_(0, inverse, torch.arange(test.shape[0], device=inverse.device), reduce="amin")
    return float(torch.logsumexp(log_f.to(torch.float64)[first], 0))


def _with(se: float, ais_se: float) -> float:
    """A standard error over the test vectors and AIS's (shared by every vector), added in quadrature (one test
    vector: AIS's alone)."""
    return math.sqrt((0.0 if math.isnan(se) else se) ** 2 + ais_se**2)


def check_base_source(model, train_data, base) -> None:
    """Refuse two sources for the base (a SettingsError naming `{train_data}`): train_data and base, or train_data
    for a model that carries its own base (`EnergyModel(..., base=...)`), which the fitted one would replace without a
    word (a new user's base, chosen to cover a mode the training data miss, was dropped so)."""
    if train_data is not None and base is not None:
        raise SettingsError("give {train_data} (to fit the base to) or base, not both", ("train_data",))
    if train_data is not None and model.base is not None:
        raise SettingsError(
            "this model carries its own base (EnergyModel(..., base=...)), which a base fitted to {train_data} would "
            "replace: drop {train_data} to anneal from the model's base, or drop the model's base to fit one to the "
            "data",
            ("train_data",),
        )


def check_kernel_options(kind: str, settings: EnergySettings, given: Collection[str] = ()) -> None:
    """Refuse (a SettingsError naming the field) a kernel option set away from its default, or named in `given` (the
    command line's flags given, whatever their value), that the kernel `kind` (as `kernel_kind` resolved it) does not
    read: the user meant it to change the run, and it would not."""
    defaults = {f.name: f.default for f in dataclasses.fields(EnergySettings)}

    def chosen(name: str) -> bool:
        return name in given or getattr(settings, name) != defaults[name]

    if kind != "hmc" and chosen("num_leapfrog"):
        why = "MALA is HMC with one leapfrog step" if kind == "mala" else "it makes no leapfrog steps"
        raise SettingsError(f"{{num_leapfrog}} sets HMC's leapfrog steps, and the kernel here is {kind}: {why}; drop "
                            "it", ("num_leapfrog",))  # fmt: skip
    if kind not in TUNED_KERNELS and chosen("pilot_steps"):
        raise SettingsError(f"{{pilot_steps}} sets the step-size pilot of hmc and mala, and the kernel here is {kind}, "
                            "which has no step size to tune: drop it", ("pilot_steps",))  # fmt: skip


def kernel_kind(model, kernel: str) -> str:
    """The kernel an evaluation with `kernel` ('auto' or a kernel's name) runs on `model`'s support."""
    group = "discrete" if model.support.discrete else "real"
    if kernel == "auto":
        return KERNELS[group][0]
    if kernel not in KERNELS[group]:
        raise ValueError(f"kernel {kernel!r} does not apply to {model.support.describe()} support; use one of "
                         f"{', '.join(KERNELS[group])}")  # fmt: skip
    return kernel


def _kernel(path: EnergyPath, kind: str, betas: Tensor, settings: EnergySettings, progress: bool, store=None):
    """The kernel of `kind`; HMC's and MALA's step sizes tuned in the pilot, or read back from `store` (a resume
    file keeps them once tuned)."""
    if kind == "metropolis":
        return MetropolisScanKernel(path)
    if kind == "gibbs-with-gradients":
        return GibbsWithGradientsKernel(path)
    leapfrog = 1 if kind == "mala" else settings.num_leapfrog
    kept = None if store is None else store.get("step_sizes")
    if kept is not None:
        store.continued.append("the pilot's step sizes read back")
        schedule = StepSizeSchedule(kept["betas"], kept["log_step_sizes"].to(path.model.device))
        return EnergyHMCKernel(path, schedule, leapfrog)
    generator = _generator(path.model, settings.seed, "pilot")
    schedule = tune_step_sizes(path, betas, generator=generator, num_leapfrog=leapfrog,
                               max_pilot_steps=settings.pilot_steps, progress=progress)  # fmt: skip
    if store is not None:
        store.put("step_sizes", {"betas": schedule.betas, "log_step_sizes": schedule.log_step_sizes})
    return EnergyHMCKernel(path, schedule, leapfrog)


def _generator(model, seed: int, stream: str) -> torch.Generator:
    """The generator of `stream`'s stage in a run seeded `seed` (`raise_eval.seeds.ENERGY_OFFSETS`)."""
    return torch.Generator(device=model.device).manual_seed(stage_seed(seed, stream, ENERGY_OFFSETS))
