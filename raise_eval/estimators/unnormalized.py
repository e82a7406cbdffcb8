"""Estimates of log f(v), the unnormalized log-probability of a test vector, for models where it is intractable.

log p(v) = log f(v) - log Z needs both terms. For an RBM log f(v) is exact. For a DBM, f(v) sums over every
hidden layer; for a DBN, over the directed layers. Three estimators:

- importance sampling (RAISE paper, Sec. 5.2-5.3): f-hat(v) = mean_s f(v, h^s) / q(h^s | v), unbiased for f(v),
  so log f-hat(v) is a stochastic lower bound on log f(v) (Jensen). DBM: q is the mean-field posterior over the
  even hidden layers (h_2, h_4, ...) and the odd layers are summed out analytically. DBN: q is the recognition
  distribution over x_1 .. x_{L-1} and the top layer is summed out.
- annealed importance sampling from q(h | v) to the posterior with v clamped (`raise_eval.paths.posterior`):
  f-hat(v) = Z_0(v) mean_c w_c over chains c, again unbiased for f(v) (so again a stochastic lower bound in log
  space). A factorial q that misses posterior modes makes importance sampling confidently wrong (tiny standard
  errors, estimates several nats low); annealing lets the chains reach the modes q misses. DBM: q is the mean-field
  posterior over every hidden layer, the state the even hidden layers, the kernel block Gibbs. DBN (two hidden
  layers): q is the recognition distribution, the state x_1, the kernel a unit-wise Gibbs sweep.
- the mean-field lower bound (DBMs; Salakhutdinov & Hinton, 2009): deterministic, log f(v) >= E_q log f + H(q).

The AIS log-likelihood of a DBM or DBN is mean log f-hat(v) - log Z-hat. Its first term is itself a stochastic
lower bound (it errs low), while log Z-hat errs low and so pushes the log-likelihood up: the errors partly cancel,
and the result is an estimate, not a bound in either direction. With enough samples the first error is small
(each estimate carries its standard error).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor
from tqdm.auto import tqdm

from raise_eval.annealing import anneal, check_log_weights
from raise_eval.exact import fully_visible as fully_visible_exact
from raise_eval.paths.posterior import posterior_path
from raise_eval.schedules import linear_schedule, validate_schedule
from raise_eval.settings import check_count
from raise_eval.stats import summarize_log_weights

METHODS = ("importance", "ais", "mean-field")
_CHUNK_ELEMENTS = 2**23  # states of one chunk of examples x samples: about 32 MB in float32


def ais_chunk_vectors(path, ais_chains: int) -> int:
    """Test vectors per chunk of per-vector AIS on `path` (a posterior path): its `chunk_elements` state entries
    (`_CHUNK_ELEMENTS` when it sets none), at least one vector."""
    elements = getattr(path, "chunk_elements", _CHUNK_ELEMENTS)
    return max(1, elements // (ais_chains * path.state_elements()))


@dataclass
class LogUnnormalizedEstimate:
    """Per-example estimates of log f(v).

    log_unnormalized: shaped (N,), float64.
    stderr: delta-method standard error of each estimate, shaped (N,) (zeros when exact or deterministic).
    method: 'exact', 'importance', 'ais' or 'mean-field'; num_samples: samples per example for importance, chains
        per example for ais (0 otherwise).
    steps: annealing steps K for ais (0 otherwise).
    """

    log_unnormalized: Tensor
    stderr: Tensor
    method: str
    num_samples: int
    seconds: float
    steps: int = 0

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "num_samples": self.num_samples,
            "steps": self.steps,
            "mean": float(self.log_unnormalized.mean()),
            "mean_stderr_per_example": float(self.stderr.mean()),
        }


def _propose_dbm(model, v: Tensor, num_samples: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """(log f(v, h_even) with odd layers summed out, log q(h_even | v)), each (n, S), for v (n, n_visible)."""
    mu = model.mean_field(v)
    layers: list = [v.unsqueeze(1).expand(-1, num_samples, -1)]
    # The bottom odd layer's input from v is the same for every sample: one product per vector, not per sample.
    v_input = torch.matmul(v, model.weights[0]).unsqueeze(1)
    log_q = torch.zeros(v.shape[0], num_samples, dtype=torch.float64, device=v.device)
    for l in range(1, model.num_layers):
        if l % 2 == 1:
            layers.append(None)
            continue
        # Clamped logits: q gives every configuration positive probability, so the estimate stays unbiased.
        logits = torch.logit(mu[l]).clamp(-20.0, 20.0).unsqueeze(1).expand(-1, num_samples, -1)
        u = torch.rand(logits.shape, generator=generator, dtype=torch.float64, device=v.device)
        h = (u < torch.sigmoid(logits)).to(torch.float64)
        log_q = log_q + (h * logits - torch.nn.functional.softplus(logits)).sum(-1)
        layers.append(h.to(model.dtype))
    inputs = [None] * model.num_layers
    inputs[1] = v_input + torch.matmul(layers[2], model.weights[1].t()) if model.num_layers > 2 else v_input
    for l in range(3, model.num_layers, 2):
        inputs[l] = model.unscaled_input(layers, l)
    return model.log_unnormalized_marginal(layers, inputs).double(), log_q


def _propose_dbn(model, v: Tensor, num_samples: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """(log p(v, x_1..x_{L-2} | x_{L-1}) f_top(x_{L-1}), log q(x_1..x_{L-1} | v)), each (n, S)."""
    layers, log_q = model.sample_recognition(v, generator, num_samples=num_samples)
    return model.log_unnormalized_joint_visible(layers), log_q


def _check_positive_int(name: str, value) -> None:
    check_count(name, value)


def _check_betas(betas) -> Tensor:
    """An explicit schedule for 'ais', checked by `schedules.validate_schedule` (float64 on the CPU, (K + 1,))."""
    if torch.as_tensor(betas).dim() != 1:
        raise ValueError(f"betas must be a vector (K + 1,), got shape {tuple(torch.as_tensor(betas).shape)}")
    try:
        return validate_schedule(betas)
    except ValueError as e:
        raise ValueError(f"betas: {e}") from None


def _ais_log_weights(path, v: Tensor, chains: int, betas: Tensor, generator: torch.Generator) -> Tensor:
    """log Z_0(v) + the annealing log-weights: (n, chains) float64, each exp(.) unbiased for f(v)."""
    state, log_z0 = path.start(v, chains, generator)
    _, log_w = anneal(path, state, betas, generator=generator, desc="log f(v) by AIS")
    return log_w + log_z0.unsqueeze(-1)


def log_unnormalized_estimate(
    model,
    data: Tensor,
    *,
    method: str = "importance",
    num_samples: int = 500,
    ais_steps: int = 100,
    ais_chains: int = 10,
    betas: Optional[Tensor] = None,
    generator: torch.Generator,
    progress: bool = False,
    checkpoint: Any = None,
) -> LogUnnormalizedEstimate:
    """Estimate log f(v) for every row of `data` (N, n_visible).

    RBMs (two-layer machines) and fully visible models get the exact value whatever the method. DBMs: 'importance'
    (mean-field proposal, `num_samples` per example), 'ais' (annealing from the mean-field proposal to the posterior,
    `ais_chains` chains of `ais_steps` steps per example) or 'mean-field' (the bound). DBNs: 'importance'
    (recognition proposal) or 'ais' (from the mean-field recognition proposal, any number of hidden layers).
    Examples are processed in chunks fixed by N, the samples or chains per example and the layer sizes, so that
    memory stays bounded (about 32 MB of states per chunk). `checkpoint` (`raise_eval.runtime.resume.ShardCheckpoint`,
    phase 'log f(v)') saves the estimates and the generator's state after chunks and continues from a saved chunk,
    with the numbers of an uninterrupted run.

    Args:
        ais_steps: K, the annealing steps of 'ais' (the linear schedule betas = k / K, k = 0..K).
        ais_chains: independent annealing chains per example for 'ais' (the estimate averages their weights).
        betas: for 'ais', a schedule (K + 1,) from 0 to 1 that replaces the linear one (ais_steps is then ignored).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    _check_positive_int("num_samples", num_samples)
    _check_positive_int("ais_steps", ais_steps)
    _check_positive_int("ais_chains", ais_chains)
    if betas is not None:
        betas = _check_betas(betas)
    start = time.perf_counter()
    if model.family == "fully-visible":  # no hidden units: log f(v) is the model's own log-density (float64)
        log_f = fully_visible_exact.log_unnormalized_visible(model, data.to(model.device))
        return LogUnnormalizedEstimate(log_f, torch.zeros_like(log_f), "exact", 0, time.perf_counter() - start)
    v_all = data.to(device=model.device, dtype=model.dtype)
    n = v_all.shape[0]
    is_dbn = model.family == "DBN"
    if not is_dbn and model.num_layers == 2:
        log_f = model.log_unnormalized_marginal([v_all, None]).double()
        return LogUnnormalizedEstimate(log_f, torch.zeros_like(log_f), "exact", 0, time.perf_counter() - start)
    if method == "mean-field":
        if is_dbn:
            raise ValueError("the mean-field bound is for DBMs; a DBN's log f(v) is estimated by importance sampling")
        log_f = model.mean_field_bound(v_all)
        check_log_weights(log_f, "log f(v) by the mean-field bound")
        return LogUnnormalizedEstimate(log_f, torch.zeros_like(log_f), "mean-field", 0, time.perf_counter() - start)
    if method == "ais":
        path = posterior_path(model)
        if betas is None:
            betas = linear_schedule(ais_steps)
        steps, per_example = betas.numel() - 1, ais_chains
        chunk = ais_chunk_vectors(path, ais_chains)

        def log_weights(v: Tensor) -> Tensor:
            return _ais_log_weights(path, v, ais_chains, betas, generator)

    else:
        propose = _propose_dbn if is_dbn else _propose_dbm
        steps, per_example = 0, num_samples
        chunk = max(1, _CHUNK_ELEMENTS // (num_samples * max(model.layer_sizes)))

        def log_weights(v: Tensor) -> Tensor:
            log_joint, log_q = propose(model, v, num_samples, generator)
            return log_joint - log_q

    begins = list(range(0, n, chunk))
    saved = None if checkpoint is None else checkpoint.restore("log f(v)", None)
    done, estimates, errors = 0, [], []
    if saved is not None:  # estimates and standard errors of the first `done` chunks, stacked
        done, estimates, errors = saved["step"], [saved["log_weights"][0]], [saved["log_weights"][1]]
    save = None if checkpoint is None else checkpoint.on_step("log f(v)")
    bar = tqdm(total=len(begins), initial=done, desc="log f(v)", disable=not progress, leave=False)
    try:
        for i in range(done, len(begins)):
            chunk_weights = log_weights(v_all[begins[i] : begins[i] + chunk])
            check_log_weights(chunk_weights, f"log f(v) by {method}", chains_dim=-1)  # per chunk: stops early
            summary = summarize_log_weights(chunk_weights, dim=-1)
            estimates.append(summary.estimate)
            errors.append(summary.stderr)
            bar.update(1)
            if save is not None:
                save(i + 1, None, lambda: torch.stack([torch.cat(estimates), torch.cat(errors)]))
    finally:
        bar.close()
    log_f = torch.cat(estimates)
    stderr = torch.cat(errors)
    if per_example == 1:
        stderr = torch.full_like(log_f, math.nan)
    return LogUnnormalizedEstimate(log_f, stderr, method, per_example, time.perf_counter() - start, steps)
