"""From settings to a plan: what an evaluation of this model on these test vectors will do, decided once.

`plan_evaluation(model, test_data, settings)` checks what depends on the model and the data (the test vectors'
width and values, the base rates, the exact enumeration's reach, the log f(v) estimator the model allows), decides
what follows (the path, the schedule, the shard size and the memory bound, whether exact values are computed, which
log f(v) estimator 'auto' takes) and counts every stage's peak memory against the bound (`evaluation.memory`),
before any work. The stages (`evaluation.stages`) read the plan and change nothing in it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval import exact as exact_mod
from raise_eval.evaluation import fully_visible as fv
from raise_eval.evaluation.memory import CostEstimate, check_memory
from raise_eval.evaluation.settings import ALWAYS_EXACT_LIMIT, EvaluateSettings, evaluate_settings
from raise_eval.evaluation.stages import plan_memory
from raise_eval.io.datasets import check_binary
from raise_eval.kernels.split_products import split_error_bound, terms_needed, tf32_split_error_bound
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.contracts import declared_family
from raise_eval.paths.boltzmann import BoltzmannPath, data_base_rates, make_path, uniform_base
from raise_eval.paths.mixed import mixed_data_base, mixed_uniform_base
from raise_eval.paths.posterior import DBNPosteriorPath
from raise_eval.runtime import distributed, product_routes
from raise_eval.runtime.sharding import default_max_memory, default_shard_size
from raise_eval.schedules import make_schedule
from raise_eval.seeds import stage_seed
from raise_eval.settings import Named, SettingsError
from raise_eval.step_programs import ROUNDED_PATHS

# 'auto' takes per-vector AIS for a DBN only while its unit-wise sweeps (chains x steps x sum over the directed
# hidden layers of n_l (n_{l-1} + n_{l+1}) elementwise updates over the test set) would take at most
# AUTO_DBN_AIS_MAX_SECONDS, at the rates measured with scripts/benchmark_log_f.py on the 784-500-2000 DBN (400 MNIST
# vectors x 10 chains, K = 5; 1.39e6 updates per chain-step), rounded down: the C kernel (raise_eval.models.native) at
# DBN_NATIVE_SWEEP_UPDATES_PER_SECOND per thread (2026-11-26, an Intel Xeon: 145 us per chain-step at one thread
# with the other core busy, 9.6e9 a second), the PyTorch sweep (no C compiler, or a GPU) at
# DBN_SWEEP_UPDATES_PER_SECOND whatever the threads (486 to 605 us per chain-step on an AMD EPYC, 2.3e9 to 2.9e9 a
# second); beyond it, importance sampling, checked.
DBN_SWEEP_UPDATES_PER_SECOND = 2.2e9
DBN_NATIVE_SWEEP_UPDATES_PER_SECOND = 8e9
AUTO_DBN_AIS_MAX_SECONDS = 1200.0
# exact='auto' skips an enumeration that costs more multiply-add equivalents than this (about 10 s on one core) and
# than the estimators themselves
EXACT_AUTO_MIN_MACS = 2e11


@dataclass(frozen=True)
class EvaluationPlan:
    """Everything an evaluation needs, decided once (`plan_evaluation`); `at_steps(K)` is the same plan at another K,
    for `raise_eval.certification`.

    settings: the checked `EvaluateSettings`; test: the binary test vectors (N, n_visible) in the model's dtype and
    device; path: the geometric path of the annealed machine (a DBN's top RBM) from the chosen start; betas: the
    schedule (None for 'adaptive', chosen by the pilot); report_settings: the report's "settings" entry;
    shard_size, max_memory: resolved from the settings or their defaults for this model and device; log_f_method:
    how log f(v) is obtained ('exact', 'importance', 'ais' or 'mean-field'); cost: every stage's peak memory.
    """

    settings: EvaluateSettings
    model: Any
    family: str
    test: Tensor
    path: BoltzmannPath
    betas: Optional[Tensor]
    report_settings: dict[str, Any]
    shard_size: int
    max_memory: int
    use_exact: bool
    exact_note: Optional[str]
    log_f_method: str
    log_f_note: Optional[str]
    rank: int
    world: int
    cost: Optional[CostEstimate] = None
    start_note: Optional[str] = None  # why the start is not what init asked for (a fully visible model's uniform base)

    # The settings the stages and the cost model read, by their short names.
    @property
    def steps(self) -> int:
        return self.settings.steps

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def ais_chains(self) -> int:
        return self.settings.ais_chains

    @property
    def raise_chains(self) -> int:
        return self.settings.raise_chains

    @property
    def dbn_start(self) -> str:
        return self.settings.dbn_start

    @property
    def raise_examples(self) -> int:
        return min(self.settings.raise_examples, self.n_test)

    @property
    def schedule_name(self) -> str:
        return self.settings.schedule_name

    @property
    def pilot_chains(self) -> Optional[int]:
        return self.settings.resolved_pilot_chains if self.schedule_name == "adaptive" else None

    @property
    def pilot_grid(self) -> Optional[int]:
        return self.settings.resolved_pilot_grid if self.schedule_name == "adaptive" else None

    @property
    def max_exact_units(self) -> int:
        return self.settings.max_exact_units

    @property
    def progress(self) -> bool:
        return self.settings.progress

    @property
    def ti_chains(self) -> int:
        return self.settings.ti_chains

    @property
    def log_f_check(self) -> int:
        return self.settings.log_f_check if self.log_f_method != "exact" else 0

    @property
    def n_test(self) -> int:
        return int(self.test.shape[0])

    @property
    def exact_log_f(self) -> bool:
        """Whether log f(v) is enumerated (DBMs and DBNs with exact values; an RBM's and a fully visible model's are
        closed-form anyway)."""
        return self.family not in CLOSED_FORM_LOG_F and self.use_exact

    @property
    def log_f_options(self) -> dict[str, Any]:
        """`log_unnormalized_estimate`'s method and budget (the estimator's, for an estimated log f(v))."""
        s = self.settings
        return dict(
            # exact: an RBM's closed form, which `log_unnormalized_estimate` gives whatever the method
            method="importance" if self.log_f_method == "exact" else self.log_f_method,
            num_samples=s.log_f_budget("log_f_samples"),
            ais_steps=s.log_f_budget("log_f_ais_steps"),
            ais_chains=s.log_f_budget("log_f_ais_chains"),
        )

    def at_steps(self, steps: int) -> EvaluationPlan:
        """This plan at K = `steps` (a named schedule; 'adaptive' gets its own pilot at that K), its memory checked."""
        plan = self.checked_at_steps(steps)
        if plan.schedule_name == "adaptive":
            return plan
        return dataclasses.replace(plan, betas=make_schedule(plan.schedule_name, plan.steps))

    def checked_at_steps(self, steps: int) -> EvaluationPlan:
        """This plan at K = `steps` with its memory counted and checked (SettingsError when it passes the bound), its
        schedule not made yet (betas None): what `at_steps` and `certify` (for max_steps) check before any work."""
        if self.schedule_name == "explicit":
            raise SettingsError("an explicit schedule ({betas}) fixes K; name a {schedule} to change K")
        settings = self.settings.replace(steps=steps)
        plan = dataclasses.replace(
            self, settings=settings, betas=None, report_settings={**self.report_settings, "steps": settings.steps}
        )
        cost = CostEstimate(plan_memory(plan), plan.max_memory)
        check_memory(cost.stages, plan.max_memory)
        return dataclasses.replace(plan, cost=cost)


@torch.no_grad()  # the plan reads the model's parameters, never differentiates them
def plan_evaluation(
    model,
    test_data: Tensor,
    settings: Optional[EvaluateSettings] = None,
    *,
    train_pixel_means: Optional[Tensor] = None,
    labels: Optional[dict[str, Any]] = None,
    **overrides,
) -> EvaluationPlan:
    """Check what the settings cannot say alone (against the model and the data) and decide what follows from them:
    the path, the schedule, the shard size within the memory bound, whether the exact values are computed, the log
    f(v) estimator. The peak memory of every stage is counted (`plan.cost`) and a plan that would pass the memory
    bound is refused (SettingsError naming the setting to lower), before anything is allocated;
    `raise_eval.estimate_cost(plan)` adds the predicted seconds.

    Args:
        model: an `RBM`, `DBM` (or any `LayeredBoltzmannMachine`), `DBN` or `FullyVisibleModel`, on the device and
            in the dtype to compute with.
        test_data: binary test vectors (N, n_visible); for a `MixedBoltzmannMachine`, its visible layer's states
            in any form `prepare_visible` reads (real vectors, integer codes or one-hot rows, ±1 or 0/1 spins); for a
            `FullyVisibleModel`, its site states (N, L): integer codes, -1/+1 or 0/1.
        settings: the `EvaluateSettings` (default: all defaults); keyword `overrides` change its fields.
        train_pixel_means: means over the training set of the annealed machine's visible layer, for
            init='base-rates': pixel means for an RBM or DBM, for a DBN the recognition means of its top RBM's
            visible layer (`recognition_means`), for a `MixedBoltzmannMachine` the means of its visible layer's
            sufficient statistics (`raise_eval.visible_statistics(model, train_data)`), for a `FullyVisibleModel` its
            sites' state frequencies (L, q) (the same function; without them the base is uniform, with a note).
        labels: entries for the report's settings that describe the inputs (e.g. the checkpoint path).
    """
    settings = evaluate_settings(settings, overrides)
    test_data = _as_test_tensor(model, test_data)
    family = model_family(model)
    annealed = model.top if family == "DBN" else model
    if family == fv.FAMILY:
        fv.check_no_gpu_products(settings)
    else:
        _check_gpu_products(settings, annealed)
        fv.check_no_ti(settings, family)
    cost = exact_mod.exact_cost(model, 1)
    needed = max(cost.log_z_units, cost.log_f_units)
    if settings.exact == "always" and not cost.enumerable:
        raise SettingsError(f"{{exact}} always: {cost.refusal}")
    if settings.exact == "always" and needed > ALWAYS_EXACT_LIMIT:
        raise SettingsError(
            f"exact enumeration of 2^{needed} states is out of reach (the limit is 2^{ALWAYS_EXACT_LIMIT}); "
            "use {exact} auto or never"
        )
    if family == fv.FAMILY:  # site states in the model's convention
        test = fv.fully_visible_test(model, test_data)
    elif model.typed_layers:  # typed layers: the visible layer's states, from the forms users keep them in
        test = model.prepare_visible(test_data.detach(), "test data")
    else:
        test = check_binary(test_data, model.n_visible, "test data").detach().to(device=model.device, dtype=model.dtype)
    test, subset_settings = _test_subset(test, settings.test_subset, settings.seed)
    n_test = test.shape[0]
    use_exact, exact_note = _exact_decision(model, settings, n_test)
    if family == "DBM" and model.typed_layers and not use_exact:
        raise SettingsError(
            f"log f(v) of a DBM of typed layers ({model.describe()}) is computed only by enumeration, which "
            f"{exact_note or '{exact} never'} rules out here; use {{exact}} always (within 2^{ALWAYS_EXACT_LIMIT} "
            "states)"
        )
    log_f_method, log_f_note = _log_f_method(model, family, settings, n_test, use_exact)
    exact_note, log_f_note = (None if n is None else Named(n) for n in (exact_note, log_f_note))
    start_note = None
    if family == fv.FAMILY:
        start, start_note = fv.fully_visible_start(annealed, settings.init, train_pixel_means)
    else:
        start = _start_biases(annealed, family, settings.init, train_pixel_means)
    path = make_path(annealed, start)
    shard_size = default_shard_size(model) if settings.shard_size is None else settings.shard_size
    max_memory = default_max_memory(model.device) if settings.max_memory is None else settings.max_memory
    rank, world = distributed.rank_and_world()
    plan = EvaluationPlan(
        settings=settings,
        model=model,
        family=family,
        test=test,
        path=path,
        betas=None,
        report_settings={},
        shard_size=shard_size,
        max_memory=max_memory,
        use_exact=use_exact,
        exact_note=exact_note,
        log_f_method=log_f_method,
        log_f_note=log_f_note,
        rank=rank,
        world=world,
        start_note=None if start_note is None else Named(start_note),
    )
    report_settings = _report_settings(plan, subset_settings, labels)
    plan = dataclasses.replace(plan, report_settings=report_settings)
    cost_estimate = CostEstimate(plan_memory(plan), max_memory)
    check_memory(cost_estimate.stages, max_memory)
    betas = None
    if plan.schedule_name == "explicit":
        betas = torch.tensor(settings.betas, dtype=torch.float64)
    elif plan.schedule_name != "adaptive":
        betas = make_schedule(plan.schedule_name, settings.steps)
    return dataclasses.replace(plan, cost=cost_estimate, betas=betas)


def _report_settings(plan: EvaluationPlan, subset_settings: dict, labels: Optional[dict]) -> dict[str, Any]:
    """The report's "settings" entry (the JSON's keys; what a resume file must agree on is drawn from it)."""
    s, model = plan.settings, plan.model
    estimated = plan.log_f_method != "exact"
    options = plan.log_f_options
    out = {
        "model": model.describe() if plan.family == fv.FAMILY else _layers_label(plan.family, model),
        "init": s.init,
        "schedule": plan.schedule_name,
        "steps": s.steps,
        "ais_chains": s.ais_chains,
        "raise_examples": plan.raise_examples,
        "raise_chains": s.raise_chains,
        **({"dbn_start": s.dbn_start} if plan.family == "DBN" else {}),
        "log_f_method": plan.log_f_method,
        "log_f_samples": options["num_samples"] if plan.log_f_method == "importance" else 0,
        "log_f_ais_steps": options["ais_steps"] if plan.log_f_method == "ais" else 0,
        "log_f_ais_chains": options["ais_chains"] if plan.log_f_method == "ais" else 0,
        "log_f_check": s.log_f_check if estimated else 0,
        "cv_alpha": s.cv_alpha,
        "seed": s.seed,
        "device": str(model.device),
        "dtype": str(model.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        **_product_route(s.product_route),
        "loop": s.loop,
        "gpu_products": s.gpu_products,
        "gpu_fuse": s.gpu_fuse,
        **_gpu_product_bound(s.gpu_products, plan.path),
        "torch": torch.__version__,
        "data": "",
        "split": "",
        "shard_size": plan.shard_size,
        "max_memory": plan.max_memory,
        "processes": plan.world,
    }
    out.update(subset_settings)
    if plan.family == fv.FAMILY:
        out.update(fv.fully_visible_report_settings(model), init="uniform" if plan.start_note else s.init)
        out["ti_chains"] = s.ti_chains
    elif model.typed_layers:  # typed layers; a Gaussian visible layer's log-likelihood is a log-density
        out["units"] = [layer.kind for layer in model.layers]
        out["likelihood"] = "density" if model.continuous else "probability"
    if plan.schedule_name == "adaptive":
        out.update(pilot_chains=plan.pilot_chains, pilot_grid=plan.pilot_grid, pilot_seed=stage_seed(s.seed, "pilot"))
    if plan.schedule_name == "explicit":
        out["schedule_betas"] = list(s.betas)  # a named schedule is its name and K: not these
    out.update(labels or {})
    return out


def _layers_label(family: str, model) -> str:
    """A Boltzmann machine as the report's settings name it: 'RBM 784-500', or its family and typed layers."""
    return f"{family} {model.describe() if model.typed_layers else '-'.join(map(str, model.layer_sizes))}"


