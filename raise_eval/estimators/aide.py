"""AIDE, the auxiliary inference divergence estimator (Cusumano-Towner & Mansinghka, 2017, Alg. 2).

Estimates the symmetric KL divergence KL(q_g || q_t) + KL(q_t || q_g) between the output distributions of a
gold-standard inference algorithm g and a target algorithm t, treating each algorithm as a generative model of
its output with its internal randomness (its trace u) as latent variables. Each algorithm supplies

    run(x, R)      -> R outputs z per example and log xi(u, z) of the trace that produced each,
    meta(x, z, M)  -> log xi(u_m, z) for M traces drawn by its meta-inference sampler r(u; z),

with xi(u, z) = q(u, z) / r(u; z) (Z = 1), so that averages of xi estimate q(z) without bias. Then

    D = mean_n log(mean_m xi_g(u_nm, z_n) / mean_m xi_t(v_nm, z_n))       z_n from g (Ng runs, Mg and Mt traces)
      + mean_n log(mean_m xi_t(v'_nm, z'_n) / mean_m xi_g(u'_nm, z'_n))   z'_n from t (Nt runs)

is in expectation an upper bound on the symmetric KL, tight when meta-inference is exact (AIDE, Thm. 1).

- AIS as an algorithm (`AISInference`): its output is one more transition at beta = 1 after the annealing run;
  for that trace xi = p(x, z) / w_fwd; meta-inference is reverse AIS from z, with xi = p(x, z) w_rev (the same
  algebra as RAISE).
- An encoder q(z | x) with a tractable density (`EncoderInference`): no trace, xi = q(z | x) exactly, so its
  meta-inference is exact and any number of its traces gives the same value.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional, Protocol

import torch
from torch import Tensor

from raise_eval.annealing import anneal, check_log_weights
from raise_eval.models.directed.base import DirectedLatentModel, PosteriorApproximation
from raise_eval.paths.directed import DirectedPath
from raise_eval.schedules import validate_schedule
from raise_eval.settings import check_count
from raise_eval.stats import mean_and_stderr


class InferenceAlgorithm(Protocol):
    """An approximate posterior sampler endowed with meta-inference (AIDE's generative inference model)."""

    def run(self, x: Tensor, num_runs: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Outputs z (N, R, d) and log xi of their own traces (N, R)."""
        ...

    def meta(self, x: Tensor, z: Tensor, num_traces: int, generator: torch.Generator) -> Tensor:
        """log xi of `num_traces` meta-inference traces for each output z (N, R, d), shaped (N, R, num_traces)."""
        ...


class AISInference:
    """AIS on the directed path as an inference algorithm, with reverse AIS as its meta-inference.

    Args:
        model: the directed model; betas: schedule; kernel_for: function path -> kernel (e.g. an HMC kernel with
            frozen step sizes), called for every set of examples the algorithm runs on.
    """

    def __init__(self, model: DirectedLatentModel, betas: Tensor, kernel_for=None, progress: bool = False):
        self.model = model
        self.betas = validate_schedule(betas)
        self.kernel_for = kernel_for or (lambda path: None)
        self.progress = progress
        self._cached = None

    def _path(self, x: Tensor) -> tuple[DirectedPath, Optional[object]]:
        # One path and kernel (e.g. one HMC pilot) per set of examples, reused by run and meta.
        if self._cached is None or self._cached[0] is not x:
            path = DirectedPath(self.model, x)
            self._cached = (x, path, self.kernel_for(path))
        return self._cached[1], self._cached[2]

    def run(self, x: Tensor, num_runs: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        path, kernel = self._path(x)
        step = path.transition if kernel is None else kernel
        state, log_w = anneal(
            path,
            path.sample_initial(num_runs, generator),
            self.betas,
            generator=generator,
            kernel=kernel,
            progress=self.progress,
            desc="AIDE: AIS",
        )
        state = step(state, 1.0, generator)  # the algorithm's output: one more transition at the target
        return state.z, (state.log_prior + state.log_likelihood).double() - log_w

    def meta(self, x: Tensor, z: Tensor, num_traces: int, generator: torch.Generator) -> Tensor:
        n, r, d = z.shape
        if num_traces == 0:
            return torch.empty(n, r, 0, dtype=torch.float64, device=z.device)
        path, kernel = self._path(x)
        start = path.state_from_latents(z.unsqueeze(2).expand(n, r, num_traces, d).reshape(n, r * num_traces, d))
        _, log_w = anneal(
            path,
            start,
            self.betas.flip(0),
            generator=generator,
            kernel=kernel,
            progress=self.progress,
            desc="AIDE: reverse AIS",
        )
        log_joint = (start.log_prior + start.log_likelihood).double()
        return (log_joint + log_w).reshape(n, r, num_traces)


class EncoderInference:
    """A posterior approximation with a tractable density as an inference algorithm (no trace: xi = q(z | x))."""

    def __init__(self, posterior: PosteriorApproximation):
        self.posterior = posterior

    def run(self, x: Tensor, num_runs: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            z = self.posterior.sample(x, num_runs, generator)
            return z, self.posterior.log_prob(x, z).double()

    def meta(self, x: Tensor, z: Tensor, num_traces: int, generator: torch.Generator) -> Tensor:
        with torch.no_grad():
            return self.posterior.log_prob(x, z).double().unsqueeze(-1).expand(*z.shape[:2], num_traces)


@dataclass
class AIDEResult:
    """Per-example AIDE estimates of the symmetric KL, shaped (N,), their mean and standard error."""

    per_example: Tensor
    mean: float
    stderr: float
    num_gold: int
    num_target: int
    gold_meta: int
    target_meta: int
    seconds: float

    def to_dict(self) -> dict:
        return {
            "symmetric_kl": self.mean,
            "stderr": self.stderr,
            "Ng": self.num_gold,
            "Nt": self.num_target,
            "Mg": self.gold_meta,
            "Mt": self.target_meta,
            "seconds": self.seconds,
            "per_example": self.per_example,
        }


def _log_mean(first: Tensor, rest: Tensor, what: str) -> Tensor:
    """log mean xi over an output's traces: `first` (N, R) the output's own trace (or None), `rest` (N, R, M) the
    meta-inference traces; NonFiniteLogWeightError (stage 'AIDE: <what>') on NaN, +inf, or every trace zero."""
    both = torch.cat([first.unsqueeze(-1), rest], dim=-1) if first is not None else rest
    check_log_weights(both, f"AIDE: {what}", chains_dim=-1)
    return torch.logsumexp(both, dim=-1) - math.log(both.shape[-1])


def aide(
    gold: InferenceAlgorithm,
    target: InferenceAlgorithm,
    x: Tensor,
    *,
    num_gold: int,
    num_target: int,
    gold_meta: int,
    target_meta: int,
    generator: torch.Generator,
) -> AIDEResult:
    """AIDE (Alg. 2) for each example of x (N, data_dim), all runs batched.

    Args:
        num_gold (Ng), num_target (Nt): outputs drawn from each algorithm per example.
        gold_meta (Mg), target_meta (Mt): traces per output used to estimate each algorithm's output density
            (the algorithm's own trace counts as one of them for its own outputs).
    """
    for name, v in (
        ("num_gold", num_gold),
        ("num_target", num_target),
        ("gold_meta", gold_meta),
        ("target_meta", target_meta),
    ):
        check_count(name, v)
    start = time.perf_counter()
    z_g, own_g = gold.run(x, num_gold, generator)
    log_qg_zg = _log_mean(own_g, gold.meta(x, z_g, gold_meta - 1, generator), "gold outputs")
    log_qt_zg = _log_mean(None, target.meta(x, z_g, target_meta, generator), "target density at gold outputs")
    z_t, own_t = target.run(x, num_target, generator)
    log_qt_zt = _log_mean(own_t, target.meta(x, z_t, target_meta - 1, generator), "target outputs")
    log_qg_zt = _log_mean(None, gold.meta(x, z_t, gold_meta, generator), "gold density at target outputs")
    per_example = (log_qg_zg - log_qt_zg).mean(-1) + (log_qt_zt - log_qg_zt).mean(-1)
    mean, se = mean_and_stderr(per_example)
    return AIDEResult(per_example, mean, se, num_gold, num_target, gold_meta, target_meta, time.perf_counter() - start)
