"""Evaluate a Boltzmann-family checkpoint (RBM, DBM or DBN): AIS (optimistic), RAISE (conservative) and, when
tractable, the exact answer.

`evaluate` is the Python API behind `raise-eval evaluate` (`evaluate_rbm` is the same function); it returns an
`EvaluationReport` that prints as a table and serializes to JSON with the keys

    log_z.ais.estimate, log_z.ais.stderr, log_z.exact,
    log_likelihood.ais.mean, log_likelihood.raise.mean, log_likelihood.raise.stderr,
    log_likelihood.exact, log_likelihood.gap, settings, timing.seconds

(null where not applicable, e.g. exact values of large models).

Averages are over the whole test set. AIS gives mean log f(v) - log Z-hat, with log f(v) exact for an RBM and
estimated for a DBM or DBN (importance sampling, itself a stochastic lower bound; or the DBM's mean-field bound).
For a DBN, log Z is the top RBM's. RAISE runs on a random subset of n test vectors (heating for a DBM, unrolling for
a DBN) and is extended to the whole set with the control variate X = log f(v) (RAISE paper, Sec. 4): the headline
is the control-variate mean; the plain subset mean is reported beside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
from torch import Tensor

from raise_eval import distributed
from raise_eval import exact as exact_mod
from raise_eval._version import __version__
from raise_eval.adaptive import DEFAULT_PILOT_CHAINS, DEFAULT_PILOT_GRID, adaptive_pilot
from raise_eval.cost import CostEstimate, check_memory, plan_memory
from raise_eval.datasets import check_binary
from raise_eval.diagnostics import Warning, diagnose
from raise_eval.estimators.ais import AISResult
from raise_eval.estimators.control_variates import ControlVariateEstimate
from raise_eval.estimators.raise_ import RAISEResult
from raise_eval.estimators.unnormalized import _CHUNK_ELEMENTS as LOG_F_CHUNK_ELEMENTS
from raise_eval.estimators.unnormalized import METHODS as LOG_F_ESTIMATORS
from raise_eval.estimators.unnormalized import LogUnnormalizedEstimate, log_unnormalized_estimate
from raise_eval.log_f_check import LOG_F_CHECK_FACTOR, LogFCheck, check_log_f, check_subset
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.paths.boltzmann import BoltzmannPath, data_base_rates, uniform_base
from raise_eval.resume import DEFAULT_INTERVAL as DEFAULT_RESUME_INTERVAL
from raise_eval.resume import (
    ResumeFile,
    check_world_size,
    deferred_interrupts,
    model_digest,
    rank_resume_file,
    tensor_digest,
)
from raise_eval.schedules import SCHEDULES, make_schedule, validate_schedule
from raise_eval.sharding import (
    bytes_per_chain,
    default_max_memory,
    default_shard_size,
    format_size,
    log_f_bytes,
    raise_vectors_per_shard,
    shard_bounds,
    sharded_ais,
    sharded_raise,
)
from raise_eval.threads import Threads, with_threads

INITS = ("base-rates", "uniform")
EXACT_MODES = ("auto", "always", "never")
ALWAYS_EXACT_LIMIT = 30  # 'always' enumerates up to 2^30 states (minutes); beyond that it refuses
EVALUATE_SCHEDULES = (*SCHEDULES, "adaptive")  # 'adaptive' needs the model (a pilot run), so only evaluate has it
DEFAULT_STEPS = 1000
LOG_F_METHODS = ("auto", *LOG_F_ESTIMATORS)
# 'auto' takes per-vector AIS for a DBN only while its unit-wise sweeps (chains x steps x n_1 x (n_0 + n_2)
# elementwise updates over the test set) stay under this: about 6 minutes on one core of the project's CPU
# (1.4e8 a second measured on the 784-20-500 DBN); beyond it, importance sampling, checked.
AUTO_DBN_AIS_MAX_UPDATES = 5e10
DEFAULT_LOG_F_CHECK = 100  # test vectors on which log f-hat is re-estimated LOG_F_CHECK_FACTOR times longer
# --exact auto skips an enumeration that costs more multiply-add equivalents than this (about 10 s on one core) and
# than the estimators themselves
EXACT_AUTO_MIN_MACS = 2e11


@dataclass
class ExactValues:
    """Exact log Z and exact log f(v) of the test vectors (None for an RBM, whose log f(v) is closed-form), computed
    once by enumeration; `certify` hands them to the evaluations at later K instead of recomputing them.

    log_f: float64 shaped (N,) or None.
    """

    log_z: float
    log_f: Optional[Tensor]
    seconds: float
    route: str = ""


@dataclass
class EvaluationReport:
    """Everything `raise-eval evaluate` prints; `to_dict()` gives the JSON document.

    A run stopped part-way (Ctrl-C) leaves the stages that did not finish as None and names the stage it was in
    `interrupted`; the table and the JSON then show what finished.
    """

    settings: dict[str, Any]
    num_test: int
    ais: Optional[AISResult]
    raise_: Optional[RAISEResult]
    ais_mean: Optional[float]
    raise_mean: Optional[float]
    raise_stderr: Optional[float]
    control_variate: Optional[ControlVariateEstimate]
    log_f: Optional[LogUnnormalizedEstimate]
    log_z_exact: Optional[float]
    exact_mean: Optional[float]
    timing: dict[str, Optional[float]]
    notes: list[str] = field(default_factory=list)
    interrupted: Optional[str] = None
    distinct_test: Optional[Tensor] = None  # indices of the distinct test vectors (for the test-mass check)
    log_f_check: Optional[LogFCheck] = None  # the longer re-estimate of log f(v) on a subset (estimated log f only)
    exact_values: Optional[ExactValues] = None
    cost_estimate: Optional[CostEstimate] = None  # what the run was predicted to cost (`estimate_cost`), if asked

    @property
    def complete(self) -> bool:
        return self.interrupted is None

    @property
    def warnings(self) -> list[Warning]:
        """What a careful reader should distrust in these numbers (see `raise_eval.diagnostics`)."""
        if self.ais is None:
            return []
        return diagnose(
            ais_mean=self.ais_mean,
            ais_stderr=float(self.ais.stderr),
            ais_ess=float(self.ais.ess),
            ais_chains=self.ais.num_chains,
            ais_lower=float(self.ais.lower),
            raise_mean=self.raise_mean,
            raise_stderr=self.raise_stderr,
            exact_mean=self.exact_mean,
            log_z=self.ais.estimate,
            log_test_mass=self.log_test_mass,
            init=self.settings.get("init", "uniform"),
            log_f_method="exact" if self.log_f is None else self.log_f.method,
            log_f_check=self.log_f_check,
            log_f_estimated=self.log_f is not None and self.log_f.method != "exact",
            num_test=self.num_test,
        )

    @property
    def log_test_mass(self) -> Optional[float]:
        """log sum_v f(v) over the distinct test vectors (f estimated for DBMs and DBNs): a lower bound on log Z."""
        if self.log_f is None or self.distinct_test is None:
            return None
        return float(torch.logsumexp(self.log_f.log_unnormalized[self.distinct_test], 0))

    @property
    def gap(self) -> Optional[float]:
        """AIS - RAISE average log-likelihood (a large positive gap: at least one estimate is off)."""
        if self.ais_mean is None or self.raise_mean is None:
            return None
        return self.ais_mean - self.raise_mean

    def to_dict(self) -> dict[str, Any]:
        r, a = self.raise_, self.ais
        raise_doc = None
        if r is not None:
            raise_doc = {
                "mean": self.raise_mean,
                "stderr": self.raise_stderr,
                "subset_mean": r.mean,
                "subset_stderr": r.stderr,
                "headline": "control_variate",
                "control_variate": self.control_variate.to_dict(),
                "start": r.start,
                "num_examples": int(r.log_likelihood.shape[0]),
                "num_chains": r.num_chains,
                "per_example": r.log_likelihood,
            }
        ais_doc = None
        if a is not None:
            ais_doc = {
                "estimate": a.estimate,
                "stderr": float(a.stderr),
                "interval_3sigma": [float(a.lower), float(a.upper)],
                "ess": float(a.ess),
                "num_chains": a.num_chains,
            }
        return {
            "complete": self.complete,
            "interrupted_during": self.interrupted,
            "log_z": {"ais": ais_doc, "exact": self.log_z_exact},
            "log_likelihood": {
                "ais": {"mean": self.ais_mean},
                "raise": raise_doc,
                "exact": self.exact_mean,
                "gap": self.gap,
                "log_unnormalized": None
                if self.log_f is None
                else {**self.log_f.to_dict(), "check": None if self.log_f_check is None else self.log_f_check.to_dict()},
                "num_test": self.num_test,
            },
            "settings": self.settings,
            "timing": dict(self.timing),
            "notes": list(self.notes),
            "warnings": [w.to_dict() for w in self.warnings],
            "log_test_mass": self.log_test_mass,
            "cost_estimate": None if self.cost_estimate is None else self.cost_estimate.to_dict(),
        }

    def format_table(self) -> str:
        s = self.settings
        r, a = self.raise_, self.ais
        model = s.get("model", "RBM")
        lines = [
            f"raise-eval evaluate{' ' + s['checkpoint'] if s.get('checkpoint') else ''}: {model}, {s['dtype']} on "
            f"{s['device']}",
            f"data: {s['data'] + ' (' + s['split'] + ', ' if s.get('data') else '('}"
            f"{_vectors_words(s, self.num_test)}); "
            f"start: {s['init']}; "
            f"{_schedule_words(s, self.timing)}, K = {s['steps']}; seed {s['seed']}",
            "",
            f"{'':28}{'estimate':>12}{'± s.e.':>10}{'time':>9}",
            "log Z",
        ]
        if a is not None:
            lines.append(
                f"  {'AIS':26}{a.estimate:12.4f}{float(a.stderr):10.4f}{_secs(self.timing.get('ais_seconds'))}"
                f"   {a.num_chains} chains, ESS {float(a.ess):.0f}, "
                f"±3σ [{_fmt(float(a.lower))}, {_fmt(float(a.upper))}]"
            )
        else:
            lines.append(f"  {'AIS':26}{'(not run)':>12}")
        if self.log_z_exact is not None:
            lines.append(f"  {'exact':26}{self.log_z_exact:12.4f}{'':10}{_secs(self.timing.get('exact_seconds'))}")
        lf = self.log_f
        estimated = lf is not None and lf.method != "exact"
        if estimated:
            how = {
                "importance": f"{lf.num_samples} importance samples",
                "ais": f"AIS, {getattr(lf, 'steps', 0)} steps x {lf.num_samples} chains",
                "mean-field": "mean-field bound",
            }[lf.method]
            lines.append("log f(v), test average")
            lines.append(
                f"  {'estimate':26}{float(lf.log_unnormalized.mean()):12.4f}{'':10}{_secs(lf.seconds)}"
                f"   {how} per vector ({'a lower bound' if lf.method == 'mean-field' else 'a stochastic lower bound'})"
            )
            if self.log_f_check is not None:
                c = self.log_f_check
                lines.append(f"  {'check':26}{c.mean_rise:12.4f}{c.mean_rise_stderr:10.4f}{_secs(c.seconds)}   {c.describe()}")
        elif lf is not None and self.settings.get("model", "RBM").split()[0] in ("DBM", "DBN"):
            route = "" if self.exact_values is None or not self.exact_values.route else f" ({self.exact_values.route})"
            lines.append(f"log f(v): exact, by enumeration{route}; used by AIS and the control variate")
        lines.append("average test log-likelihood (nats)")
        if self.ais_mean is not None:
            label = "AIS (log f-hat - log Z-hat)" if estimated else "AIS (optimistic)"
            lines.append(f"  {label:26}{self.ais_mean:12.4f}{float(a.stderr):10.4f}")
            if estimated:
                lines.append(
                    f"  {'':26}an estimate, not a bound: log f-hat errs low, log Z-hat errs low"
                )
        if r is not None:
            cv = self.control_variate
            alpha = f"alpha = {cv.alpha:g}" if cv.alpha_rule == "fixed" else f"alpha = {cv.alpha:.3f} (optimal)"
            start = "" if r.start == "exact posterior" else f" ({r.start})"
            lines += [
                f"  {'RAISE (conservative)':26}{self.raise_mean:12.4f}{self.raise_stderr:10.4f}"
                f"{_secs(self.timing.get('raise_seconds'))}   {r.log_likelihood.shape[0]} examples x "
                f"{r.num_chains} chains{start}, control variate log f(v), {alpha}",
                f"  {'  without control variate':26}{cv.subset_mean:12.4f}{cv.subset_stderr:10.4f}"
                f"{'':9}   plain mean over the same {cv.num_subset} examples",
                f"  {'gap (AIS - RAISE)':26}{round(self.gap, 4) + 0.0:12.4f}",
            ]
        else:
            lines.append(f"  {'RAISE (conservative)':26}{'(not run)':>12}")
        if self.exact_mean is not None:
            lines.append(f"  {'exact':26}{self.exact_mean:12.4f}")
        lines.append(f"total wall time {self.timing['seconds']:.1f} s")
        if self.interrupted:
            lines.append(f"interrupted during {self.interrupted}: the numbers above are what finished before Ctrl-C")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning [{w.code}]: {w.message}" for w in self.warnings]
        return "\n".join(lines)


class EvaluationInterrupted(KeyboardInterrupt):
    """Ctrl-C during `evaluate`: `report` holds what finished (`report.interrupted` names the stage)."""

    def __init__(self, report: EvaluationReport):
        super().__init__(f"interrupted during {report.interrupted}")
        self.report = report


def _schedule_words(s: dict[str, Any], timing: dict[str, Optional[float]]) -> str:
    """'linear schedule', or for the adaptive one its pilot: 'adaptive schedule (pilot: 200 chains, 0.4 s)'."""
    if s["schedule"] != "adaptive":
        return f"{s['schedule']} schedule"
    pilot_time = timing.get("pilot_seconds")
    took = "" if pilot_time is None else f", {pilot_time:.1f} s"
    return f"adaptive schedule (pilot: {s.get('pilot_chains')} chains{took})"


def _vectors_words(s: dict[str, Any], num_test: int) -> str:
    """'10000 vectors', or for a test subset '1000 of 10000 vectors, a fixed random subset (seed 6)'."""
    if not s.get("test_subset"):
        return f"{num_test} vectors"
    return f"{num_test} of {s['test_vectors_total']} vectors, a fixed random subset (seed {s['test_subset_seed']})"


def _secs(x: Optional[float]) -> str:
    return f"{x:8.1f}s" if x is not None else f"{'':9}"


def _fmt(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else "-inf"


def _family(model) -> str:
    if isinstance(model, DBN):
        return "DBN"
    return "RBM" if model.num_layers == 2 else "DBM"


def _exact_units(model) -> tuple[int, int]:
    """Units enumerated by the exact log Z and by the exact log f(v) (0 when log f(v) is closed-form)."""
    cost = exact_mod.exact_cost(model, 1)
    return cost.log_z_units, cost.log_f_units


def recognition_means(model: DBN, train_data: Tensor) -> Tensor:
    """Mean over `train_data` of the recognition probabilities of x_{L-1} (the top RBM's visible layer), pushed
    up deterministically: the data base rates of a DBN's top RBM, shaped (n_{L-1},)."""
    x = train_data.to(device=model.device, dtype=model.dtype)
    for l in range(len(model.weights) - 1):
        x = torch.sigmoid(model.recognition_logits(x, l))
    return x.double().mean(0)


def check_settings(
    *,
    init: str,
    exact: str,
    log_f_method: str,
    ais_chains: int,
    raise_examples: int,
    raise_chains: int,
    log_f_samples: int,
    cv_alpha: Union[float, str],
    log_f_ais_steps: int = 100,
    log_f_ais_chains: int = 10,
    log_f_check: int = DEFAULT_LOG_F_CHECK,
) -> None:
    """Raise ValueError, saying what is wrong, for settings `evaluate` cannot run (before any work; the training
    hook calls it when it is made, so that a typo fails before training)."""
    if init not in INITS:
        raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    if exact not in EXACT_MODES:
        raise ValueError(f"exact must be one of {', '.join(EXACT_MODES)}, got {exact!r}")
    if log_f_method not in LOG_F_METHODS:
        raise ValueError(f"log_f_method must be one of {', '.join(LOG_F_METHODS)}, got {log_f_method!r}")
    for name, value, least in (
        ("ais_chains", ais_chains, 2),
        ("raise_examples", raise_examples, 2),
        ("raise_chains", raise_chains, 1),
        ("log_f_samples", log_f_samples, 1),
        ("log_f_ais_steps", log_f_ais_steps, 1),
        ("log_f_ais_chains", log_f_ais_chains, 1),
        ("log_f_check", log_f_check, 0),
    ):
        # A standard error needs two chains (AIS) or two test vectors (RAISE).
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")
    if not isinstance(cv_alpha, str) and not math.isfinite(cv_alpha):
        raise ValueError(f"cv_alpha must be a finite number or 'optimal', got {cv_alpha!r}")


@with_threads
def evaluate(
    model,
    test_data: Tensor,
    *,
    init: str = "base-rates",
    train_pixel_means: Optional[Tensor] = None,
    schedule: Union[str, Tensor] = "linear",
    steps: Optional[int] = None,
    ais_chains: int = 1000,
    raise_examples: int = 100,
    raise_chains: int = 20,
    seed: int = 0,
    exact: str = "auto",
    max_exact_units: int = exact_mod.DEFAULT_MAX_UNITS,
    log_f_method: str = "auto",
    log_f_samples: int = 500,
    cv_alpha: Union[float, str] = 1.0,
    progress: bool = False,
    settings: Optional[dict[str, Any]] = None,
    log_f: Optional[LogUnnormalizedEstimate] = None,
    pilot_chains: Optional[int] = None,
    pilot_grid: Optional[int] = None,
    max_memory: Optional[int] = None,
    shard_size: Optional[int] = None,
    resume_file: Optional[str] = None,
    resume_interval: float = DEFAULT_RESUME_INTERVAL,
    log_f_ais_steps: int = 100,
    log_f_ais_chains: int = 10,
    log_f_check: int = DEFAULT_LOG_F_CHECK,
    exact_values: Optional[ExactValues] = None,
    threads: Threads = "auto",
    test_subset: Optional[int] = None,
) -> EvaluationReport:
    """Estimate the average test log-likelihood of an RBM, DBM or DBN with AIS and RAISE (and exactly when
    tractable).

    Args:
        model: an `RBM`, `DBM` (or any `LayeredBoltzmannMachine`) or `DBN`, on the device and in the dtype to
            compute with.
        test_data: binary test vectors (N, n_visible).
        init: 'base-rates' (needs `train_pixel_means`) or 'uniform': the initial distribution of both estimators.
        train_pixel_means: means over the training set of the annealed machine's visible layer: pixel means for
            an RBM or DBM, for a DBN the recognition means of its top RBM's visible layer (`recognition_means`).
        schedule, steps: annealing schedule and K (default 1000). `schedule` is a name ('linear', 'sigmoid',
            'salakhutdinov' or 'adaptive') or explicit betas 0 = beta_0 <= ... <= beta_K = 1 shaped (K + 1,) (then
            `steps` may be left out). 'adaptive' chooses the betas in a pilot run with its own chains and
            generator (`raise_eval.adaptive`), so AIS and RAISE then run on a fixed schedule with their usual
            random numbers: the same numbers as passing the chosen betas explicitly. The chosen betas (for
            'adaptive' and explicit schedules) are in `settings["schedule_betas"]`, the pilot's time in
            `timing["pilot_seconds"]`.
        ais_chains: AIS chains M.
        raise_examples: test vectors n for RAISE (a random subset, without replacement; all when n >= N).
        raise_chains: RAISE chains per vector C.
        seed: AIS uses a generator seeded with `seed`, RAISE one seeded with `seed + 1`, the log f(v) estimates
            one seeded with `seed + 2`, the choice of RAISE's test subset one seeded with `seed + 3`, the
            adaptive schedule's pilot one seeded with `seed + 4` (the log f(v) check's subset `seed + 5`, the
            test_subset `seed + 6`).
        exact: 'auto' (when enumeration needs at most `max_exact_units` units and, if it would cost more than
            EXACT_AUTO_MIN_MACS multiply-adds, no more than the estimators), 'always' (up to 30 units; refused
            beyond) or 'never'. For DBMs and DBNs the exact log f(v), when computed, replaces the estimate of log f(v)
            in the AIS log-likelihood and the control variate (as for RBMs, whose log f(v) is closed-form).
            Enumeration runs in chunks within `max_memory`.
        log_f_method: 'auto', 'importance', 'ais' (per-vector AIS from the proposal to the posterior, v clamped) or
            'mean-field' (DBMs): how log f(v) is estimated for DBMs and DBNs when it is not exact. 'auto' takes
            'ais' for DBMs, and for two-hidden-layer DBNs while its sweeps stay under AUTO_DBN_AIS_MAX_UPDATES unit
            updates (else 'importance'); see `_auto_log_f_method` for the measurement behind it.
        log_f_samples: importance samples per test vector.
        log_f_ais_steps, log_f_ais_chains: K and chains per test vector of log_f_method='ais'.
        log_f_check: test vectors (a fixed random subset, seed + 5) on which an estimated log f(v) is estimated
            again, LOG_F_CHECK_FACTOR times longer (`raise_eval.log_f_check`); a rise warns 'log-f-biased'. 0 skips
            the check (the report then warns 'log-f-unchecked').
        exact_values: exact values from an earlier run on the same model and test data (`report.exact_values`),
            reused instead of recomputed.
        threads: torch threads for this call: 'auto' (default) takes the cores no other process is using now, at
            most torch's current count, as the command line does (`raise_eval.threads`; on a loaded machine torch's
            spinning threads can make a run many times slower); an int takes that many; None leaves torch's setting
            alone. The caller's count is restored on return; the count used is in `settings["threads"]`.
        test_subset: evaluate on a fixed random subset of this many test vectors (all when at least N): drawn
            from its own stream (seed + 6), the indices in `settings["test_subset_indices"]`. Trades precision for
            time: every stage that runs over the test vectors (the log f(v) estimates of DBMs and DBNs, which do not
            depend on K, and the exact log f(v)) shrinks with it.

    The work is `run_evaluation(plan_evaluation(...))`: the settings validated once into an `EvaluationPlan`, then
    the stages (`pilot_stage`, `ais_stage`, `exact_stage`, `log_f_stage`, `raise_stage`, `log_f_check_stage`) as
    small functions over it; `raise_eval.certify` composes the same stages across K.
        cv_alpha: the control variate's coefficient, a number or 'optimal'.
        progress: tqdm progress bars.
        settings: extra entries for the report's settings (e.g. the checkpoint path).
        log_f: the log f(v) estimates of these test vectors from an earlier run with the same model, test data,
            log_f_method, log_f_samples and seed (its `report.log_f`); reused instead of recomputed, which gives
            the same numbers (the estimates depend on neither the start nor K). Checked for shape and method.
        pilot_chains, pilot_grid: the adaptive pilot's chains (default: min(ais_chains, 200)) and grid cells
            (default: 200); it costs pilot_chains x pilot_grid transitions of one chain, whatever K is. Only with
            schedule='adaptive'.
        max_memory: bytes the run may occupy at its peak (default: half the memory free now,
            `sharding.default_max_memory`): every stage's peak is counted before any work (`raise_eval.cost`,
            `plan.cost`) and a run that cannot fit is refused (ValueError naming the option to lower).
        shard_size: AIS chains per shard and RAISE chains per shard (whole test vectors: max(1, shard_size //
            raise_chains) vectors); default `sharding.default_shard_size(model)`, which keeps the default runs one
            shard per stage. Shard i has its own generator (`sharding.shard_seed`; shard 0 keeps the seeds above), so
            the numbers depend on the shard size but not on max_memory, the number of processes or resuming.
        resume_file: keep every finished shard, the log f(v) estimates and the annealing state of the shard in
            progress (every `resume_interval` seconds, and at Ctrl-C) in this file, and continue from what it holds
            (`raise_eval.resume`); refused (ValueError) when it was written with other settings. Under
            torch.distributed each rank keeps its own file, `<resume_file>.rank<r>-of-<world size>`.

    Inside an initialized torch.distributed process group (e.g. under torchrun) the AIS and RAISE shards are shared
    out over the ranks (shard i on rank i % world size) and the log f(v) estimates are made on rank 0; every rank
    returns the same full report, bit-identical to a one-process run.
    """
    plan = plan_evaluation(
        model,
        test_data,
        init=init,
        train_pixel_means=train_pixel_means,
        schedule=schedule,
        steps=steps,
        ais_chains=ais_chains,
        raise_examples=raise_examples,
        raise_chains=raise_chains,
        seed=seed,
        exact=exact,
        max_exact_units=max_exact_units,
        log_f_method=log_f_method,
        log_f_samples=log_f_samples,
        cv_alpha=cv_alpha,
        progress=progress,
        settings=settings,
        pilot_chains=pilot_chains,
        pilot_grid=pilot_grid,
        max_memory=max_memory,
        shard_size=shard_size,
        log_f_ais_steps=log_f_ais_steps,
        log_f_ais_chains=log_f_ais_chains,
        log_f_check=log_f_check,
        test_subset=test_subset,
    )
    return run_evaluation(
        plan, log_f=log_f, exact_values=exact_values, resume_file=resume_file, resume_interval=resume_interval
    )


@dataclass
class EvaluationPlan:
    """Everything an evaluation needs, validated once (`plan_evaluation`): the stages below read it and change
    nothing in it. `at_steps(K)` is the same plan at another K, for `raise_eval.certify`.

    test: the binary test vectors (N, n_visible) in the model's dtype and device; path: the geometric path of the
    annealed machine (a DBN's top RBM) from the chosen start; betas: the schedule (None for 'adaptive', chosen by
    the pilot); settings: the report's settings; log_f_options: `log_unnormalized_estimate`'s method and budget.
    """

    model: Any
    family: str
    test: Tensor
    path: BoltzmannPath
    betas: Optional[Tensor]
    schedule_name: str
    steps: int
    settings: dict[str, Any]
    seed: int
    ais_chains: int
    raise_examples: int
    raise_chains: int
    cv_alpha: Union[float, str]
    shard_size: int
    max_memory: int
    pilot_chains: Optional[int]
    pilot_grid: Optional[int]
    use_exact: bool
    exact_note: Optional[str]
    max_exact_units: int
    log_f_options: dict[str, Any]
    log_f_check: int
    progress: bool
    rank: int
    world: int
    log_f_note: Optional[str] = None  # what --log-f auto chose, and why
    cost: Optional[CostEstimate] = None  # every stage's peak memory, checked against max_memory (not yet timed)

    @property
    def n_test(self) -> int:
        return int(self.test.shape[0])

    @property
    def exact_log_f(self) -> bool:
        """Whether log f(v) is enumerated (DBMs and DBNs with exact values; an RBM's is closed-form anyway)."""
        return self.family != "RBM" and self.use_exact

    @property
    def log_f_method(self) -> str:
        return "exact" if self.family == "RBM" or self.exact_log_f else self.log_f_options["method"]

    def at_steps(self, steps: int) -> EvaluationPlan:
        """This plan at K = `steps` (a named schedule; 'adaptive' gets its own pilot at that K)."""
        if self.schedule_name == "explicit":
            raise ValueError("an explicit schedule fixes K; name a schedule to change K")
        plan = self.checked_at_steps(steps)
        betas, _, steps = _schedule_request(self.schedule_name, steps)
        return dataclasses.replace(plan, betas=betas)

    def checked_at_steps(self, steps: int) -> EvaluationPlan:
        """This plan at K = `steps` with its memory counted and checked (ValueError when it passes max_memory), its
        schedule not made yet (betas None): what `at_steps` and `certify` (for max_steps) check before any work."""
        _, steps = _schedule_name_and_steps(self.schedule_name, steps)
        plan = dataclasses.replace(self, betas=None, steps=steps, settings={**self.settings, "steps": steps})
        plan.cost = CostEstimate(plan_memory(plan), plan.max_memory)
        check_memory(plan.cost.stages, plan.max_memory)
        return plan


def plan_evaluation(
    model,
    test_data: Tensor,
    *,
    init: str = "base-rates",
    train_pixel_means: Optional[Tensor] = None,
    schedule: Union[str, Tensor] = "linear",
    steps: Optional[int] = None,
    ais_chains: int = 1000,
    raise_examples: int = 100,
    raise_chains: int = 20,
    seed: int = 0,
    exact: str = "auto",
    max_exact_units: int = exact_mod.DEFAULT_MAX_UNITS,
    log_f_method: str = "auto",
    log_f_samples: int = 500,
    cv_alpha: Union[float, str] = 1.0,
    progress: bool = False,
    settings: Optional[dict[str, Any]] = None,
    pilot_chains: Optional[int] = None,
    pilot_grid: Optional[int] = None,
    max_memory: Optional[int] = None,
    shard_size: Optional[int] = None,
    log_f_ais_steps: int = 100,
    log_f_ais_chains: int = 10,
    log_f_check: int = DEFAULT_LOG_F_CHECK,
    test_subset: Optional[int] = None,
) -> EvaluationPlan:
    """Validate `evaluate`'s settings (the same arguments; ValueError saying what is wrong, before any work) and
    decide what follows from them: the path, the schedule, the shard size within the memory bound, whether the
    exact values are computed. The peak memory of every stage is counted (`plan.cost`, `raise_eval.cost`) and a
    plan that would pass `max_memory` is refused, naming the option to lower, before anything is allocated;
    `raise_eval.estimate_cost(plan)` adds the predicted seconds."""
    check_settings(
        init=init,
        exact=exact,
        log_f_method=log_f_method,
        ais_chains=ais_chains,
        raise_examples=raise_examples,
        raise_chains=raise_chains,
        log_f_samples=log_f_samples,
        cv_alpha=cv_alpha,
        log_f_ais_steps=log_f_ais_steps,
        log_f_ais_chains=log_f_ais_chains,
        log_f_check=log_f_check,
    )
    family = _family(model)
    annealed = model.top if family == "DBN" else model
    z_units, f_units = _exact_units(model)
    needed = max(z_units, f_units)
    if exact == "always" and needed > ALWAYS_EXACT_LIMIT:
        raise ValueError(
            f"exact enumeration of 2^{needed} states is out of reach (the limit is 2^{ALWAYS_EXACT_LIMIT}); "
            "use --exact auto or never"
        )
    test = check_binary(test_data, model.n_visible, "test data").to(device=model.device, dtype=model.dtype)
    test, subset_settings = _test_subset(test, test_subset, seed)
    n_test = test.shape[0]
    schedule_name, steps = _schedule_name_and_steps(schedule, steps)  # the betas come after the memory check
    explicit_betas = validate_schedule(schedule) if schedule_name == "explicit" else None
    use_exact, exact_note = _exact_decision(
        model,
        exact,
        max_exact_units,
        n_test=n_test,
        estimator_macs=_estimator_macs(
            model, steps, ais_chains, min(raise_examples, n_test) * raise_chains, n_test,
            log_f_method, log_f_samples, log_f_ais_steps * log_f_ais_chains,
        ),
    )  # fmt: skip
    exact_log_f = family != "RBM" and use_exact
    if schedule_name != "adaptive" and (pilot_chains is not None or pilot_grid is not None):
        raise ValueError("pilot_chains and pilot_grid are for the adaptive schedule's pilot (schedule='adaptive')")
    if schedule_name == "adaptive":
        pilot_chains = min(ais_chains, DEFAULT_PILOT_CHAINS) if pilot_chains is None else pilot_chains
        pilot_grid = DEFAULT_PILOT_GRID if pilot_grid is None else pilot_grid
        for name, value, least in (("pilot_chains", pilot_chains, 2), ("pilot_grid", pilot_grid, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")
    estimated = family != "RBM" and not exact_log_f
    auto_note = None
    if log_f_method != "auto" and family != "RBM" and not estimated:
        auto_note = f"log f(v) is exact here (enumerated), so log_f_method={log_f_method!r} was not used"
    if log_f_method == "auto":
        log_f_method, auto_note = _auto_log_f_method(model, family, n_test, log_f_ais_steps, log_f_ais_chains)
        if not estimated:
            auto_note = None
    if estimated and log_f_method == "ais" and family == "DBN" and len(model.weights) > 2:
        raise ValueError(
            f"log_f_method='ais' supports DBNs with two hidden layers; this DBN has {len(model.weights)} (use "
            "log_f_method='importance')"
        )
    if log_f_method == "mean-field" and family == "DBN":
        raise ValueError("the mean-field bound is for DBMs; a DBN's log f(v) is estimated by importance or ais")
    shard_size, max_memory = _check_memory(
        model,
        annealed,
        shard_size=shard_size,
        max_memory=max_memory,
        ais_chains=ais_chains,
        raise_pairs=(min(raise_examples, n_test), raise_chains),
        n_test=n_test,
        log_f_samples=log_f_samples if estimated and log_f_method == "importance" else 0,
        pilot_chains=pilot_chains if schedule_name == "adaptive" else 0,
    )
    rank, world = distributed.rank_and_world()
    path = BoltzmannPath(annealed, _start_biases(annealed, family, init, train_pixel_means))
    all_settings = {
        "model": f"{family} {'-'.join(str(n) for n in model.layer_sizes)}",
        "init": init,
        "schedule": schedule_name,
        "steps": steps,
        "ais_chains": ais_chains,
        "raise_examples": min(raise_examples, n_test),
        "raise_chains": raise_chains,
        "log_f_method": log_f_method if estimated else "exact",
        "log_f_samples": log_f_samples if estimated and log_f_method == "importance" else 0,
        "log_f_ais_steps": log_f_ais_steps if estimated and log_f_method == "ais" else 0,
        "log_f_ais_chains": log_f_ais_chains if estimated and log_f_method == "ais" else 0,
        "log_f_check": log_f_check if estimated else 0,
        "cv_alpha": cv_alpha,
        "seed": seed,
        "device": str(model.device),
        "dtype": str(model.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "data": "",
        "split": "",
    }
    all_settings.update(shard_size=shard_size, max_memory=max_memory, processes=world)
    all_settings.update(subset_settings)
    if schedule_name == "adaptive":
        all_settings.update(pilot_chains=pilot_chains, pilot_grid=pilot_grid, pilot_seed=seed + 4)
    if schedule_name == "explicit":
        all_settings["schedule_betas"] = explicit_betas.tolist()  # a named schedule is its name and K: not these
    all_settings.update(settings or {})
    plan = EvaluationPlan(
        model=model,
        family=family,
        test=test,
        path=path,
        betas=None,
        schedule_name=schedule_name,
        steps=steps,
        settings=all_settings,
        seed=seed,
        ais_chains=ais_chains,
        raise_examples=raise_examples,
        raise_chains=raise_chains,
        cv_alpha=cv_alpha,
        shard_size=shard_size,
        max_memory=max_memory,
        pilot_chains=pilot_chains,
        pilot_grid=pilot_grid,
        use_exact=use_exact,
        exact_note=exact_note,
        max_exact_units=max_exact_units,
        log_f_options=dict(
            method=log_f_method, num_samples=log_f_samples, ais_steps=log_f_ais_steps, ais_chains=log_f_ais_chains
        ),
        log_f_check=log_f_check,
        progress=progress,
        rank=rank,
        world=world,
        log_f_note=auto_note,
    )
    plan.cost = CostEstimate(plan_memory(plan), max_memory)
    check_memory(plan.cost.stages, max_memory)
    if schedule_name != "adaptive":
        plan.betas = explicit_betas if schedule_name == "explicit" else make_schedule(schedule_name, steps)
    return plan


def _test_subset(test: Tensor, size: Optional[int], seed: int) -> tuple[Tensor, dict[str, Any]]:
    """The test vectors to evaluate on: a fixed random subset of `size` of them (their own stream, seed + 6; all
    when size is None or at least N), and the settings that record it."""
    n = test.shape[0]
    if size is None:
        return test, {"test_subset": None}
    if isinstance(size, bool) or not isinstance(size, int) or size < 2:
        raise ValueError(f"--test-subset (test_subset) must be an integer of at least 2 (a standard error needs two), "
                         f"got {size!r}")  # fmt: skip
    if size >= n:
        return test, {"test_subset": None}
    indices = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 6))[:size].sort().values
    return test[indices.to(test.device)], {
        "test_subset": size,
        "test_subset_seed": seed + 6,
        "test_vectors_total": n,
        "test_subset_indices": indices.tolist(),
    }


def _auto_log_f_method(model, family: str, n_test: int, steps: int, chains: int) -> tuple[str, Optional[str]]:
    """What log_f_method='auto' estimates log f(v) with, and a note saying why. Measured against exact values on
    784-20-500 models (scripts/measure_log_f.py, results/log_f): per-vector AIS matched importance sampling's error
    in a quarter of its time on the DBM, and on the DBN, at about equal time, erred 0.007 nats on average (worst
    0.71) where importance sampling erred 0.30 (worst 14.6). A DBN's unit-wise sweeps are slow, though, so a wide
    DBN gets importance sampling (and the log f(v) check) rather than hours of AIS."""
    if family == "DBM":
        return "ais", None
    if family != "DBN" or len(model.weights) > 2:
        return "importance", None
    sizes = model.layer_sizes
    updates = float(n_test) * chains * steps * sizes[1] * (sizes[0] + sizes[2])
    if updates <= AUTO_DBN_AIS_MAX_UPDATES:
        return "ais", None
    return "importance", (
        f"log f(v) by importance sampling: per-vector AIS (--log-f ais) would make {updates:.1e} unit updates here "
        f"(about {updates / 1.4e8 / 60:.0f} min on one core), so --log-f auto chose importance sampling; the log f(v) "
        "check says whether it can be trusted"
    )


def _start_biases(annealed, family: str, init: str, train_pixel_means) -> list[Tensor]:
    """The base biases of the annealed machine's start distribution (data base rates or uniform), checked."""
    if init != "base-rates":
        return uniform_base(annealed)
    dbn_means = "recognition means of the top RBM's visible layer (raise_eval.evaluate.recognition_means(dbn, train_data))"
    if train_pixel_means is None:
        what = dbn_means if family == "DBN" else "pixel means"
        raise ValueError(
            f"init='base-rates' needs the training-set {what} (train_pixel_means); pass them, or use init='uniform'"
        )
    means = torch.as_tensor(train_pixel_means, dtype=torch.float64).flatten()
    if means.numel() != annealed.n_visible or not bool(((means >= 0) & (means <= 1)).all()):  # NaN too
        what = f" (for a DBN: the {dbn_means})" if family == "DBN" else ""
        raise ValueError(f"train_pixel_means must be {annealed.n_visible} values in [0, 1]{what}")
    return data_base_rates(annealed, means.unsqueeze(0))


# ----------------------------------------------------------------------------------------------------- stages
# Each stage is a small function of the plan (and of what earlier stages produced); `run_evaluation` composes them
# for one K, `raise_eval.certify` runs the K-independent ones (exact values, log f(v), its check) once and the
# others at every K.


def pilot_stage(plan: EvaluationPlan) -> tuple[Tensor, Any]:
    """The adaptive schedule's betas at plan.steps and the pilot's record, from its own generator (seed + 4) and its
    own copy of the path: the main runs' random streams are those they would have with these betas passed
    explicitly, and their weights stay unbiased."""
    return adaptive_pilot(
        plan.path,
        plan.steps,
        generator=torch.Generator(device=plan.model.device).manual_seed(plan.seed + 4),
        num_chains=plan.pilot_chains,
        grid_size=plan.pilot_grid,
    )


def ais_stage(plan: EvaluationPlan, betas: Tensor, store=None) -> AISResult:
    """AIS over the annealed machine in shards (shard i on rank i % world size)."""
    return sharded_ais(
        plan.path, betas, plan.ais_chains, seed=plan.seed, shard_size=plan.shard_size, progress=plan.progress, store=store
    )


def exact_stage(plan: EvaluationPlan) -> ExactValues:
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


def log_f_stage(plan: EvaluationPlan, exact_values: Optional[ExactValues] = None, checkpoint=None):
    """log f(v) of every test vector: exact (an RBM's closed form, or the enumerated values of `exact_values`) or
    estimated with the plan's method from one stream (seed + 2) through chunks fixed by the settings."""
    device = plan.model.device
    if plan.exact_log_f:
        log_f = exact_values.log_f.to(device)
        return LogUnnormalizedEstimate(log_f, torch.zeros_like(log_f), "exact", 0, 0.0)
    generator = torch.Generator(device=device).manual_seed(plan.seed + 2)
    return log_unnormalized_estimate(
        plan.model,
        plan.test,
        **plan.log_f_options,
        generator=generator,
        progress=plan.progress,
        checkpoint=None if checkpoint is None else checkpoint(generator),
    )


def log_f_check_stage(plan: EvaluationPlan, main: LogUnnormalizedEstimate) -> Optional[LogFCheck]:
    """Re-estimate log f(v) LOG_F_CHECK_FACTOR times longer (a mean-field bound: by importance sampling) on a fixed
    subset of the test vectors, from its own stream (seed + 5); None when log f(v) is exact or the check is off."""
    if main.method == "exact" or plan.log_f_check <= 0:
        return None
    options = plan.log_f_options
    indices = check_subset(plan.n_test, plan.log_f_check, plan.seed + 5)
    longer = dict(options)
    factor = LOG_F_CHECK_FACTOR
    if main.method == "importance":
        longer["num_samples"] = options["num_samples"] * factor
        budget = longer["num_samples"]
    elif main.method == "ais":
        longer["ais_steps"] = options["ais_steps"] * factor
        budget = longer["ais_steps"]
    else:  # the mean-field bound against the other estimator
        longer["method"], factor, budget = "importance", 1, options["num_samples"]
    generator = torch.Generator(device=plan.model.device).manual_seed(plan.seed + 5)

    def estimate(v: Tensor) -> Tensor:
        return log_unnormalized_estimate(plan.model, v, **longer, generator=generator, progress=plan.progress).log_unnormalized

    return check_log_f(
        estimate, plan.test, main.log_unnormalized, indices=indices, method=longer["method"], budget=budget, factor=factor
    )


def raise_subset(plan: EvaluationPlan) -> Tensor:
    """The test vectors RAISE runs on: a random subset from its own stream (seed + 3), sorted; all when fewer."""
    if plan.raise_examples >= plan.n_test:
        return torch.arange(plan.n_test)
    subset = torch.randperm(plan.n_test, generator=torch.Generator().manual_seed(plan.seed + 3))
    return subset[: plan.raise_examples].sort().values


def raise_stage(plan: EvaluationPlan, betas: Tensor, subset: Tensor, store=None) -> RAISEResult:
    """RAISE on the subset (heating for a DBM, unrolling for a DBN), in shards of whole test vectors."""
    return sharded_raise(
        plan.path,
        plan.test[subset.to(plan.model.device)],
        betas,
        plan.raise_chains,
        seed=plan.seed,
        shard_size=plan.shard_size,
        unroll=plan.model if plan.family == "DBN" else None,
        progress=plan.progress,
        store=store,
    )


def _check_reused(plan: EvaluationPlan, log_f, exact_values) -> None:
    """Refuse reused log f(v) estimates or exact values that do not belong to this plan."""
    n = plan.n_test
    if exact_values is not None:
        if not plan.use_exact:
            raise ValueError("exact_values were passed to a run that does not compute exact values (exact='never')")
        if exact_values.log_f is not None and tuple(exact_values.log_f.shape) != (n,):
            raise ValueError(
                f"exact_values hold log f(v) of {tuple(exact_values.log_f.shape)} vectors; this run has {n} (pass "
                "the exact_values of a report on the same model and test data, or None)"
            )
    if log_f is None:
        return
    expected = plan.log_f_method
    if log_f.method != expected or tuple(log_f.log_unnormalized.shape) != (n,):
        raise ValueError(
            f"log_f holds {log_f.method} estimates of {tuple(log_f.log_unnormalized.shape)} vectors; this run needs "
            f"{expected} estimates of its {n} test vectors (pass the log_f of a report on the same model and test "
            "data, or None)"
        )
    options = plan.log_f_options
    if log_f.method == "importance" and log_f.num_samples != options["num_samples"]:
        raise ValueError(
            f"log_f used {log_f.num_samples} importance samples but log_f_samples={options['num_samples']}; they must "
            "agree"
        )
    if log_f.method == "ais" and (log_f.steps, log_f.num_samples) != (options["ais_steps"], options["ais_chains"]):
        raise ValueError(
            f"log_f used AIS with {log_f.steps} steps x {log_f.num_samples} chains but log_f_ais_steps="
            f"{options['ais_steps']}, log_f_ais_chains={options['ais_chains']}; they must agree"
        )


def run_evaluation(
    plan: EvaluationPlan,
    *,
    log_f: Optional[LogUnnormalizedEstimate] = None,
    exact_values: Optional[ExactValues] = None,
    log_f_check: Optional[LogFCheck] = None,
    resume_file: Optional[str] = None,
    resume_interval: float = DEFAULT_RESUME_INTERVAL,
    cost_estimate: Optional[CostEstimate] = None,
) -> EvaluationReport:
    """Run the stages of one evaluation (pilot, AIS, exact values, log f(v), RAISE, the log f(v) check, control
    variate) on a plan, reusing `log_f`, `exact_values` and `log_f_check` (of the same `log_f`) when given; see
    `evaluate`. `cost_estimate` (`estimate_cost(plan)`) is kept in the report (its JSON's "cost_estimate")."""
    if log_f_check is not None and log_f is None:
        raise ValueError("log_f_check is the check of a reused log_f: pass that log_f too")
    _check_reused(plan, log_f, exact_values)
    if not resume_interval >= 0:
        raise ValueError(f"resume_interval must be a number of seconds >= 0, got {resume_interval!r}")
    model, test, device, rank, world = plan.model, plan.test, plan.model.device, plan.rank, plan.world
    all_settings = dict(plan.settings)
    betas = plan.betas
    start_total = time.perf_counter()
    notes: list[str] = []
    store = None
    if resume_file is not None:
        check_world_size(resume_file, world)
        if world > 1:  # each rank keeps its own shards
            resume_file = rank_resume_file(resume_file, rank, world)
        store = ResumeFile(
            resume_file,
            _resume_settings(all_settings, model, test, plan.path, betas),
            interval=resume_interval,
            context={"threads": torch.get_num_threads(), "torch": str(torch.__version__), "raise_eval": __version__},
        )
        for change in store.context_changes:
            notes.append(f"resumed with {change}: the continued run is bit-identical only where these agree")
    done: dict[str, Any] = {}
    _, first = _unique_rows(test)
    distinct = first.to(device)

    def report(interrupted: Optional[str] = None) -> EvaluationReport:
        ais_result, log_f_est, raise_result, cv = (done.get(k) for k in ("ais", "log_f", "raise", "cv"))
        ais_mean = None
        if ais_result is not None and log_f_est is not None:
            ais_mean = float(log_f_est.log_unnormalized.mean()) - ais_result.estimate
        exact = done.get("exact")
        check = done.get("log_f_check")
        return EvaluationReport(
            settings=all_settings,
            num_test=plan.n_test,
            ais=ais_result,
            raise_=raise_result,
            ais_mean=ais_mean,
            raise_mean=None if cv is None else cv.mean,
            raise_stderr=None if cv is None else cv.stderr,
            control_variate=cv,
            log_f=log_f_est,
            log_z_exact=None if exact is None else exact.log_z,
            exact_mean=done.get("exact_mean"),
            timing={
                "seconds": time.perf_counter() - start_total,
                "ais_seconds": None if ais_result is None else ais_result.seconds,
                "raise_seconds": None if raise_result is None else raise_result.seconds,
                "log_f_seconds": None if log_f_est is None else log_f_est.seconds,
                "exact_seconds": None if exact is None else exact.seconds,
                "pilot_seconds": done.get("pilot_seconds"),
                "log_f_check_seconds": None if check is None else check.seconds,
            },
            notes=notes,
            interrupted=interrupted,
            distinct_test=distinct,
            log_f_check=check,
            exact_values=exact,
            cost_estimate=cost_estimate,
        )

    stage = "AIS"
    try:
        if betas is None:
            stage = "the adaptive schedule's pilot"
            betas, pilot = pilot_stage(plan)
            all_settings["schedule_betas"] = betas.tolist()
            all_settings["pilot_thermodynamic_length"] = pilot.length
            if store is not None:
                store.check_schedule(betas)
            done["pilot_seconds"] = pilot.seconds
        stage = "AIS"
        done["ais"] = ais_stage(plan, betas, store)
        if plan.ais_chains > plan.shard_size:
            shards = len(shard_bounds(plan.ais_chains, plan.shard_size))
            notes.append(f"AIS ran in {shards} shards of up to {plan.shard_size} chains")
        if plan.use_exact:
            stage = "the exact answer"
            done["exact"] = exact_values if exact_values is not None else exact_stage(plan)
        elif plan.exact_note is not None:
            notes.append(plan.exact_note)
        if plan.log_f_note is not None:
            notes.append(plan.log_f_note)
        stage = "the log f(v) estimates"
        # Made on rank 0 (other ranks go on to RAISE and receive the estimates afterwards); kept in the resume file.
        log_f_est = log_f
        if log_f_est is None and store is not None and store.get("log_f") is not None and not plan.exact_log_f:
            log_f_est = _log_f_to(LogUnnormalizedEstimate(**store.get("log_f")), device)
        if log_f_est is None and (rank == 0 or plan.exact_log_f):
            checkpoint = None if store is None else (lambda g: store.checkpoint("log_f", 0, g))
            with deferred_interrupts() if store is not None else contextlib.nullcontext():
                log_f_est = log_f_stage(plan, done.get("exact"), checkpoint)
            if store is not None and log_f_est.method != "exact":
                store.put("log_f", dict(vars(log_f_est)))
        if log_f_est is not None:
            done["log_f"] = log_f_est
        stage = "RAISE"
        subset = raise_subset(plan)
        done["raise"] = raise_stage(plan, betas, subset, store)
        per_shard = raise_vectors_per_shard(plan.shard_size, plan.raise_chains)
        if len(subset) > per_shard:
            notes.append(
                f"RAISE ran in {len(shard_bounds(len(subset), per_shard))} shards of up to {per_shard} vectors"
            )
        if world > 1 and not plan.exact_log_f:
            done["log_f"] = _log_f_to(distributed.broadcast_from_rank0(log_f_est), device)
        stage = "the log f(v) check"
        # On every rank (its own stream, seed + 5): every rank returns the same report.
        done["log_f_check"] = log_f_check if log_f_check is not None else log_f_check_stage(plan, done["log_f"])
        stage = "the control variate"
        log_f_all = done["log_f"].log_unnormalized
        done["cv"] = done["raise"].control_variate_mean(
            log_f_all, log_f_all[subset.to(log_f_all.device)], alpha=plan.cv_alpha
        )
        if plan.use_exact:
            exact = done["exact"]
            exact_log_f = log_f_all if exact.log_f is None else exact.log_f.to(log_f_all.device)
            done["exact_mean"] = float(exact_log_f.mean()) - exact.log_z
    except KeyboardInterrupt:
        _note_continued(store, resume_file, notes)
        raise EvaluationInterrupted(report(interrupted=stage)) from None
    _note_continued(store, resume_file, notes)
    return report()


def _estimator_macs(
    model, steps: int, ais_chains: int, raise_chains_total: int, n_test: int, log_f_method: str, log_f_samples: int,
    log_f_ais_work: int,
) -> float:
    """Multiply-adds of the estimators (AIS, RAISE, log f(v)): about two products with every weight matrix per
    chain and step, and per importance sample or per AIS step and chain of log f(v)."""
    per_pass = 2.0 * sum(w.numel() for w in model.weights)
    annealed = model.top if _family(model) == "DBN" else model  # a DBN anneals its top RBM only
    total = 2.0 * sum(w.numel() for w in annealed.weights) * steps * (ais_chains + raise_chains_total)
    if _family(model) != "RBM" and log_f_method != "mean-field":
        total += per_pass * n_test * (log_f_samples if log_f_method == "importance" else log_f_ais_work)
    return total


def _exact_decision(
    model, exact: str, max_exact_units: int, *, n_test: int, estimator_macs: float
) -> tuple[bool, Optional[str]]:
    """Whether to compute the exact values, and the note that says why not (auto only)."""
    if exact == "never":
        return False, None
    cost = exact_mod.exact_cost(model, n_test)
    needed = max(cost.log_z_units, cost.log_f_units)
    if exact == "always":
        return True, None
    if needed > max_exact_units:
        hint = " (use --exact always to force)" if needed <= ALWAYS_EXACT_LIMIT else ""
        return False, f"exact values skipped: they would enumerate 2^{needed} states{hint}"
    # A transcendental function (softplus, exp) costs about as much as 10 multiply-adds in a product.
    work = cost.multiply_adds + 10.0 * (cost.log_z_exps + cost.log_f_exps)
    if work > max(EXACT_AUTO_MIN_MACS, estimator_macs):
        return False, (
            f"exact values skipped: enumerating 2^{needed} states would cost about {work:.1e} multiply-add "
            f"equivalents, more than the estimators themselves ({estimator_macs:.1e}); use --exact always to force"
        )
    return True, None


def _note_continued(store: Optional[ResumeFile], resume_file, notes: list[str]) -> None:
    """What a resumed run took from its file, in the report's notes (its times cover this invocation only)."""
    if store is not None and store.continued:
        notes.append(
            f"continued from {resume_file}: {'; '.join(store.continued)} (the times shown are this invocation's)"
        )


def _log_f_to(est: LogUnnormalizedEstimate, device) -> LogUnnormalizedEstimate:
    return LogUnnormalizedEstimate(
        est.log_unnormalized.to(device), est.stderr.to(device), est.method, est.num_samples, est.seconds,
        getattr(est, "steps", 0),
    )


RESUME_KEYS = (
    "model", "init", "schedule", "steps", "ais_chains", "raise_examples", "raise_chains", "log_f_method",
    "log_f_samples", "log_f_ais_steps", "log_f_ais_chains", "seed", "device", "dtype", "shard_size", "pilot_chains",
    "pilot_grid", "test_subset",
)  # fmt: skip


def _resume_settings(all_settings: dict, model, test: Tensor, path: BoltzmannPath, betas) -> dict[str, Any]:
    """What a resume file must agree on: the settings that determine the numbers, with digests of the model's
    parameters, the test data, the start distribution and an explicit schedule."""
    out = {k: all_settings.get(k) for k in RESUME_KEYS}
    out["parameters"] = model_digest(model)
    out["test_data"] = tensor_digest([test])
    out["start_biases"] = tensor_digest(path.base_biases)
    out["schedule_betas"] = tensor_digest([betas]) if all_settings.get("schedule") == "explicit" else None
    return out


def _check_memory(
    model,
    annealed,
    *,
    shard_size: Optional[int],
    max_memory: Optional[int],
    ais_chains: int,
    raise_pairs: tuple[int, int],
    n_test: int,
    log_f_samples: int,
    pilot_chains: int,
) -> tuple[int, int]:
    """(shard size, memory bound) after checking, before any work, that the largest batch fits the bound: one AIS
    shard, one RAISE shard, one chunk of the log f(v) estimates, the adaptive pilot. Shards run one per batch, so
    that the bound never changes the numbers."""
    if shard_size is None:
        shard_size = default_shard_size(model)
    elif isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError(f"shard_size (--shard-size) must be a positive integer, got {shard_size!r}")
    if max_memory is None:
        max_memory = default_max_memory(model.device)
    elif isinstance(max_memory, bool) or not isinstance(max_memory, int) or max_memory < 1:
        raise ValueError(f"max_memory (--max-memory) must be a positive number of bytes, got {max_memory!r}")
    dtype, name = model.dtype, f"{_family(model)} {'-'.join(str(n) for n in model.layer_sizes)}"
    ais_units = sum(annealed.layer_sizes)
    n_raise, c = raise_pairs
    vectors = min(raise_vectors_per_shard(shard_size, c), n_raise)
    fix = f"raise --max-memory or lower --shard-size (now {shard_size} chains)"
    chains = min(shard_size, ais_chains)
    batches = [
        (chains * bytes_per_chain(ais_units, dtype), f"one AIS shard of {chains} chains", fix),
        (
            vectors * c * bytes_per_chain(sum(model.layer_sizes), dtype),
            f"one RAISE shard of {vectors} vectors x {c} chains",
            fix if vectors > 1 else "raise --max-memory or lower --raise-chains",
        ),
        (
            pilot_chains * bytes_per_chain(ais_units, dtype),
            f"the adaptive pilot's {pilot_chains} chains",
            "raise --max-memory or lower --pilot-chains",
        ),
    ]
    if log_f_samples:
        batches.append(
            (
                log_f_bytes(model, n_test, log_f_samples, LOG_F_CHUNK_ELEMENTS),
                "one chunk of the log f(v) importance estimates",
                "raise --max-memory" + (" or use --log-f mean-field" if _family(model) == "DBM" else ""),
            )
        )
    for need, what, how in batches:
        if need > max_memory:
            raise ValueError(
                f"{what} of the {name} needs about {format_size(need)} ({need} bytes), over the memory bound of "
                f"{format_size(max_memory)} (--max-memory): {how}; nothing was computed"
            )
    return shard_size, max_memory


def _schedule_request(schedule: Union[str, Tensor], steps: Optional[int]) -> tuple[Optional[Tensor], str, int]:
    """(betas, name, K) for evaluate's `schedule` and `steps`; betas is None for 'adaptive' (chosen by the pilot)."""
    name, steps = _schedule_name_and_steps(schedule, steps)
    if name == "explicit":
        return validate_schedule(schedule), name, steps
    return (None if name == "adaptive" else make_schedule(name, steps)), name, steps


def _schedule_name_and_steps(schedule: Union[str, Tensor], steps: Optional[int]) -> tuple[str, int]:
    """(name, K) for evaluate's `schedule` and `steps`, checked; a named schedule's betas are not made yet (their
    memory is checked first)."""
    if isinstance(schedule, str):
        if schedule not in EVALUATE_SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(EVALUATE_SCHEDULES)}")
        steps = DEFAULT_STEPS if steps is None else steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"the number of annealing steps K must be a positive integer, got {steps!r}")
        return schedule, steps
    betas = validate_schedule(schedule)
    if steps is not None and steps != betas.numel() - 1:
        raise ValueError(f"steps={steps} but the explicit schedule has K = {betas.numel() - 1} steps; leave steps out")
    return "explicit", betas.numel() - 1


def _unique_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """(inverse, index of the first occurrence of each distinct row) of a binary matrix."""
    _, inverse = torch.unique(x, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), x.shape[0], dtype=torch.long, device=x.device)
    first.scatter_reduce_(0, inverse, torch.arange(x.shape[0], device=x.device), reduce="amin")
    return inverse, first


evaluate_rbm = evaluate