def _check_gpu_products(settings, model) -> None:
    """Refuse products other than the model's (the splits, the rounded paths) where no step program would use them,
    naming the setting."""
    if settings.gpu_products == "model":
        return
    where = None
    if model.typed_layers:
        where = "a model of typed layers (its annealing has no step program yet)"
    elif model.device.type != "cuda":
        where = f"a run on {model.device} (they are for CUDA: add --device cuda)"
    elif model.dtype != torch.float32:
        where = f"a {str(model.dtype).replace('torch.', '')} model (they hold float32 weights: use --dtype float32)"
    elif settings.loop == "eager":
        where = "{loop} eager (the eager loop multiplies in the model's dtype)"
    if where is not None:
        raise SettingsError(
            f"{{gpu_products}} {settings.gpu_products} has nothing to compute in {where}", ("gpu_products",)
        )


def plan_loop_options(settings) -> dict[str, Any]:
    """The `step_programs.loop_options` of a run's settings (`loop`, `gpu_products`, `gpu_fuse`)."""
    programs = {"auto": "cuda", "eager": "never", "program": "always"}[settings.loop]
    return {"programs": programs, "products": settings.gpu_products, "fuse": settings.gpu_fuse}


def _gpu_product_bound(setting: str, path) -> dict[str, Any]:
    """With split products, the bound on how far they move a log-density (`kernels.split_products`); none for the
    rounded paths, which bound nothing (RAISE estimates the rounded model: `evaluation.rounding` measures the shift)."""
    if setting == "model" or setting in ROUNDED_PATHS or path is None or path.model.typed_layers:
        return {}
    model = path.model
    if setting == "tf32-split":
        return {"gpu_product_error_bound": tf32_split_error_bound(model.weights, model.weight_scale)}
    terms = terms_needed(model.weights)
    return {"gpu_product_error_bound": split_error_bound(model.weights, model.weight_scale, terms)}


