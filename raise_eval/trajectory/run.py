"""Log Z and the test log-likelihood sandwich at every checkpoint of one training run: `evaluate_trajectory`.

1. The path: an independent start, then the checkpoints in training order (`trajectory_path`), `steps` sub-steps
   per link (`start_steps` on the first).
2. One AIS pass along it, read at the checkpoints (`ladder_pass`): log Z at every checkpoint.
3. BAR between neighbouring checkpoints from the same chains (`bar_ladder`): a second estimate of every log Z, and
   the health of every link (the one where the path is too coarse is named).
4. log f(v) of the test vectors at every checkpoint (exact for RBMs; enumerated or estimated for DBMs), and exact
   log Z where enumeration is affordable.
5. RAISE along the path truncated at a few checkpoints (the last among them): their conservative log-likelihoods,
   averaged with the control variate.
6. The verdict on the last checkpoint's sandwich (the conditions of a certified evaluation).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval import exact as exact_mod
from raise_eval.diagnostics import SandwichNumbers, Warning
from raise_eval.estimators.adaptive_links import adaptive_trajectory_pass, plan_links, plan_piece
from raise_eval.estimators.bar import bar_ladder
from raise_eval.estimators.ladder import ladder_pass
from raise_eval.estimators.raise_ import raise_log_likelihood
from raise_eval.estimators.smc import smc_ladder_pass
from raise_eval.estimators.unnormalized import log_unnormalized_estimate
from raise_eval.evaluation.plan import EXACT_AUTO_MIN_MACS, _start_biases
from raise_eval.io.datasets import check_binary
from raise_eval.paths.fully_visible_trajectory import fully_visible_base
from raise_eval.paths.trajectory import check_trajectory, trajectory_path
from raise_eval.runtime.threads import using_threads
from raise_eval.seeds import TRAJECTORY_LOG_F_STRIDE, TRAJECTORY_OFFSETS, stage_seed
from raise_eval.settings import SettingsError, with_overrides
from raise_eval.trajectory.report import CheckpointEstimate, LinkReport, TrajectoryInterrupted, TrajectoryReport
from raise_eval.trajectory.settings import TrajectorySettings
from raise_eval.trajectory.verdict import sandwich_verdict

PILOT_RESAMPLE_ESS = 0.5  # the adaptive links' pilot resamples its chains below half of them


def evaluate_trajectory(
    checkpoints: Sequence,
    test_data: Tensor,
    settings: Optional[TrajectorySettings] = None,
    *,
    training_steps: Optional[Sequence[int]] = None,
    names: Optional[Sequence[str]] = None,
    train_pixel_means: Optional[Tensor] = None,
    labels: Optional[dict[str, Any]] = None,
    exact_log_z: Optional[Sequence[Optional[float]]] = None,
    **overrides,
) -> TrajectoryReport:
    """Log Z (AIS and BAR), the AIS/RAISE sandwich of the test log-likelihood and the exact values where affordable,
    at every checkpoint of one run, from one pass along the training trajectory.

    Args:
        checkpoints: RBMs or DBMs of one architecture (`check_trajectory`), in training order, on the device and in
            the dtype to compute with.
        test_data: binary test vectors (N, n_visible).
        settings: a `TrajectorySettings`; keyword `overrides` change its fields:
            `evaluate_trajectory(models, test, steps=200, ais_chains=500)`.
        training_steps: each checkpoint's training step (for the report and the plot); 0, 1, ... when None.
        names: each checkpoint's name (e.g. its file); 'checkpoint i' when None.
        train_pixel_means: the training set's pixel means, for init='base-rates'.
        labels: entries the report's settings show (e.g. {"folder": path}).
        exact_log_z: each checkpoint's exact log Z from an earlier run (a report's `log_z_exact`s), used instead of
            enumerating again (None entries: not known); ignored with exact='never'.
    """
    settings = with_overrides(TrajectorySettings, settings, overrides)
    with using_threads(settings.threads), torch.no_grad():
        return _evaluate(
            list(checkpoints), test_data, settings, training_steps, names, train_pixel_means, labels, exact_log_z
        )


def raise_points(num_checkpoints: int, count: int) -> list[int]:
    """The indices (0-based, among the checkpoints) RAISE runs at: `count` evenly spread from the first to the last
    (the last alone for one; all of them when `count` reaches their number)."""
    if count >= num_checkpoints:
        return list(range(num_checkpoints))
    if count == 1:
        return [num_checkpoints - 1]
    return sorted({round(j * (num_checkpoints - 1) / (count - 1)) for j in range(count)})


def _evaluate(
    models, test_data, settings: TrajectorySettings, training_steps, names, train_pixel_means, labels, known_log_z
):
    start_all = time.perf_counter()
    check_trajectory(models)
    count = len(models)
    steps = list(range(count)) if training_steps is None else [int(s) for s in training_steps]
    names = [f"checkpoint {i}" for i in range(count)] if names is None else [str(n) for n in names]
    if len(steps) != count or len(names) != count:
        raise ValueError(f"{count} checkpoints need {count} training steps and names")
    if known_log_z is not None and len(known_log_z) != count:
        raise ValueError(f"exact_log_z has {len(known_log_z)} values for {count} checkpoints")
    model = models[-1]
    device, dtype = model.device, model.dtype
    test = _test_vectors(model, test_data, settings)
    notes: list[str] = []
    subset_indices = None
    if settings.test_subset is not None and settings.test_subset < test.shape[0]:
        order = torch.randperm(test.shape[0], generator=torch.Generator().manual_seed(_seed(settings, "test_subset")))
        subset_indices = order[: settings.test_subset].sort().values
        test = test[subset_indices.to(device)]
        notes.append(f"averages over a fixed random subset of {test.shape[0]} test vectors ({{test_subset}})")
    family = model.family
    if family == "fully-visible" and settings.links == "adaptive":
        # the pilot's segments and re-anchoring are built from layered machines' trajectory paths
        raise SettingsError(
            "{links} adaptive follows RBMs' and DBMs' trajectories; a fully visible run's takes {links} fixed "
            "(with {resample_ess} for SMC)",
            ("links",),
        )
    if family == "fully-visible":  # the base's fields from the training data's site frequencies
        base = fully_visible_base(models[0], settings.init, train_pixel_means)
    else:
        base = _start_biases(model, family, settings.init, train_pixel_means)
    path = trajectory_path(models, base if settings.init == "base-rates" else None)
    start_steps = settings.start_steps
    betas = path.schedule(settings.steps, first_link_steps=start_steps)
    knots = path.knot_indices(betas)
    timing: dict[str, float] = {}

    # Each stage keeps what it finished: Ctrl-C (or SIGTERM) part-way gives the report of the finished stages
    # (TrajectoryInterrupted), as `evaluate` does.
    run = bar = None
    log_f, log_f_method = [], []
    log_z_exact: list[Optional[float]] = []
    raised: dict[int, tuple[float, float]] = {}
    stage: Optional[str] = "the AIS pass along the trajectory"
    try:
        # 2-3. One pass, read at every point; BAR from its chains.
        t0 = time.perf_counter()
        plan = None
        if settings.links == "adaptive":
            stage = "the pilot of the adaptive links"
            plan = _plan(path, settings, _generator(device, _seed(settings, "pilot")))
            timing["pilot_seconds"] = plan.seconds
            notes.append(_plan_note(plan, settings))
            stage = "the SMC run along the adaptive links"
            run = adaptive_trajectory_pass(
                path, plan, settings.ais_chains, generator=_generator(device, _seed(settings, "ais")),
                resample_ess=settings.resample_ess, replicates=settings.replicates, progress=settings.progress,
            )  # fmt: skip
        else:
            run = _forward_pass(path, betas, knots, settings, _generator(device, _seed(settings, "ais")))
        timing["ais_seconds"] = run.seconds
        t0 = time.perf_counter()
        stage = "BAR between the checkpoints"
        bar = bar_ladder(
            run.forward, run.reverse, log_partition_initial=path.log_partition_initial, bootstrap=settings.bootstrap,
            generator=torch.Generator().manual_seed(_seed(settings, "bootstrap")),
        )  # fmt: skip
        timing["bar_seconds"] = time.perf_counter() - t0

        # 4. log f(v) and the exact values, checkpoint by checkpoint.
        stage = "log f(v) and the exact values"
        t0 = time.perf_counter()
        enumerate_exact, exact_note = _exact_affordable(models, test.shape[0], settings, int(betas.numel() - 1))
        if exact_note is not None:
            notes.append(exact_note)
        for i, m in enumerate(models):
            values, method = _log_f(m, test, settings, i, enumerate_exact)
            known = None if known_log_z is None or settings.exact == "never" else known_log_z[i]
            z = float(known) if known is not None else _exact_log_z(m, settings) if enumerate_exact else None
            log_f.append(values)
            log_f_method.append(method)
            log_z_exact.append(z)
        timing["log_f_and_exact_seconds"] = time.perf_counter() - t0

        # 5. RAISE at a few checkpoints, each along the path truncated there.
        stage = "RAISE"
        t0 = time.perf_counter()
        raise_subset = _raise_subset(test.shape[0], settings)
        for i in raise_points(count, settings.raise_checkpoints):
            point = path.checkpoint_points[i]
            if point == 0:  # the first checkpoint is the independent start: nothing to anneal
                continue
            if plan is None:
                piece = path.truncated(point)
                piece_betas = piece.schedule(settings.steps, first_link_steps=start_steps)
            else:  # the forward run's own schedule (and segment), which RAISE runs reversed
                piece, piece_betas = plan_piece(path, plan, point)
            result = raise_log_likelihood(
                piece, test[raise_subset.to(device)], piece_betas, settings.raise_chains,
                generator=_generator(device, _seed(settings, "raise")), progress=settings.progress,
            )  # fmt: skip
            cv = result.control_variate_mean(log_f[i], log_f[i][raise_subset.to(log_f[i].device)])
            raised[i] = (cv.mean, cv.stderr)
        timing["raise_seconds"] = time.perf_counter() - t0
        stage = None
    except KeyboardInterrupt:
        pass  # `stage` names where: the report below holds what finished

    estimates = []
    for i in range(len(log_z_exact) if bar is not None else 0):
        point = path.checkpoint_points[i]
        summary = run.summary(point)
        mean_log_f = float(log_f[i].double().mean())
        log_z = float(summary.estimate)
        exact_mean = None if log_z_exact[i] is None or log_f_method[i] != "exact" else mean_log_f - log_z_exact[i]
        raise_mean, raise_se = raised.get(i, (None, None))
        estimates.append(
            CheckpointEstimate(
                step=steps[i], label=names[i], log_z=log_z, log_z_stderr=float(summary.stderr),
                ess=float(summary.ess), log_z_lower=float(summary.lower), log_z_bar=float(bar.log_partition[point]),
                log_z_bar_stderr=float(bar.log_partition_stderr[point]), log_z_exact=log_z_exact[i],
                log_f_mean=mean_log_f, log_f_method=log_f_method[i], ais_mean=mean_log_f - log_z,
                bar_mean=mean_log_f - float(bar.log_partition[point]), raise_mean=raise_mean, raise_stderr=raise_se,
                exact_mean=exact_mean,
                resamplings=run.resamplings[point] if settings.resample_ess > 0 or plan is not None else None,
            )
        )  # fmt: skip
    point_names = ["start"] * (path.num_links + 1)
    for i, point in enumerate(path.checkpoint_points):
        point_names[point] = names[i]
    links = [
        LinkReport(
            link=h.link, start=point_names[h.link], end=point_names[h.link + 1], delta=float(bar.deltas[h.link]),
            stderr=float(bar.stderr[h.link]), forward=float(bar.forward_exp[h.link]),
            reverse=float(bar.reverse_exp[h.link]), overlap=h.overlap, problems=h.problems,
        )
        for h in (bar.health() if bar is not None else [])
    ]  # fmt: skip
    if stage is None:
        density = getattr(model, "typed_layers", False) and model.continuous  # continuous visible: log-densities
        warnings, verdict, interval, reasons = _verdict(
            estimates[-1], log_f[-1], test, settings, estimates[:-1], density
        )
    else:
        finished = "the checkpoints' estimates that finished are shown" if estimates else "no estimate finished"
        warnings, verdict, interval, reasons = [], "open", None, [f"interrupted during {stage}: {finished}"]
    timing["seconds"] = time.perf_counter() - start_all
    report_settings = {
        **settings.as_dict(),
        **(labels or {}),
        "num_checkpoints": count,
        "layer_sizes": list(model.layer_sizes) if family != "fully-visible" else [model.n_visible],
        "family": family,
        "start": "prepended" if path.checkpoint_points[0] == 1 else "the first checkpoint",
        "num_steps": int(betas.numel() - 1) if plan is None else plan.num_steps(),
        "anchors": None if plan is None else [names[path.checkpoint_points.index(a)] for a in plan.anchors],
        "test_subset_indices": None if subset_indices is None else subset_indices.tolist(),
        "device": str(device),
        "dtype": str(dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),  # what ran (the settings carry None once the command line has set it)
    }
    if family == "fully-visible":
        report_settings["units"] = [model.sites]
        report_settings["likelihood"] = "probability"
    elif model.typed_layers:  # as evaluate's report says them: the layers' unit types, a density or a probability
        report_settings["units"] = [layer.kind for layer in model.layers]
        report_settings["likelihood"] = "density" if model.continuous else "probability"
    report = TrajectoryReport(
        settings=report_settings, checkpoints=estimates, links=links, verdict=verdict, interval=interval,
        reasons=reasons, warnings=warnings, num_test=int(test.shape[0]), timing=timing, notes=notes,
        interrupted=stage,
    )  # fmt: skip
    if stage is not None:
        raise TrajectoryInterrupted(report)
    return report


def _forward_pass(path, betas: Tensor, knots: list[int], settings: TrajectorySettings, generator: torch.Generator):
    """The pass along the trajectory read at the knots: plain AIS (`ladder_pass`) when `resample_ess` is 0, else
    SMC in `replicates` groups (`smc_ladder_pass`)."""
    if settings.resample_ess == 0:
        return ladder_pass(
            path, betas, settings.ais_chains, rungs=knots, generator=generator, progress=settings.progress,
            desc="AIS along the trajectory",
        )  # fmt: skip
    return smc_ladder_pass(
        path, betas, settings.ais_chains, rungs=knots, generator=generator, resample_ess=settings.resample_ess,
        replicates=settings.replicates, sweeps=settings.rejuvenation_sweeps, progress=settings.progress,
        desc="SMC along the trajectory",
    )  # fmt: skip


def _plan(path, settings: TrajectorySettings, generator: torch.Generator):
    """The adaptive links' pilot (`plan_links`), resampling at PILOT_RESAMPLE_ESS whatever the main run does."""
    return plan_links(
        path, pilot_chains=settings.pilot_chains, generator=generator, target_cess=settings.target_cess,
        resample_ess=PILOT_RESAMPLE_ESS, sweeps=settings.rejuvenation_sweeps, max_link_steps=settings.max_link_steps,
        anchor_margin=settings.anchor_margin, max_sweeps=settings.max_sweeps, progress=settings.progress,
    )  # fmt: skip


