"""Evaluate an RBM checkpoint: AIS (optimistic), RAISE (conservative) and, when tractable, the exact answer.

`evaluate_rbm` is the Python API behind `raise-eval evaluate`; it returns an `EvaluationReport` that prints as a
table and serializes to JSON with the keys

    log_z.ais.estimate, log_z.ais.stderr, log_z.exact,
    log_likelihood.ais.mean, log_likelihood.raise.mean, log_likelihood.raise.stderr,
    log_likelihood.exact, log_likelihood.gap, settings, timing.seconds

(null where not applicable, e.g. exact values of large models).

Averages are over the whole test set. AIS gives mean log f(v) - log Z-hat. RAISE runs on a random subset of n
test vectors and is extended to the whole set with the control variate log f(v) (RAISE paper, Sec. 4).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from models.boltzmann.rbm import RBM
from raise_eval import exact as exact_mod
from raise_eval.datasets import check_binary
from raise_eval.estimators.ais import AISResult, ais
from raise_eval.estimators.raise_ import RAISEResult, raise_log_likelihood
from raise_eval.paths.boltzmann import BoltzmannPath, data_base_rates, uniform_base
from raise_eval.schedules import make_schedule

INITS = ("base-rates", "uniform")
EXACT_MODES = ("auto", "always", "never")
ALWAYS_EXACT_LIMIT = 30  # 'always' enumerates up to 2^30 states (minutes); beyond that it refuses


@dataclass
class EvaluationReport:
    """Everything `raise-eval evaluate` prints; `to_dict()` gives the JSON document."""

    settings: dict[str, Any]
    num_test: int
    ais: AISResult
    raise_: RAISEResult
    ais_mean: float
    raise_mean: float
    raise_stderr: float
    log_z_exact: Optional[float]
    exact_mean: Optional[float]
    timing: dict[str, Optional[float]]
    notes: list[str] = field(default_factory=list)

    @property
    def gap(self) -> float:
        """AIS - RAISE average log-likelihood (a large positive gap: at least one estimate is off)."""
        return self.ais_mean - self.raise_mean

    def to_dict(self) -> dict[str, Any]:
        r = self.raise_
        return {
            "log_z": {
                "ais": {
                    "estimate": self.ais.estimate,
                    "stderr": float(self.ais.stderr),
                    "interval_3sigma": [float(self.ais.lower), float(self.ais.upper)],
                    "ess": float(self.ais.ess),
                    "num_chains": self.ais.num_chains,
                },
                "exact": self.log_z_exact,
            },
            "log_likelihood": {
                "ais": {"mean": self.ais_mean},
                "raise": {
                    "mean": self.raise_mean,
                    "stderr": self.raise_stderr,
                    "subset_mean": r.mean,
                    "subset_stderr": r.stderr,
                    "num_examples": int(r.log_likelihood.shape[0]),
                    "num_chains": r.num_chains,
                    "per_example": r.log_likelihood,
                },
                "exact": self.exact_mean,
                "gap": self.gap,
                "num_test": self.num_test,
            },
            "settings": self.settings,
            "timing": dict(self.timing),
            "notes": list(self.notes),
        }

    def format_table(self) -> str:
        s = self.settings
        r = self.raise_
        model = s.get("model", "RBM")
        lines = [
            f"raise-eval evaluate {s.get('checkpoint', '')}: {model}, {s['dtype']} on {s['device']}",
            f"data: {s['data']} ({s['split']}, {self.num_test} vectors); start: {s['init']}; "
            f"{s['schedule']} schedule, K = {s['steps']}; seed {s['seed']}",
            "",
            f"{'':28}{'estimate':>12}{'± s.e.':>10}{'time':>9}",
            "log Z",
            f"  {'AIS':26}{self.ais.estimate:12.4f}{float(self.ais.stderr):10.4f}{_secs(self.timing['ais_seconds'])}"
            f"   {self.ais.num_chains} chains, ESS {float(self.ais.ess):.0f}, ±3σ "
            f"[{_fmt(float(self.ais.lower))}, {_fmt(float(self.ais.upper))}]",
        ]
        if self.log_z_exact is not None:
            lines.append(f"  {'exact':26}{self.log_z_exact:12.4f}{'':10}{_secs(self.timing['exact_seconds'])}")
        lines += [
            "average test log-likelihood (nats)",
            f"  {'AIS (optimistic)':26}{self.ais_mean:12.4f}{float(self.ais.stderr):10.4f}",
            f"  {'RAISE (conservative)':26}{self.raise_mean:12.4f}{self.raise_stderr:10.4f}"
            f"{_secs(self.timing['raise_seconds'])}   {r.log_likelihood.shape[0]} examples x {r.num_chains} chains",
            f"  {'gap (AIS - RAISE)':26}{self.gap:12.4f}",
        ]
        if self.exact_mean is not None:
            lines.append(f"  {'exact':26}{self.exact_mean:12.4f}")
        lines.append(f"total wall time {self.timing['seconds']:.1f} s")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _secs(x: Optional[float]) -> str:
    return f"{x:8.1f}s" if x is not None else f"{'':9}"


def _fmt(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else "-inf"


def evaluate_rbm(
    model: RBM,
    test_data: Tensor,
    *,
    init: str = "base-rates",
    train_pixel_means: Optional[Tensor] = None,
    schedule: str = "linear",
    steps: int = 1000,
    ais_chains: int = 1000,
    raise_examples: int = 100,
    raise_chains: int = 20,
    seed: int = 0,
    exact: str = "auto",
    max_exact_units: int = exact_mod.DEFAULT_MAX_UNITS,
    progress: bool = False,
    settings: Optional[dict[str, Any]] = None,
) -> EvaluationReport:
    """Estimate the average test log-likelihood of `model` with AIS and RAISE (and exactly when tractable).

    Args:
        model: the RBM, on the device and in the dtype to compute with.
        test_data: binary test vectors (N, n_visible).
        init: 'base-rates' (needs `train_pixel_means`) or 'uniform': the initial distribution of both estimators.
        train_pixel_means: mean of each visible unit over the training set (n_visible,).
        schedule, steps: annealing schedule name and K.
        ais_chains: AIS chains M.
        raise_examples: test vectors n for RAISE (a random subset, without replacement; all when n >= N).
        raise_chains: RAISE chains per vector C.
        seed: AIS uses a generator seeded with `seed`, RAISE one seeded with `seed + 1`.
        exact: 'auto' (when the smaller layer has at most `max_exact_units` units), 'always' (up to 30 units;
            refused beyond) or 'never'.
        progress: tqdm progress bars.
        settings: extra entries for the report's settings (e.g. the checkpoint path).
    """
    if init not in INITS:
        raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    if exact not in EXACT_MODES:
        raise ValueError(f"exact must be one of {', '.join(EXACT_MODES)}, got {exact!r}")
    for name, value in (("ais_chains", ais_chains), ("raise_examples", raise_examples), ("raise_chains", raise_chains)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    smaller = min(model.n_visible, model.n_hidden)
    if exact == "always" and smaller > ALWAYS_EXACT_LIMIT:
        raise ValueError(
            f"exact enumeration of 2^{smaller} states is out of reach (the limit is 2^{ALWAYS_EXACT_LIMIT}); "
            "use --exact auto or never"
        )
    test = check_binary(test_data, model.n_visible, "test data").to(device=model.device, dtype=model.dtype)
    betas = make_schedule(schedule, steps)
    if init == "base-rates":
        if train_pixel_means is None:
            raise ValueError(
                "init='base-rates' needs the training-set pixel means (train_pixel_means); pass them, or use "
                "init='uniform'"
            )
        means = torch.as_tensor(train_pixel_means, dtype=torch.float64).flatten()
        if means.numel() != model.n_visible or bool(((means < 0) | (means > 1)).any()):
            raise ValueError(f"train_pixel_means must be {model.n_visible} values in [0, 1]")
        base = data_base_rates(model, means.unsqueeze(0))
    else:
        base = uniform_base(model)
    path = BoltzmannPath(model, base)
    device = model.device
    start_total = time.perf_counter()

    ais_result = ais(
        path, betas, ais_chains, generator=torch.Generator(device=device).manual_seed(seed), progress=progress
    )
    log_f_all = model.log_unnormalized_prob(test).double()
    ais_mean = float(log_f_all.mean()) - ais_result.estimate

    n_test = test.shape[0]
    subset_gen = torch.Generator().manual_seed(seed + 1)
    if raise_examples >= n_test:
        subset = torch.arange(n_test)
    else:
        subset = torch.randperm(n_test, generator=subset_gen)[:raise_examples].sort().values
    raise_result = raise_log_likelihood(
        path,
        test[subset.to(device)],
        betas,
        raise_chains,
        generator=torch.Generator(device=device).manual_seed(seed + 1),
        progress=progress,
    )
    cv = raise_result.control_variate_mean(log_f_all)
    raise_mean, raise_se = cv.mean, cv.stderr

    log_z_exact = exact_mean = exact_seconds = None
    notes = []
    if exact == "always" or (exact == "auto" and smaller <= max_exact_units):
        t0 = time.perf_counter()
        log_z_exact = exact_mod.log_partition(model, max_units=max(max_exact_units, smaller))
        exact_mean = float(log_f_all.mean()) - log_z_exact
        exact_seconds = time.perf_counter() - t0
    elif exact == "auto":
        hint = " (use --exact always to force)" if smaller <= ALWAYS_EXACT_LIMIT else ""
        notes.append(f"exact values skipped: they would enumerate 2^{smaller} states{hint}")
    total = time.perf_counter() - start_total
    all_settings = {
        "model": f"RBM {model.n_visible}-{model.n_hidden}",
        "init": init,
        "schedule": schedule,
        "steps": steps,
        "ais_chains": ais_chains,
        "raise_examples": int(subset.numel()),
        "raise_chains": raise_chains,
        "seed": seed,
        "device": str(device),
        "dtype": str(model.dtype).replace("torch.", ""),
        "data": "",
        "split": "",
    }
    all_settings.update(settings or {})
    return EvaluationReport(
        settings=all_settings,
        num_test=n_test,
        ais=ais_result,
        raise_=raise_result,
        ais_mean=ais_mean,
        raise_mean=raise_mean,
        raise_stderr=raise_se,
        log_z_exact=log_z_exact,
        exact_mean=exact_mean,
        timing={
            "seconds": total,
            "ais_seconds": ais_result.seconds,
            "raise_seconds": raise_result.seconds,
            "exact_seconds": exact_seconds,
        },
        notes=notes,
    )
