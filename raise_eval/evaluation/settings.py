"""`EvaluateSettings`: every setting of one evaluation, declared once (type, bound, default, help, flag) and checked
once when the value is built (`raise_eval.settings`). The command line's `evaluate` options are generated from these
declarations; `raise_eval.evaluate(model, data, steps=..., ...)` builds the same value from its keywords."""

from __future__ import annotations

from typing import Any, Optional, Union

from raise_eval.adaptive import DEFAULT_PILOT_CHAINS, DEFAULT_PILOT_GRID
from raise_eval.estimators.raise_ import DBN_STARTS
from raise_eval.exact import DEFAULT_MAX_UNITS
from raise_eval.schedules import SCHEDULES, validate_schedule
from raise_eval.settings import (
    SettingsError,
    progress_setting,
    setting,
    settings_class,
    threads_setting,
    with_overrides,
)

INITS = ("base-rates", "uniform")
EXACT_MODES = ("auto", "always", "never")
ALWAYS_EXACT_LIMIT = 30  # 'always' enumerates up to 2^30 states (minutes); beyond that it refuses
EVALUATE_SCHEDULES = (*SCHEDULES, "adaptive")  # 'adaptive' needs the model (a pilot run), so only evaluate has it
LOG_F_METHODS = ("auto", "importance", "ais", "mean-field")
# What the log f(v) estimators take when their budget is not given (with log_f_method='auto', giving one chooses
# its estimator): declared once, here.
LOG_F_BUDGET_DEFAULTS = {"log_f_samples": 500, "log_f_ais_steps": 100, "log_f_ais_chains": 10}


def _betas(value):
    """An explicit schedule, as a tuple of Python floats (checked by `schedules.validate_schedule`)."""
    try:
        betas = validate_schedule(value)
    except (ValueError, TypeError) as e:
        raise SettingsError(f"{{betas}}: {e}", ("betas",)) from None
    return tuple(float(b) for b in betas.tolist())