def _product_route(setting: str) -> dict[str, Any]:
    """The run's product route as it will be taken: product_route (the setting's, else the one that
    RAISE_EVAL_PRODUCT_ROUTE forces, else "auto": timed) and product_route_forced_by ("setting", the variable's
    name, or None)."""
    if setting != "auto":
        return {"product_route": setting, "product_route_forced_by": "setting"}
    route = product_routes.environment_route()
    if route is None:
        return {"product_route": "auto", "product_route_forced_by": None}
    return {"product_route": route, "product_route_forced_by": product_routes.ROUTE_ENV}


def _as_test_tensor(model, test_data) -> Tensor:
    """Check the model's kind and take the test vectors as a tensor (a NumPy array or nested lists are converted);
    TypeError saying what to pass, before any work."""
    from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
    from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine

    boltzmann = isinstance(model, (LayeredBoltzmannMachine, DBN, MixedBoltzmannMachine))
    if not boltzmann and declared_family(model) != fv.FAMILY:
        raise TypeError(
            f"model must be an RBM, DBM, DBN or FullyVisibleModel from raise_eval.models (e.g. RBM(W, vbias, hbias) "
            f"with W shaped (n_visible, n_hidden)), got {type(model).__name__}; a VAE or your own decoder is evaluated "
            "by raise_eval.evaluate_bdmc"
        )
    if isinstance(test_data, Tensor):
        return test_data
    if test_data is None:
        raise TypeError("test_data is None: pass the binary test vectors, a tensor or array shaped (N, n_visible)")
    try:
        return torch.as_tensor(test_data, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError(
            f"test_data must be binary vectors shaped (N, n_visible), a tensor or an array; got a "
            f"{type(test_data).__name__} that torch cannot read as numbers ({e})"
        ) from None


# The families `evaluate` runs through this plan, and those whose log f(v) is closed form (no estimator runs).
EVALUATED_FAMILIES = ("RBM", "DBM", "DBN", fv.FAMILY)
CLOSED_FORM_LOG_F = ("RBM", fv.FAMILY)


def model_family(model) -> str:
    """'RBM', 'DBM', 'DBN' or 'fully-visible': the family the model's class declares (`models.contracts.Model`); a
    model of another family (e.g. a directed model: `bdmc`) is refused here, naming it."""
    family = declared_family(model)
    if family not in EVALUATED_FAMILIES:
        what = f"{'an' if isinstance(family, str) and family[:1] in 'aeiou' else 'a'} {family} model"
        if not isinstance(family, str):
            what = f"an instance of {type(model).__name__} (it declares no family)"
        where = _OTHER_FAMILIES.get(family, "for a VAE or decoder use raise-eval bdmc")
        raise TypeError(f"evaluate runs on RBMs, DBMs, DBNs and fully visible models; this is {what}: {where}")
    return family


# Where a model of a family `evaluate` does not run yet is served instead.
_OTHER_FAMILIES = {
    "directed": "use raise-eval bdmc (or raise_eval.bdmc)",
    "energy": "raise_eval.evaluate runs it through evaluate_energy, not through this plan (the command line "
    "does not run energy models yet)",
}


def recognition_means(model: DBN, train_data: Tensor) -> Tensor:
    """Mean over `train_data` of the recognition probabilities of x_{L-1} (the top RBM's visible layer), pushed
    up deterministically: the data base rates of a DBN's top RBM, shaped (n_{L-1},)."""
    x = train_data.to(device=model.device, dtype=model.dtype)
    for l in range(len(model.weights) - 1):
        x = torch.sigmoid(model.recognition_logits(x, l))
    return x.double().mean(0)


def _test_subset(test: Tensor, size: Optional[int], seed: int) -> tuple[Tensor, dict[str, Any]]:
    """The test vectors to evaluate on: a fixed random subset of `size` of them (their own stream, seed + 6; all
    when size is None or at least N), and the settings that record it."""
    n = test.shape[0]
    if size is None or size >= n:
        return test, {"test_subset": None}
    generator = torch.Generator().manual_seed(stage_seed(seed, "test_subset"))
    indices = torch.randperm(n, generator=generator)[:size].sort().values
    return test[indices.to(test.device)], {
        "test_subset": size,
        "test_subset_seed": stage_seed(seed, "test_subset"),
        "test_vectors_total": n,
        "test_subset_indices": indices.tolist(),
    }


def _log_f_method(
    model, family: str, settings: EvaluateSettings, n_test: int, use_exact: bool
) -> tuple[str, Optional[str]]:
    """How log f(v) is obtained, and a note saying why when it is not what was asked for."""
    requested = settings.log_f_request
    closed_form = family in CLOSED_FORM_LOG_F
    if closed_form or use_exact:
        note = None
        if not closed_form and settings.log_f_method not in ("auto",):
            note = f"log f(v) is exact here (enumerated), so {{log_f_method}} {settings.log_f_method} was not used"
        elif closed_form and settings.log_f_method != "auto":
            whose = "an RBM's" if family == "RBM" else "a fully visible model's"
            note = f"{whose} log f(v) is exact (closed form), so {{log_f_method}} {settings.log_f_method} was not used"
        return "exact", note
    note = None
    if requested == "auto":
        requested, note = _auto_log_f_method(model, family, n_test, settings)
    if requested == "mean-field" and family == "DBN":
        raise SettingsError(
            "the mean-field bound ({log_f_method} mean-field) is for DBMs; a DBN's log f(v) is estimated by "
            "importance or ais"
        )
    return requested, note


def _auto_log_f_method(model, family: str, n_test: int, settings: EvaluateSettings) -> tuple[str, Optional[str]]:
    """What log_f_method='auto' estimates log f(v) with, and a note saying why. Measured against exact values on
    784-20-500 models (scripts/measure_log_f.py, results/log_f): per-vector AIS matched importance sampling's error
    in a quarter of its time on the DBM, and on the DBN, at about equal time, erred 0.007 nats on average (worst
    0.71) where importance sampling erred 0.30 (worst 14.6). A DBN's unit-wise sweeps are slow, though, so a wide
    DBN gets importance sampling (and the log f(v) check) rather than hours of AIS."""
    if family == "DBM":
        return "ais", None
    if family != "DBN":
        return "importance", None
    sizes = model.layer_sizes
    steps, chains = settings.log_f_budget("log_f_ais_steps"), settings.log_f_budget("log_f_ais_chains")
    per_sweep = sum(sizes[l] * (sizes[l - 1] + sizes[l + 1]) for l in range(1, len(sizes) - 1))
    updates = float(n_test) * chains * steps * per_sweep
    rate, how = _dbn_sweep_rate(model)
    if updates <= AUTO_DBN_AIS_MAX_SECONDS * rate:
        return "ais", None
    return "importance", (
        f"log f(v) by importance sampling: per-vector AIS ({{log_f_method}} ais) would make {updates:.1e} unit "
        f"updates here (about {updates / rate / 60:.0f} min {how}), so {{log_f_method}} auto chose importance "
        "sampling; the log f(v) check says whether it can be trusted"
    )


def _dbn_sweep_rate(model) -> tuple[float, str]:
    """(unit updates a second that a DBN's per-vector AIS is expected to make here, how), for 'auto'."""
    if DBNPosteriorPath(model).takes_native_sweep(model.device):
        threads = torch.get_num_threads()
        return DBN_NATIVE_SWEEP_UPDATES_PER_SECOND * threads, f"with the C sweep on {threads} thread(s)"
    return DBN_SWEEP_UPDATES_PER_SECOND, "with the PyTorch sweep"


def _start_biases(annealed, family: str, init: str, train_pixel_means) -> list[Tensor]:
    """The base biases of the annealed machine's start distribution (data base rates or uniform), checked."""
    if annealed.typed_layers:  # typed layers: train_pixel_means are the visible layer's training statistics
        if init != "base-rates":
            return mixed_uniform_base(annealed)
        if train_pixel_means is None:
            raise SettingsError(
                "{init} base-rates needs the training data's statistics of the visible layer (train_pixel_means = "
                "raise_eval.visible_statistics(model, train_data)); pass them, or use {init} uniform"
            )
        return mixed_data_base(annealed, train_pixel_means)
    if init != "base-rates":
        return uniform_base(annealed)
    dbn_means = "recognition means of the top RBM's visible layer (raise_eval.recognition_means(dbn, train_data))"
    if train_pixel_means is None:
        what = dbn_means if family == "DBN" else "pixel means"
        raise SettingsError(
            f"{{init}} base-rates needs the training-set {what} (train_pixel_means); pass them, or use {{init}} uniform"
        )
    means = torch.as_tensor(train_pixel_means, dtype=torch.float64).flatten()
    if means.numel() != annealed.n_visible or not bool(((means >= 0) & (means <= 1)).all()):
        what = f" (for a DBN: the {dbn_means})" if family == "DBN" else ""
        bad = "" if means.numel() != annealed.n_visible else " (some are NaN or outside [0, 1])"
        raise ValueError(
            f"train_pixel_means must be {annealed.n_visible} values in [0, 1]{what}; got {means.numel()} values{bad}"
        )
    return data_base_rates(annealed, means.unsqueeze(0))


def estimator_macs(model, settings: EvaluateSettings, n_test: int) -> float:
    """Multiply-adds of the estimators (AIS, RAISE, log f(v)): about two products with every weight matrix per
    chain and step, and per importance sample or per AIS step and chain of log f(v)."""
    family = model_family(model)
    if family == fv.FAMILY:
        return fv.fully_visible_macs(model, settings, n_test)
    per_pass = 2.0 * sum(w.numel() for w in model.weights)
    annealed = model.top if family == "DBN" else model  # a DBN anneals its top RBM only
    raise_chains_total = min(settings.raise_examples, n_test) * settings.raise_chains
    total = 2.0 * sum(w.numel() for w in annealed.weights) * settings.steps * (settings.ais_chains + raise_chains_total)
    method = settings.log_f_request
    if family != "RBM" and method != "mean-field":
        if method == "importance":
            work = settings.log_f_budget("log_f_samples")
        else:
            work = settings.log_f_budget("log_f_ais_steps") * settings.log_f_budget("log_f_ais_chains")
        total += per_pass * n_test * work
    return total


def _exact_decision(model, settings: EvaluateSettings, n_test: int) -> tuple[bool, Optional[str]]:
    """Whether to compute the exact values, and the note that says why not (exact='auto' only)."""
    if settings.exact == "never":
        return False, None
    if settings.exact == "always":
        return True, None
    cost = exact_mod.exact_cost(model, n_test)
    if not cost.enumerable:
        return False, f"exact values skipped: {cost.refusal}"
    needed = max(cost.log_z_units, cost.log_f_units)
    if needed > settings.max_exact_units:
        hint = " (use {exact} always to force)" if needed <= ALWAYS_EXACT_LIMIT else ""
        return False, f"exact values skipped: they would enumerate 2^{needed} states{hint}"
    work = cost.log_z_work + cost.log_f_work
    estimator = estimator_macs(model, settings, n_test)
    if work > max(EXACT_AUTO_MIN_MACS, estimator):
        return False, (
            f"exact values skipped: enumerating 2^{needed} states would cost about {work:.1e} multiply-add "
            f"equivalents, more than the estimators themselves ({estimator:.1e}); use {{exact}} always to force"
        )
    return True, None
