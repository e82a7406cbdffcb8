"""Evaluate a directed model (a VAE) with BDMC: the API behind `raise-eval bdmc`.

Protocol (BDMC paper, Sec. 4; BREAD, Sec. 3.2): the model has been fitted to real data; simulate N examples from it,
keeping each example's latents as an exact posterior sample; then sandwich log p(x) with forward AIS (stochastic
lower bound) and reverse AIS from the exact sample (stochastic upper bound) at several K. The estimators in common
use are compared against this ground truth on the same examples: the ELBO and IWAE-k with the encoder. BREAD's
Jeffreys bound is reported for each K. Optionally the same estimators run on real test data (forward AIS only: no
exact posterior sample exists there), so that their gaps on real and simulated data can be compared, and AIDE
measures the encoder against AIS.

HMC step sizes come from one pilot run (independent randomness, forward only) and are then fixed, so both bounds
keep their guarantees (see `raise_eval.kernels.hmc`).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.estimators.aide import AISInference, EncoderInference, aide
from raise_eval.estimators.ais import ais
from raise_eval.estimators.bdmc import BDMCResult, bdmc
from raise_eval.diagnostics import GAP_NATS, Warning
from raise_eval.estimators.importance import elbo, iwae
from raise_eval.kernels.hmc import HMCKernel, tune_hmc
from raise_eval.outputs import save_figure
from raise_eval.paths.directed import DirectedPath
from raise_eval.schedules import SCHEDULES, make_schedule
from raise_eval.stats import mean_and_stderr
from raise_eval.threads import Threads, with_threads

AIDE_KEYS = ("num_examples", "steps", "Ng", "Nt", "Mg", "Mt")  # aide_settings' keys, each a positive integer
DEFAULT_AIDE_EXAMPLES = 20
DEFAULT_PILOT_STEPS = 500  # K of the HMC pilot (or the largest K asked for, when smaller)


@dataclass
class BDMCReport:
    """Results of `evaluate_bdmc`; `format_table()` prints them, `to_dict()` is the JSON document.

    A run stopped part-way (Ctrl-C, or an error in a stage) keeps the stages that finished: `interrupted` names the
    stage that did not, `error` says what went wrong (None for Ctrl-C), and the table and the JSON show the rest.
    """

    settings: dict[str, Any]
    sandwich: dict[int, BDMCResult]
    baselines: dict[str, Tensor]  # name -> per-example estimates (N,) on the simulated examples
    real: dict[str, Tensor] = field(default_factory=dict)  # name -> per-example estimates on real data
    aide: Optional[Any] = None
    step_sizes: Optional[dict] = None
    timing: dict[str, float] = field(default_factory=dict)
    interrupted: Optional[str] = None
    error: Optional[str] = None

    @property
    def complete(self) -> bool:
        return self.interrupted is None

    @property
    def ground_truth(self) -> Optional[Tensor]:
        """Per-example midpoint of the tightest sandwich (largest K), shaped (N,); None before any K finished."""
        if not self.sandwich:
            return None
        r = self.sandwich[max(self.sandwich)]
        return 0.5 * (r.lower + r.upper)

    @property
    def warnings(self) -> list[Warning]:
        """`bdmc-open` when the tightest sandwich is wider than GAP_NATS: its midpoint is then no ground truth."""
        if not self.sandwich:
            return []
        k_max = max(self.sandwich)
        gap = self.sandwich[k_max].summary()["gap"]["mean"]
        if gap <= GAP_NATS:
            return []
        return [
            Warning(
                "bdmc-open",
                f"the BDMC sandwich at K = {k_max} is {gap:.2f} nats wide, more than the {GAP_NATS:g} nat by which "
                f"models are commonly compared: the truth lies anywhere between its ends, so its midpoint is no "
                f"ground truth and the 'vs midpoint' differences are uncertain by up to {gap / 2:.2f} nats. Raise K "
                "(--steps) until the gap closes.",
            )
        ]

    def _baseline_summary(self, values: Tensor) -> dict:
        mean, se = mean_and_stderr(values)
        diff = diff_se = None
        if self.ground_truth is not None:
            diff, diff_se = mean_and_stderr(values.double() - self.ground_truth)
        return {"mean": mean, "stderr": se, "minus_bdmc_midpoint": diff, "minus_bdmc_midpoint_stderr": diff_se}

    def to_dict(self) -> dict:
        truth = self.ground_truth
        out = {
            "complete": self.complete,
            "interrupted_during": self.interrupted,
            "error": self.error,
            "settings": self.settings,
            "simulated": {
                "bdmc": {str(k): r.to_dict() for k, r in self.sandwich.items()},
                "ground_truth_midpoint": None if truth is None else mean_and_stderr(truth)[0],
                **{name: self._baseline_summary(v) for name, v in self.baselines.items()},
            },
            "hmc_step_sizes": self.step_sizes,
            "timing": self.timing,
            "warnings": [w.to_dict() for w in self.warnings],
        }
        if self.real:
            out["real"] = {name: dict(zip(("mean", "stderr"), mean_and_stderr(v))) for name, v in self.real.items()}
        if self.aide is not None:
            out["aide"] = self.aide.to_dict()
        return out

    def format_table(self) -> str:
        s = self.settings
        lines = [
            f"raise-eval bdmc {_model_source(s)}: {s['model']}, {s['dtype']} on {s['device']}",
            f"data: {s['num_examples']} examples simulated from the model (their latents are exact posterior "
            f"samples); seed {s['seed']}",
            f"kernel: {s['kernel']}; {s['schedule']} schedule; {s['chains']} forward and {s['chains']} reverse "
            "chains per example",
            "",
            "average log p(x) on the simulated examples (nats)",
            f"  {'BDMC':8}{'lower (AIS)':>13}{'upper (rev.)':>14}{'gap ± s.e.':>18}{'Jeffreys bound':>16}{'time':>9}",
        ]
        for k in s.get("steps", sorted(self.sandwich)):
            if k not in self.sandwich:
                lines.append(f"  K={k:<6}{'(not run)':>13}")
                continue
            sm = self.sandwich[k].summary()
            gap = f"{sm['gap']['mean']:.3f} ± {sm['gap']['stderr']:.3f}"
            lines.append(
                f"  K={k:<6}{sm['lower']['mean']:13.3f}{sm['upper']['mean']:14.3f}{gap:>18}"
                f"{sm['jeffreys_bound']['mean']:16.3f}{self.sandwich[k].seconds:8.1f}s"
            )
        if self.ground_truth is not None:
            k_max = max(self.sandwich)
            truth, truth_se = mean_and_stderr(self.ground_truth)
            closed = not self.warnings
            label = "truth" if closed else "midpoint"
            lines += [
                "",
                f"  {'estimator':34}{'estimate':>11}{'vs ' + label:>11}{'± s.e.':>9}",
                f"  {'BDMC midpoint, K=' + str(k_max) + (' (truth)' if closed else ' (open)'):34}{truth:11.3f}",
            ]
            for name, v in self.baselines.items():
                b = self._baseline_summary(v)
                lines.append(
                    f"  {name:34}{b['mean']:11.3f}{b['minus_bdmc_midpoint']:11.3f}"
                    f"{b['minus_bdmc_midpoint_stderr']:9.3f}"
                )
            lines.append(
                f"  ('vs {label}': paired difference from the midpoint of the K={k_max} sandwich, example by example; "
                f"the midpoint's own average has a standard error of {truth_se:.2f} over the examples)"
            )
        elif self.baselines:  # no sandwich finished: the estimates alone
            lines += ["", f"  {'estimator':34}{'estimate':>11}{'± s.e.':>9}"]
            for name, v in self.baselines.items():
                m, se = mean_and_stderr(v)
                lines.append(f"  {name:34}{m:11.3f}{se:9.3f}")
        if self.real:
            lines += [
                "",
                f"the same estimators on real data ({s.get('real_data')}, {s.get('real_examples')} examples):",
                f"  {'estimator':34}{'estimate':>11}{'± s.e.':>9}",
            ]
            for name, v in self.real.items():
                m, se = mean_and_stderr(v)
                lines.append(f"  {name:34}{m:11.3f}{se:9.3f}")
        if self.aide is not None:
            a = self.aide
            lines += [
                "",
                f"AIDE, encoder vs AIS (K={s.get('aide_steps')}): symmetric KL {a.mean:.3f} ± {a.stderr:.3f} nats "
                f"(Ng={a.num_gold}, Nt={a.num_target}, Mg={a.gold_meta}, Mt={a.target_meta}; "
                f"{a.per_example.numel()} examples, {a.seconds:.0f} s)",
            ]
        lines.append(f"total wall time {self.timing.get('seconds', 0.0):.1f} s")
        if self.interrupted is not None:
            why = "Ctrl-C" if self.error is None else f"an error ({self.error})"
            lines.append(f"stopped during {self.interrupted} by {why}: the numbers above are what finished")
        lines += [f"warning [{w.code}]: {w.message}" for w in self.warnings]
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """Bounds against K with the baselines as horizontal lines (needs matplotlib: pip install .[plot])."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ks = sorted(self.sandwich)
        lower = [self.sandwich[k].summary()["lower"]["mean"] for k in ks]
        upper = [self.sandwich[k].summary()["upper"]["mean"] for k in ks]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(ks, lower, "o-", label="forward AIS (lower bound)")
        ax.plot(ks, upper, "s-", label="reverse AIS (upper bound)")
        for i, (name, v) in enumerate(self.baselines.items()):
            ax.axhline(float(v.double().mean()), linestyle="--", color=f"C{i + 2}", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("intermediate distributions K")
        ax.set_ylabel("average log p(x) (nats)")
        ax.set_title(f"BDMC on {self.settings['num_examples']} simulated examples")
        ax.legend(fontsize=8)
        fig.tight_layout()
        try:
            save_figure(fig, path, dpi=120)  # whole or not at all; marked: a later run may replace it
        finally:
            plt.close(fig)


def make_kernel_factory(
    model,
    *,
    schedule: str,
    tune_steps: int,
    num_leapfrog: int,
    target_accept: float,
    pilot_chains: int,
    generator: torch.Generator,
    progress: bool = False,
):
    """A function path -> kernel: Gibbs (None) for binary latents, pilot-tuned HMC for continuous ones."""
    if model.latent_type == "binary":
        return lambda path: None, None
    summaries = {}

    def factory(path: DirectedPath):
        schedule_sizes = tune_hmc(
            path,
            make_schedule(schedule, tune_steps),
            num_chains=pilot_chains,
            num_leapfrog=num_leapfrog,
            target_accept=target_accept,
            generator=generator,
            progress=progress,
        )
        summaries.setdefault("step_sizes", schedule_sizes.to_dict())
        return HMCKernel(path, schedule_sizes, num_leapfrog)

    return factory, summaries


class BDMCInterrupted(KeyboardInterrupt):
    """Ctrl-C during `evaluate_bdmc`: `report` holds the stages that finished (`report.interrupted` names the
    stage in progress)."""

    def __init__(self, report: BDMCReport):
        super().__init__(f"interrupted during {report.interrupted}")
        self.report = report


class BDMCFailed(RuntimeError):
    """A stage of `evaluate_bdmc` raised: `report` holds the stages that finished before it (`report.interrupted`
    names the stage, `report.error` the error), and the error itself is the `__cause__`."""

    def __init__(self, report: BDMCReport):
        super().__init__(f"BDMC failed during {report.interrupted}: {report.error}")
        self.report = report


def check_bdmc_settings(
    *,
    num_examples: int,
    chains: int,
    steps: tuple,
    schedule: str,
    num_leapfrog: int,
    target_accept: float,
    pilot_chains: int,
    iwae_samples: tuple,
    elbo_samples: int,
    pilot_steps: int = DEFAULT_PILOT_STEPS,
    aide_settings: Optional[dict] = None,
    names: Optional[dict[str, str]] = None,
) -> None:
    """Raise ValueError, saying what is wrong, for settings `evaluate_bdmc` cannot run (before any work). `names`
    maps a setting to the name the message uses for it (the command line's options); by default its own name."""
    names = dict(names or {})

    def positive(name: str, value) -> None:
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            what = "positive integers" if isinstance(value, (list, tuple)) else "a positive integer"
            raise ValueError(f"{names.get(name, name)} must be {what}, got {value!r}")

    for name, value in (
        ("num_examples", num_examples),
        ("chains", chains),
        ("steps", steps),
        ("num_leapfrog", num_leapfrog),
        ("pilot_chains", pilot_chains),
        ("pilot_steps", pilot_steps),
        ("iwae_samples", iwae_samples),
        ("elbo_samples", elbo_samples),
    ):
        positive(name, value)
    if schedule not in SCHEDULES:
        raise ValueError(f"{names.get('schedule', 'schedule')} must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if isinstance(target_accept, bool) or not isinstance(target_accept, (int, float)) or not 0 < target_accept < 1:
        raise ValueError(
            f"{names.get('target_accept', 'target_accept')} is the HMC pilot's target acceptance rate, a number "
            f"strictly between 0 and 1 (the BDMC paper's 0.65), got {target_accept!r}"
        )
    if aide_settings is None:
        return
    unknown = sorted(set(aide_settings) - set(AIDE_KEYS))
    if unknown:
        raise ValueError(f"aide_settings takes {', '.join(AIDE_KEYS)}; unknown: {', '.join(unknown)}")
    for key, value in aide_settings.items():
        names.setdefault(f"aide_{key}", f"aide_settings[{key!r}]")
        positive(f"aide_{key}", value)
    n = aide_settings.get("num_examples", min(DEFAULT_AIDE_EXAMPLES, num_examples))
    if n > num_examples:
        raise ValueError(
            f"AIDE runs on {n} of the simulated examples ({names['aide_num_examples']}), but only {num_examples} "
            f"are simulated ({names.get('num_examples', 'num_examples')}): ask for at most {num_examples}"
        )


@with_threads
def evaluate_bdmc(
    model,
    *,
    num_examples: int = 100,
    chains: int = 4,
    steps: tuple = (100, 1000, 10000),
    schedule: str = "sigmoid",
    num_leapfrog: int = 10,
    target_accept: float = 0.65,
    pilot_chains: int = 4,
    pilot_steps: int = DEFAULT_PILOT_STEPS,
    iwae_samples: tuple = (1, 100, 1000),
    elbo_samples: int = 100,
    real_data: Optional[Tensor] = None,
    aide_settings: Optional[dict] = None,
    seed: int = 0,
    progress: bool = False,
    settings: Optional[dict] = None,
    threads: Threads = "auto",
) -> BDMCReport:
    """Run the BDMC protocol on `model` (see the module docstring).

    Args:
        num_examples: simulated examples N. chains: forward and reverse chains per example.
        steps: the values of K. schedule: schedule name (default: the BDMC paper's sigmoid).
        num_leapfrog, target_accept, pilot_chains, pilot_steps: HMC and its pilot tuning (continuous latents);
            target_accept is strictly between 0 and 1.
        iwae_samples, elbo_samples: the encoder baselines (models with `posterior_approximation`).
        real_data: optional real test vectors (M, data_dim): ELBO, IWAE and forward AIS at the largest K.
        aide_settings: optional {'num_examples', 'steps', 'Ng', 'Nt', 'Mg', 'Mt'} to run AIDE for the encoder
            (the model must have one); num_examples (default 20, at most N) of the simulated examples.
        threads: torch threads for this call, as for `raise_eval.evaluate`: 'auto' (default: the idle cores, at
            most torch's current count), an int, or None (torch's setting); the caller's count is restored.

    The settings are checked before any work (`check_bdmc_settings`; ValueError). The stages (simulation, HMC pilot,
    encoder baselines, the sandwich at each K, real data, AIDE) run in that order; at Ctrl-C `BDMCInterrupted` (a
    KeyboardInterrupt) and at an error in a stage `BDMCFailed` carry the report of the stages that finished.
    """
    check_bdmc_settings(
        num_examples=num_examples,
        chains=chains,
        steps=tuple(steps),
        schedule=schedule,
        num_leapfrog=num_leapfrog,
        target_accept=target_accept,
        pilot_chains=pilot_chains,
        pilot_steps=pilot_steps,
        iwae_samples=tuple(iwae_samples),
        elbo_samples=elbo_samples,
        aide_settings=aide_settings,
    )
    check_bdmc_model(model, aide=aide_settings is not None)
    start_total = time.perf_counter()
    # The parameters' device and dtype; a decoder that is a plain function has none: then the buffers' (the prior's).
    tensors = itertools.chain(model.parameters(), model.buffers()) if hasattr(model, "parameters") else iter(())
    param = next(tensors, None)
    device = param.device if param is not None else torch.device("cpu")
    aide_steps = None if aide_settings is None else aide_settings.get("steps", max(steps))
    all_settings = {
        "model": model.describe() if hasattr(model, "describe") else type(model).__name__,
        "num_examples": num_examples,
        "chains": chains,
        "steps": sorted(steps),
        "schedule": schedule,
        "kernel": "single-site Gibbs"
        if model.latent_type == "binary"
        else f"HMC, {num_leapfrog} leapfrog steps, step sizes from a pilot run (target acceptance {target_accept})",
        "seed": seed,
        "device": str(device),
        "dtype": str(param.dtype if param is not None else torch.get_default_dtype()).replace("torch.", ""),
        "iwae_samples": list(iwae_samples),
        "elbo_samples": elbo_samples,
        "threads": torch.get_num_threads(),
    }
    if aide_settings is not None:
        all_settings["aide_steps"] = aide_steps
    all_settings.update(settings or {})
    report = BDMCReport(all_settings, sandwich={}, baselines={})
    g = torch.Generator(device=device).manual_seed(seed)
    stage = "the simulation of the examples"
    try:
        z, x = model.sample_joint(num_examples, g)
        report.settings["dtype"] = str(x.dtype).replace("torch.", "")
        path = DirectedPath(model, x)
        kernel_for, summaries = make_kernel_factory(
            model,
            schedule=schedule,
            tune_steps=min(max(steps), pilot_steps),
            num_leapfrog=num_leapfrog,
            target_accept=target_accept,
            pilot_chains=pilot_chains,
            generator=g,
            progress=progress,
        )
        stage = "the HMC pilot"
        t0 = time.perf_counter()
        kernel = kernel_for(path)
        report.timing["pilot_seconds"] = time.perf_counter() - t0
        report.step_sizes = summaries.get("step_sizes") if summaries else None

        proposal = model.posterior_approximation() if hasattr(model, "posterior_approximation") else None
        if proposal is not None:
            stage = "the encoder baselines"
            report.baselines.update(_encoder_baselines(model, x, proposal, elbo_samples, iwae_samples, g))

        exact_start = path.state_from_latents(z.unsqueeze(1).expand(-1, chains, -1).contiguous())
        for k in sorted(steps):
            stage = f"BDMC at K={k}"
            report.sandwich[k] = bdmc(
                path, exact_start, make_schedule(schedule, k), chains, generator=g, kernel=kernel, progress=progress
            )
            report.timing[f"bdmc_K{k}_seconds"] = report.sandwich[k].seconds

        if real_data is not None:
            stage = "the real data"
            real_x = real_data.to(device=device, dtype=x.dtype)
            real = {}
            if proposal is not None:
                real.update(_encoder_baselines(model, real_x, proposal, elbo_samples, iwae_samples, g))
            real_path = DirectedPath(model, real_x)
            k = max(steps)
            forward = ais(
                real_path, make_schedule(schedule, k), chains, generator=g, kernel=kernel_for(real_path),
                progress=progress,
            )
            real[f"AIS K={k} (lower bound)"] = forward.log_normalizer
            report.real = real

        if aide_settings is not None and proposal is not None:
            stage = "AIDE"
            n = aide_settings.get("num_examples", min(DEFAULT_AIDE_EXAMPLES, num_examples))
            gold = AISInference(model, make_schedule(schedule, aide_steps), kernel_for, progress=progress)
            report.aide = aide(
                gold,
                EncoderInference(proposal),
                x[:n],
                num_gold=aide_settings.get("Ng", 20),
                num_target=aide_settings.get("Nt", 20),
                gold_meta=aide_settings.get("Mg", 2),
                target_meta=aide_settings.get("Mt", 1),
                generator=g,
            )
    except KeyboardInterrupt:
        report.interrupted = stage
        report.timing["seconds"] = time.perf_counter() - start_total
        raise BDMCInterrupted(report) from None
    except Exception as e:
        report.interrupted, report.error = stage, f"{type(e).__name__}: {e}"
        report.timing["seconds"] = time.perf_counter() - start_total
        raise BDMCFailed(report) from e
    report.timing["seconds"] = time.perf_counter() - start_total
    return report


def _model_source(settings: dict) -> str:
    """The CHECKPOINT or '--model FILE.py:FACTORY' the model came from ('' when neither is recorded)."""
    if settings.get("model_factory"):
        return f"--model {settings['model_factory']}"
    return settings.get("checkpoint") or ""


def check_bdmc_model(model, *, aide: bool = False) -> None:
    """ValueError unless `model` is a directed model BDMC can sandwich (`sample_joint`), with an encoder
    (`posterior_approximation`) when AIDE is asked for."""
    if not hasattr(model, "sample_joint"):
        raise ValueError(
            f"BDMC evaluates directed models (VAEs) with sample_joint; got a {type(model).__name__} (use "
            "raise_eval.evaluate for RBMs, DBMs and DBNs)"
        )
    if aide and (not hasattr(model, "posterior_approximation") or model.posterior_approximation() is None):
        raise ValueError(
            f"AIDE measures the model's encoder against AIS, but this {type(model).__name__} has none "
            "(posterior_approximation); drop AIDE"
        )


def _encoder_baselines(model, x, proposal, elbo_samples, iwae_samples, g) -> dict:
    out = {f"ELBO (encoder, {elbo_samples} samples)": elbo(model, x, proposal, elbo_samples, generator=g)}
    for k in iwae_samples:
        out[f"IWAE-{k} (encoder)"] = iwae(model, x, proposal, k, generator=g)
    return out