@settings_class
class EvaluateSettings:
    """The settings of an evaluation (AIS, RAISE, exact values, log f(v) estimates, their check, the run's memory
    and shards). Every field is checked when the value is built; `replace(**changes)` gives a checked copy.

    The seeds: AIS uses `seed`, RAISE `seed + 1`, the log f(v) estimates `seed + 2`, RAISE's test subset
    `seed + 3`, the adaptive pilot `seed + 4`, the log f(v) check's subset `seed + 5`, `test_subset` `seed + 6`.
    """

    init: str = setting(
        "base-rates",
        "initial distribution of AIS and RAISE: data base rates (visible biases = logit of clipped training pixel "
        "means, hidden uniform) or uniform",
        kind="choice", numbers="kept", choices=INITS, flag="--init", group="annealing",
    )  # fmt: skip
    schedule: str = setting(
        "linear",
        "spacing of the inverse temperatures (sigmoid is the BDMC paper's, salakhutdinov the piecewise-linear one of "
        "Salakhutdinov & Murray). adaptive chooses them in a short pilot run with its own chains and seed (seed + 4) "
        "so that neighbouring distributions are equally far apart (constant conditional ESS); AIS and RAISE then "
        "run, unbiased, on that fixed schedule, which the JSON records",
        kind="choice", numbers="kept", choices=EVALUATE_SCHEDULES, flag="--schedule", group="annealing",
    )  # fmt: skip
    steps: int = setting(
        1000,
        "number of intermediate distributions K; accuracy grows with K",
        kind="count", numbers="kept", least=1, flag="--steps", short=("-K",), metavar="K", group="annealing",
    )  # fmt: skip
    betas: Optional[tuple] = setting(
        None,
        "explicit inverse temperatures 0 = beta_0 <= ... <= beta_K = 1 (then `steps` is K and `schedule` is ignored)",
        kind="any", numbers="kept", none="the named schedule", check=_betas,
    )  # fmt: skip
    pilot_chains: Optional[int] = setting(
        None,
        "--schedule adaptive: chains of the pilot run",
        kind="count", numbers="kept", least=2, none=f"the AIS chains, at most {DEFAULT_PILOT_CHAINS}",
        flag="--pilot-chains",
        metavar="M", group="annealing",
    )  # fmt: skip
    pilot_grid: Optional[int] = setting(
        None,
        "--schedule adaptive: grid cells the pilot measures, whatever K is",
        kind="count", numbers="kept", least=1, none=str(DEFAULT_PILOT_GRID), flag="--pilot-grid", metavar="G",
        group="annealing",
    )  # fmt: skip
    ais_chains: int = setting(
        1000, "AIS chains", kind="count", numbers="kept", least=2, why="a standard error needs two",
        flag="--ais-chains",
        metavar="M", group="annealing",
    )  # fmt: skip
    raise_examples: int = setting(
        100,
        "test vectors RAISE runs on, a random subset (all if fewer)",
        kind="count", numbers="kept", least=2, why="a standard error needs two", flag="--raise-examples", metavar="N",
        group="annealing",
    )  # fmt: skip
    raise_chains: int = setting(
        20, "RAISE chains per test vector", kind="count", numbers="kept", least=1, flag="--raise-chains", metavar="C",
        group="annealing",
    )  # fmt: skip
    dbn_start: str = setting(
        "heated",
        "how RAISE reaches a DBN's directed layers before the top RBM's reverse pass: heated (forward AIS over "
        "p(h | v) with v clamped, on the same K steps, so the recognition proposal's mismatch is annealed away as K "
        "grows) or unrolled (one draw from the recognition distribution, as in the RAISE paper: its gap to the truth "
        "does not shrink with K when that distribution misses modes). Both are unbiased for the unrolled annealing "
        "model. Heated costs a unit-wise sweep of the directed layers per step: 6 to 15 times the unrolled run's "
        "time on the project's DBNs. Other families ignore it",
        kind="choice", numbers="kept", choices=DBN_STARTS, flag="--dbn-start", group="annealing",
    )  # fmt: skip
    cv_alpha: Union[float, str] = setting(
        1.0,
        "coefficient of the control variate log f(v) in the RAISE average: a number, or 'optimal' for "
        "Cov(Y, X) / Var(X) estimated on the subset (1 is the paper's choice)",
        kind="number", numbers="result", words=("optimal",), flag="--cv-alpha", metavar="ALPHA", group="annealing",
    )  # fmt: skip
    log_f_method: str = setting(
        "auto",
        "estimator of log f(v) for DBMs and DBNs when it is not exact: auto (ais for DBMs; for DBNs ais unless its "
        "unit-wise sweeps would take more than about 20 minutes at the run's threads, then importance), importance "
        "sampling (DBM: mean-field proposal over the even hidden layers, odd layers summed out; DBN: recognition "
        "proposal), ais (per test vector, AIS from that proposal to the posterior with v clamped: --log-f-steps x "
        "--log-f-chains; unbiased for f(v) and not fooled by modes the proposal misses, as importance sampling can "
        "be) or the DBM mean-field bound (auto is chosen by measured error against exact values at equal time; "
        "RBMs always use the exact value, and DBMs and DBNs the exact one whenever --exact computes it)",
        kind="choice", numbers="kept", choices=LOG_F_METHODS, flag="--log-f", group="DBMs and DBNs",
    )  # fmt: skip
    log_f_samples: Optional[int] = setting(
        None,
        "importance samples per test vector for log f(v) (with --log-f auto, giving it chooses importance sampling)",
        kind="count", numbers="kept", least=1, none=str(LOG_F_BUDGET_DEFAULTS["log_f_samples"]), flag="--log-f-samples",
        metavar="S", group="DBMs and DBNs",
    )  # fmt: skip
    log_f_ais_steps: Optional[int] = setting(
        None,
        "--log-f ais: steps K of each vector's AIS (with --log-f auto, giving it chooses ais)",
        kind="count", numbers="kept", least=1, none=str(LOG_F_BUDGET_DEFAULTS["log_f_ais_steps"]), flag="--log-f-steps",
        metavar="K", group="DBMs and DBNs",
    )  # fmt: skip
    log_f_ais_chains: Optional[int] = setting(
        None,
        "--log-f ais: chains per test vector (with --log-f auto, giving it chooses ais)",
        kind="count", numbers="kept", least=1, none=str(LOG_F_BUDGET_DEFAULTS["log_f_ais_chains"]),
        flag="--log-f-chains",
        metavar="C", group="DBMs and DBNs",
    )  # fmt: skip
    ti_chains: int = setting(
        0,
        "fully visible models: also estimate log Z by thermodynamic integration (the estimator DCA tools report) with "
        "C chains along the same path and schedule, from its own stream (seed + 7), reported beside AIS and never "
        "part of the sandwich or a verdict (0: none)",
        kind="count", numbers="result", least=0, flag="--ti-chains", metavar="C", group="annealing",
    )  # fmt: skip
    log_f_check: int = setting(
        100,
        "re-estimate log f(v) 4 times longer on N test vectors (a fixed random subset) and warn [log-f-biased] when "
        "the estimates rise: an estimator that misses posterior modes is confidently wrong and its own standard "
        "errors cannot show it (0 skips the check)",
        kind="count", numbers="result", least=0, flag="--log-f-check", metavar="N", group="DBMs and DBNs",
    )  # fmt: skip
    exact: str = setting(
        "auto",
        "exact log Z and log-likelihood by enumeration (for DBMs and DBNs also their log f(v), which then replaces "
        "the estimate): auto (if at most 25 units must be enumerated and, beyond 10 to 20 s of work, it costs no "
        "more than the estimators), always (up to 30 units), never. It runs in chunks within --max-memory",
        kind="choice", numbers="result", choices=EXACT_MODES, flag="--exact", group="run",
    )  # fmt: skip
    max_exact_units: int = setting(
        DEFAULT_MAX_UNITS, "exact='auto' enumerates at most 2^max_exact_units states", kind="count", numbers="result",
        least=1,
    )  # fmt: skip
    seed: int = setting(
        0, "random seed; the same seed and device give the same numbers", kind="seed", numbers="kept", flag="--seed",
        group="run",
    )  # fmt: skip
    test_subset: Optional[int] = setting(
        None,
        "evaluate on a fixed random subset of N test vectors (drawn with seed + 6, its indices in the JSON; all when "
        "N is at least the test set's size): trades precision for time where the time grows with the test set, as "
        "a DBM's or DBN's log f(v) estimates do (they do not depend on --steps)",
        kind="count", numbers="kept", least=2, why="a standard error needs two", none="all", flag="--test-subset",
        metavar="N",
        group="data",
    )  # fmt: skip
    max_memory: Optional[int] = setting(
        None,
        "bound on the run's peak memory, e.g. 512MB, 8GB, 1.5GiB. The work is cut into fixed shards "
        "(--shard-size) that run one batch at a time, so a large run takes many batches within the bound; every "
        "stage's peak (its batch, log-weights, schedule, the pilot's grid, the exact enumeration's chunks) is "
        "estimated before any work and a run that cannot fit is refused, naming the option to lower. It never "
        "changes the numbers",
        kind="size", least=1, none="half the memory free now, on the GPU for --device cuda", flag="--max-memory",
        metavar="SIZE", group="large runs",
    )  # fmt: skip
    shard_size: Optional[int] = setting(
        None,
        "chains per shard: AIS chains, and RAISE chains of whole test vectors (--shard-size // --raise-chains "
        "vectors, at least one); each shard has its own random stream, so this (unlike --max-memory or the number "
        "of processes) changes the numbers",
        kind="count", numbers="kept", least=1,
        none="as many as keep chains x units within 2^23, e.g. 6,533 for a 784-500 RBM: the default runs are one "
        "shard per stage",
        flag="--shard-size", metavar="CHAINS", group="large runs",
    )  # fmt: skip
    product_route: str = setting(
        "auto",
        "how the CPU products of Boltzmann layers are computed: auto times torch.mm, oneDNN, the table route "
        "(subset sums of weight rows, for layers that are samples) and, on CPUs with AMX tiles, the amx route (exact "
        "integer sums of the weights held as 31-bit integers, for layers that are samples) once per shape and takes "
        "the fastest; the choice and its timings are in the JSON (settings.product_routes). Routes agree up to float32 "
        "rounding: name the recorded one to reproduce a run bit for bit",
        kind="choice", choices=("auto", "mm", "onednn", "table", "amx"), flag="--product-route", group="run",
    )  # fmt: skip
    loop: str = setting(
        "auto",
        "how the annealing loops run: auto runs the AIS and RAISE steps of binary Boltzmann paths and fully visible "
        "models as step programs on CUDA (many steps captured in one CUDA graph, no host work between them) and the "
        "eager loop elsewhere; eager runs every step from Python, as before step programs; program runs the step "
        "programs on every device (eagerly off CUDA). The same distributions; other random numbers",
        kind="choice", numbers="kept", choices=("auto", "eager", "program"), flag="--loop", group="run",
    )  # fmt: skip
    gpu_products: str = setting(
        "model",
        "the matrix products of a step program on CUDA (binary RBMs, DBMs and DBNs in float32): model multiplies in "
        "the model's dtype; half-split multiplies the binary states (exact in bfloat16) by the weights split into "
        "bfloat16 terms on the tensor cores: three terms hold float32 weights exactly; tf32-split multiplies them by "
        "the weights split into two TF32 terms (faster, not exact); half-path and tf32-path (not yet run on a GPU) "
        "multiply them by the weights rounded to float16 or TF32, one product on the tensor cores: the chains anneal "
        "that rounded model, but the path still ends at the model itself (beta = 1), so AIS's estimate of Z stays "
        "unbiased for the model's while RAISE estimates the rounded model's log-likelihood (settings.gpu_rounding "
        "gives the measured shift for an RBM run in one AIS shard); certified runs (--until-gap) refuse both. The "
        "JSON gives the bound on how far a split can move any log-density (settings.gpu_product_error_bound, 0 where "
        "it is exact)",
        kind="choice", numbers="kept", choices=("model", "half-split", "tf32-split", "half-path", "tf32-path"),
        flag="--gpu-products",
        group="run",
    )  # fmt: skip
    gpu_fuse: str = setting(
        "auto",
        "the elementwise work of a step program on CUDA: none runs it one operation at a time; compile fuses each "
        "step's into a few kernels with torch.compile (needs Triton; the first compilation in a process takes about "
        "10 s); auto compiles for runs of at least 2 x 10^8 chain-steps, where that repays it, and runs unfused "
        "(with a note) where compiling fails. The same distributions, other rounding",
        kind="choice", numbers="kept", choices=("none", "auto", "compile"), flag="--gpu-fuse", group="run",
    )  # fmt: skip
    resume_interval: float = setting(
        60.0,
        "with --resume-file: seconds between saves of the annealing state inside a shard. Each save rewrites the "
        "whole file: 0 saves after every step (a 64-16 RBM run at K = 2,000 then took 4 times as long)",
        kind="number", least=0, flag="--resume-interval", metavar="SECONDS", group="large runs",
    )  # fmt: skip
    progress: bool = progress_setting()
    threads: Union[str, int, None] = threads_setting()

    def _validate(self) -> None:
        if self.ti_chains == 1:
            raise SettingsError(
                "{ti_chains} 1: thermodynamic integration's standard error is over chains and needs two; give 2 or "
                "more, or 0 for none",
                ("ti_chains",),
            )
        if self.log_f_check == 1:
            raise SettingsError(
                "{log_f_check} 1 cannot say whether the estimates rose: a standard error needs two test vectors; give "
                "2 or more, or 0 to skip the check",
                ("log_f_check",),
            )
        if self.betas is not None:
            k = len(self.betas) - 1
            if self.steps != k and self.steps != EvaluateSettings.steps:
                raise SettingsError(
                    f"{{steps}} is {self.steps} but the explicit schedule has K = {k} steps; leave {{steps}} out",
                    ("steps", "betas"),
                )
            object.__setattr__(self, "steps", k)
        adaptive = self.schedule == "adaptive" and self.betas is None
        if not adaptive and (self.pilot_chains is not None or self.pilot_grid is not None):
            field = "pilot_chains" if self.pilot_chains is not None else "pilot_grid"
            raise SettingsError(
                f"{{{field}}} sets the pilot of {{schedule}} adaptive; this run uses {{schedule}} {self.schedule}",
                (field, "schedule"),
            )
        importance = self.log_f_samples is not None
        ais = self.log_f_ais_steps is not None or self.log_f_ais_chains is not None
        ais_field = "log_f_ais_steps" if self.log_f_ais_steps is not None else "log_f_ais_chains"
        method = self.log_f_method
        if method == "auto" and importance and ais:
            raise SettingsError(
                f"{{log_f_samples}} sets importance sampling, {{{ais_field}}} per-vector AIS: choose one with "
                "{log_f_method} importance or {log_f_method} ais",
                ("log_f_samples", ais_field, "log_f_method"),
            )
        if method not in ("auto", "importance") and importance:
            raise SettingsError(
                f"{{log_f_samples}} sets importance sampling, but {{log_f_method}} is {method}; drop it or set "
                "{log_f_method} to importance",
                ("log_f_samples", "log_f_method"),
            )
        if method not in ("auto", "ais") and ais:
            raise SettingsError(
                f"{{{ais_field}}} sets per-vector AIS, but {{log_f_method}} is {method}; drop it or set "
                "{log_f_method} to ais",
                (ais_field, "log_f_method"),
            )

    # ------------------------------------------------------------------ what the settings resolve to
    @property
    def schedule_name(self) -> str:
        """The schedule's name, or 'explicit' for explicit betas."""
        return "explicit" if self.betas is not None else self.schedule

    @property
    def log_f_request(self) -> str:
        """The log f(v) estimator asked for: log_f_method, or under 'auto' the one a given budget chooses ('auto'
        when none was given: the plan decides by the model)."""
        if self.log_f_method != "auto":
            return self.log_f_method
        if self.log_f_samples is not None:
            return "importance"
        if self.log_f_ais_steps is not None or self.log_f_ais_chains is not None:
            return "ais"
        return "auto"

    def log_f_budget(self, name: str) -> int:
        """A log f(v) budget setting, its default when not given."""
        value = getattr(self, name)
        return LOG_F_BUDGET_DEFAULTS[name] if value is None else value

    @property
    def resolved_pilot_chains(self) -> int:
        return min(self.ais_chains, DEFAULT_PILOT_CHAINS) if self.pilot_chains is None else self.pilot_chains

    @property
    def resolved_pilot_grid(self) -> int:
        return DEFAULT_PILOT_GRID if self.pilot_grid is None else self.pilot_grid


def evaluate_settings(settings: Optional[EvaluateSettings], overrides: dict[str, Any]) -> EvaluateSettings:
    """`settings` (default: the defaults) with the keyword `overrides` of the API's functions; a tensor `schedule`
    is an explicit schedule (its `betas`); the pre-0.2 `settings={...}` dict of report labels is refused."""
    if isinstance(settings, dict):
        raise TypeError(
            "settings is an EvaluateSettings; the report's descriptive entries (e.g. the checkpoint path) are now "
            "passed as labels={...}"
        )
    overrides = dict(overrides)
    schedule = overrides.get("schedule")
    if schedule is not None and not isinstance(schedule, str):
        overrides["betas"] = overrides.pop("schedule")
        if overrides.get("steps") is None:
            overrides.pop("steps", None)
            overrides["steps"] = len(overrides["betas"]) - 1
    elif overrides.get("steps", 0) is None:  # steps=None: the default K, as before
        overrides.pop("steps")
    return with_overrides(EvaluateSettings, settings, overrides)