def _plan_note(plan, settings: TrajectorySettings) -> str:
    anchors = len(plan.anchors)
    return (
        f"adaptive links: the pilot ({plan.pilot_chains} chains, {plan.pilot_steps} sub-steps, {plan.seconds:.1f} s) "
        f"chose {plan.num_steps()} sub-steps for the run of {settings.ais_chains} chains ({{target_cess}} "
        f"{settings.target_cess:g}), re-anchoring {anchors} checkpoint{'s' if anchors != 1 else ''} in temperature"
    )


def _test_vectors(model, test_data, settings: TrajectorySettings) -> Tensor:
    """The test vectors as the model's visible states, in its dtype and device: binary vectors, or a typed visible
    layer's states (from the forms users keep them in), or a fully visible model's site states. A DBM of typed layers
    whose log f(v) cannot be enumerated within max_exact_units is refused here, before any work (it has no estimator
    of log f(v))."""
    if model.family == "fully-visible":
        test = torch.as_tensor(test_data)
        model.check_sites(test, "test data")
        return test.to(device=model.device, dtype=torch.int64 if model.sites == "categorical" else model.dtype)
    if not model.typed_layers:
        test = check_binary(torch.as_tensor(test_data), model.n_visible, "test data")
        return test.to(device=model.device, dtype=model.dtype)
    units = exact_mod.log_f_units(model)
    if model.num_layers > 2 and units > settings.max_exact_units:
        raise SettingsError(
            f"log f(v) of a DBM of typed layers ({model.describe()}) is computed only by enumeration, of {units} "
            f"units here: raise {{max_exact_units}} to {units} (2^{units} states per test vector), or evaluate a "
            "narrower model"
        )
    return model.prepare_visible(torch.as_tensor(test_data), "test data")


