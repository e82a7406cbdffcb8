"""BDMC for a directed model (a VAE): the protocol behind `raise-eval bdmc`.

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

import hashlib
import time
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.bidirectional.report import BDMCFailed, BDMCInterrupted, BDMCReport
from raise_eval.bidirectional.settings import AIDE_KEYS, BDMCSettings
from raise_eval.estimators.aide import AISInference, EncoderInference, aide
from raise_eval.estimators.ais import ais
from raise_eval.estimators.bdmc import bdmc
from raise_eval.estimators.importance import elbo, iwae
from raise_eval.kernels.hmc import HMCKernel, tune_hmc
from raise_eval.models.contracts import DirectedModel, declared_family
from raise_eval.paths.directed import DirectedPath
from raise_eval.runtime.threads import using_threads
from raise_eval.schedules import make_schedule
from raise_eval.settings import SettingsError, with_overrides
from raise_eval.step_programs import current_loop_options, describe_per_graph


def evaluate_bdmc(
    model,
    settings: Optional[BDMCSettings] = None,
    *,
    real_data: Optional[Tensor] = None,
    simulated: Optional[tuple[Tensor, Tensor]] = None,
    labels: Optional[dict[str, Any]] = None,
    **overrides,
) -> BDMCReport:
    """Run the BDMC protocol on `model` (see the module docstring).

    Args:
        model: a directed model with `sample_joint` (a VAE, or a `DecoderModel` around your own decoder).
        settings: a `BDMCSettings` (every setting, its default and meaning); keyword `overrides` change its fields:
            `evaluate_bdmc(model, steps=(100, 1000), num_examples=50)`. The pre-0.2 `aide_settings={...}` dict is
            read as aide=True with its keys.
        real_data: optional real test vectors (M, data_dim): ELBO, IWAE and forward AIS at the largest K on a fixed
            random subset of `real_examples` of them (seed `seed`; the indices in the report's settings).
        simulated: your own simulated examples (z, x), shaped (N, latent_dim) and (N, data_dim), x drawn from
            p(x | z) and z from p(z): z is then an exact posterior sample for x. The first `num_examples` pairs are
            used instead of simulating (`simulate_examples`).
        labels: entries for the report's settings that describe the inputs (e.g. the checkpoint path).

    The stages (simulation, HMC pilot, encoder baselines, the sandwich at each K, real data, AIDE) run in that order;
    at Ctrl-C `BDMCInterrupted` (a KeyboardInterrupt) and at an error in a stage `BDMCFailed` carry the report of the
    stages that finished. The torch thread count is `settings.threads` for the call, the caller's restored after.
    """
    settings = bdmc_settings(settings, overrides)
    check_bdmc_model(model, aide=settings.aide)
    if simulated is not None:  # checked before any work
        simulated = _given_examples(model, simulated, settings.num_examples)
    with using_threads(settings.threads):  # no torch.no_grad(): HMC differentiates the log joint in z
        return _run(model, settings, real_data, simulated, labels)


SIMULATION_BLOCK = 16  # examples simulated per generator: the first N examples do not depend on how many follow


def simulate_examples(model, num_examples: int, seed: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(z, x) ~ p(z) p(x | z), shaped (num_examples, latent_dim) and (num_examples, data_dim), in blocks of
    SIMULATION_BLOCK examples, block b drawn from its own generator (seeded with the first 63 bits of
    sha256("raise-eval/simulate/<seed>/<b>"), apart from the run's own stream): the first n examples are the same
    whatever `num_examples` >= n is, so runs with different --examples share their first examples."""
    blocks = []
    for b in range(-(-num_examples // SIMULATION_BLOCK)):
        digest = hashlib.sha256(f"raise-eval/simulate/{seed}/{b}".encode()).digest()
        generator = torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "big") >> 1)
        blocks.append(model.sample_joint(SIMULATION_BLOCK, generator))
    z = torch.cat([z for z, _ in blocks])[:num_examples]
    x = torch.cat([x for _, x in blocks])[:num_examples]
    return z, x


def _given_examples(model, simulated, num_examples: int) -> tuple[Tensor, Tensor]:
    """The first `num_examples` of the user's (z, x), checked: shapes, finite values, x in the likelihood's support,
    a finite log joint; ValueError saying what is wrong."""
    try:
        z, x = simulated
    except (TypeError, ValueError):
        raise ValueError(
            "simulated must be a pair (z, x) of tensors shaped (N, latent_dim) and (N, data_dim)"
        ) from None
    z, x = torch.as_tensor(z), torch.as_tensor(x)
    if z.dim() != 2 or x.dim() != 2 or len(z) != len(x):
        raise ValueError(
            f"simulated (z, x) must be shaped (N, latent_dim) and (N, data_dim) with the same N; got {tuple(z.shape)} "
            f"and {tuple(x.shape)}"
        )
    if z.shape[1] != model.latent_dim or x.shape[1] != model.data_dim:
        raise ValueError(
            f"simulated z has {z.shape[1]} columns and x {x.shape[1]}; the model's latent_dim is {model.latent_dim} "
            "and "
            f"its data_dim {model.data_dim}"
        )
    if len(z) < num_examples:
        raise ValueError(f"simulated holds {len(z)} examples; num_examples asks for {num_examples}")
    z, x = z[:num_examples], x[:num_examples]
    if not (bool(torch.isfinite(z).all()) and bool(torch.isfinite(x.double()).all())):
        raise ValueError("simulated (z, x) holds NaN or infinite values")
    z, x = z.to(device=model.device, dtype=model.dtype), x.to(device=model.device, dtype=model.dtype)
    x = model.check_data(x, "simulated x")
    with torch.no_grad():
        log_joint = model.log_joint(x, z)
    if not bool(torch.isfinite(log_joint).all()):
        bad = int((~torch.isfinite(log_joint)).nonzero()[0])
        raise ValueError(
            f"simulated example {bad} has log p(x, z) = {float(log_joint[bad])}: x is not a draw of p(x | z)"
        )
    return z, x


def bdmc_settings(settings: Optional[BDMCSettings], overrides: dict[str, Any]) -> BDMCSettings:
    """`settings` (default: the defaults) with the keyword `overrides` of `evaluate_bdmc`."""
    overrides = dict(overrides)
    aide = overrides.pop("aide_settings", None)
    if aide is not None:
        unknown = sorted(set(aide) - set(AIDE_KEYS))
        if unknown:
            raise SettingsError(f"aide_settings takes {', '.join(AIDE_KEYS)}; unknown: {', '.join(unknown)}", ())
        overrides["aide"] = True
        overrides.update({AIDE_KEYS[k]: v for k, v in aide.items()})
    return with_overrides(BDMCSettings, settings, overrides)


def _run(model, settings: BDMCSettings, real_data: Optional[Tensor], simulated, labels: Optional[dict]) -> BDMCReport:
    s = settings
    num_examples, chains, steps, schedule = s.num_examples, s.chains, s.steps, s.schedule
    num_leapfrog, target_accept, pilot_chains, pilot_steps = (
        s.num_leapfrog,
        s.target_accept,
        s.pilot_chains,
        s.pilot_steps,
    )
    iwae_samples, elbo_samples, seed, progress = s.iwae_samples, s.elbo_samples, s.seed, s.progress
    aide_plan = s.aide_plan
    start_total = time.perf_counter()
    device = model.device  # a decoder that is a plain function: its prior's buffers' (`DirectedModel.device`)
    all_settings = {
        "model": model.describe(),
        "num_examples": num_examples,
        "chains": chains,
        "steps": sorted(steps),
        "schedule": schedule,
        "kernel": "single-site Gibbs"
        if model.latent_type == "binary"
        else f"HMC, {num_leapfrog} leapfrog steps, step sizes from a pilot run (target acceptance {target_accept})",
        "seed": seed,
        "device": str(device),
        "dtype": str(model.dtype).replace("torch.", ""),
        "iwae_samples": list(iwae_samples),
        "elbo_samples": elbo_samples,
        "threads": torch.get_num_threads(),
        # how HMC's transitions ran (a decoder that cannot be captured runs eagerly, with a warning)
        "loop": "eager loop" if model.latent_type == "binary" else describe_per_graph(current_loop_options(), device),
    }
    if aide_plan is not None:
        all_settings["aide_steps"] = aide_plan["steps"]
    all_settings["examples"] = (
        f"simulated from the model in blocks of {SIMULATION_BLOCK} (the first N do not depend on how many follow)"
        if simulated is None
        else "given (z, x)"
    )
    if real_data is not None:
        # A fixed random subset (its own generator, seeded with the seed), recorded so that it can be reproduced.
        order = torch.randperm(len(real_data), generator=torch.Generator().manual_seed(seed))[: s.real_examples]
        real_data = real_data[order]
        all_settings.update(real_examples=len(order), real_data_indices=order.tolist())
    all_settings.update(labels or {})
    report = BDMCReport(all_settings, sandwich={}, baselines={})
    g = torch.Generator(device=device).manual_seed(seed)
    stage = "the simulation of the examples"
    try:
        if simulated is None:
            z, x = simulate_examples(model, num_examples, seed, device)
        else:
            z, x = simulated
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

        proposal = model.posterior_approximation()
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
                real_path,
                make_schedule(schedule, k),
                chains,
                generator=g,
                kernel=kernel_for(real_path),
                progress=progress,
            )
            real[f"AIS K={k} (lower bound)"] = forward.log_normalizer
            report.real = real

        if aide_plan is not None and proposal is not None:
            stage = "AIDE"
            n = aide_plan["num_examples"]
            gold = AISInference(model, make_schedule(schedule, aide_plan["steps"]), kernel_for, progress=progress)
            report.aide = aide(
                gold,
                EncoderInference(proposal),
                x[:n],
                num_gold=aide_plan["Ng"],
                num_target=aide_plan["Nt"],
                gold_meta=aide_plan["Mg"],
                target_meta=aide_plan["Mt"],
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


def check_bdmc_model(model, *, aide: bool = False) -> None:
    """ValueError unless `model` is a directed model BDMC can sandwich (`sample_joint`), with an encoder
    (`posterior_approximation`) when AIDE is asked for."""
    if declared_family(model) != "directed" or not isinstance(model, DirectedModel):
        raise ValueError(
            f"BDMC evaluates directed models (VAEs: models.contracts.DirectedModel); got a {type(model).__name__} "
            "(use raise_eval.evaluate for RBMs, DBMs and DBNs)"
        )
    if aide and model.posterior_approximation() is None:
        raise ValueError(
            f"AIDE measures the model's encoder against AIS, but this {type(model).__name__} has none "
            "(posterior_approximation); drop AIDE"
        )


def _encoder_baselines(model, x, proposal, elbo_samples, iwae_samples, g) -> dict:
    out = {f"ELBO (encoder, {elbo_samples} samples)": elbo(model, x, proposal, elbo_samples, generator=g)}
    for k in iwae_samples:
        out[f"IWAE-{k} (encoder)"] = iwae(model, x, proposal, k, generator=g)
    return out