def _generator(device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _raise_subset(n_test: int, settings: TrajectorySettings) -> Tensor:
    if settings.raise_examples >= n_test:
        return torch.arange(n_test)
    order = torch.randperm(n_test, generator=torch.Generator().manual_seed(_seed(settings, "raise_subset")))
    return order[: settings.raise_examples].sort().values


def _exact_affordable(models, n_test: int, settings: TrajectorySettings, num_steps: int) -> tuple[bool, Optional[str]]:
    """Whether the exact values are enumerated (log Z of every checkpoint, and a DBM's log f(v)), and the note that
    says why not: 'always' does, 'never' does not, and 'auto' follows `evaluate`'s rule: an enumeration of the
    checkpoints that costs more multiply-add equivalents than about 10 s on one core and than the estimators
    themselves is skipped (a checkpoint beyond max_exact_units units is skipped whatever the cost)."""
    if settings.exact != "auto":
        return settings.exact == "always", None
    work = 0.0
    for m in models:
        cost = exact_mod.exact_cost(m, n_test)
        if cost.log_z_units > settings.max_exact_units:
            continue  # not enumerated (`_exact_log_z`)
        work += cost.log_z_work
        if getattr(m, "num_layers", 2) > 2 and cost.log_f_units <= settings.max_exact_units:
            work += cost.log_f_work
    last = models[-1]
    if last.family == "fully-visible":  # a scan reads every coupling of every site twice
        per_pass = 2.0 * last.n_visible**2 * last.num_states
    else:
        per_pass = 2.0 * sum(w.numel() for w in last.weights)  # two products per chain and step
    raise_runs = min(settings.raise_checkpoints, len(models))
    raise_chains = min(settings.raise_examples, n_test) * settings.raise_chains * raise_runs
    estimator = per_pass * num_steps * (settings.ais_chains + raise_chains)
    if work > max(EXACT_AUTO_MIN_MACS, estimator):
        return False, (
            f"exact values skipped: enumerating the checkpoints would cost about {work:.1e} multiply-add "
            f"equivalents, more than the estimators themselves ({estimator:.1e}); use {{exact}} always to force"
        )
    return True, None


def _seed(settings: TrajectorySettings, stage: str) -> int:
    return stage_seed(settings.seed, stage, TRAJECTORY_OFFSETS)


def _log_f(
    model, test: Tensor, settings: TrajectorySettings, index: int, enumerate_exact: bool = True
) -> tuple[Tensor, str]:
    """log f(v) of every test vector (float64) and how it was had: 'exact', or 'importance' for a DBM whose
    enumeration is beyond max_exact_units or not affordable (`_exact_affordable`)."""
    if model.family == "fully-visible":  # log f(v) in closed form
        return model.log_unnormalized(test).double(), "exact"
    units = exact_mod.log_f_units(model)
    enumerated = (enumerate_exact or model.typed_layers) and units <= settings.max_exact_units  # typed: no estimator
    if model.num_layers == 2 or enumerated:
        return exact_mod.log_unnormalized_visible(model, test, max_units=max(units, 1)).double(), "exact"
    estimate = log_unnormalized_estimate(
        model, test, method="importance", num_samples=settings.log_f_samples,
        generator=_generator(model.device, _seed(settings, "log_f") + TRAJECTORY_LOG_F_STRIDE * index),
        progress=settings.progress,
    )  # fmt: skip
    return estimate.log_unnormalized.double(), "importance"


def _exact_log_z(model, settings: TrajectorySettings) -> Optional[float]:
    """Exact log Z of a checkpoint (called where `_exact_affordable` says to enumerate), None beyond max_exact_units."""
    units = exact_mod.exact_cost(model, 1).log_z_units
    if units > settings.max_exact_units:
        return None
    return float(exact_mod.log_partition(model, max_units=units))


def _verdict(
    final: CheckpointEstimate, log_f: Tensor, test: Tensor, settings: TrajectorySettings,
    earlier: Sequence[CheckpointEstimate] = (), density: bool = False,
):  # fmt: skip
    """(warnings, verdict, interval, reasons) of the last checkpoint's sandwich; `earlier`: the checkpoints before it
    (their best test log-likelihood, exact where known, else AIS's, can keep the verdict open)."""
    if final.raise_mean is None:
        return [], "open", None, ["RAISE did not run on the last checkpoint"]
    numbers = SandwichNumbers(
        ais_mean=final.ais_mean, ais_stderr=final.log_z_stderr, ais_ess=final.ess, ais_chains=settings.ais_chains,
        ais_lower=final.log_z_lower, raise_mean=final.raise_mean, raise_stderr=final.raise_stderr,
        exact_mean=final.exact_mean, log_z=final.log_z,
    )  # fmt: skip
    verdict, interval, reasons, warnings = sandwich_verdict(
        numbers, log_f=log_f, test=test, log_f_method=final.log_f_method, init=settings.init,
        tolerance=settings.tolerance,
        earlier_best=max((c.exact_mean if c.exact_mean is not None else c.ais_mean for c in earlier), default=None),
        density=density,
    )  # fmt: skip
    # the evaluation's advice (a log f(v) check) is not an option of this command: say what is
    warnings = [w if w.code != "log-f-unchecked" else Warning(w.code, TRAJECTORY_LOG_F_UNCHECKED) for w in warnings]
    return warnings, verdict, interval, reasons


TRAJECTORY_LOG_F_UNCHECKED = (
    "log f(v) of the last checkpoint is estimated by importance sampling, which a trajectory run does not check "
    "for bias: an estimate whose proposal misses posterior modes is confidently wrong, so the AIS log-likelihood "
    "may be off by more than its standard error. Give {exact} always (with {max_exact_units} at least the DBM's "
    "units to enumerate) where the model is narrow enough, or certify the last checkpoint on its own (raise-eval "
    "evaluate --until-gap, or raise_eval.certify), which checks it."
)
