"""Thermodynamic integration (TI) along an annealing path: the estimator DCA tools report (adabmDCA's `entropy`),
computed here beside AIS and RAISE so that a user sees how far it is off. It is never part of a verdict.

For a geometric path f_beta = f_0^(1 - beta) f_1^beta,

    log Z_1 - log Z_0 = integral_0^1 E_beta[g(x)] d beta,   g(x) = d log f_beta(x) / d beta = log f_1(x) - log f_0(x).

The chains are those of AIS (one transition at each beta_k of the schedule, from exact samples of the base); the
integral is the trapezoid rule over the schedule's betas, sum_k (beta_k - beta_{k-1}) (g_{k-1} + g_k) / 2, every
point weighted by its own interval (a rule with n points has n - 1 intervals). Its standard error is taken over the
chains (each chain's own trapezoid sum; the chains are independent). What that error does not show: the bias of
chains that do not follow the path (E_beta is then taken over the wrong distribution: TI "fails silently" where the
chains do not mix) and the rule's discretisation error. AIS's weights are unbiased for Z whatever the mixing; TI's
mean is not, which is why the sandwich and the verdict never use it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

from raise_eval.annealing import Kernel, anneal
from raise_eval.schedules import validate_schedule
from raise_eval.settings import check_count

CAVEAT = (
    "thermodynamic integration: its standard error is over chains only; it does not show the bias of chains that "
    "do not follow the path, nor the trapezoid rule's discretisation error (never part of a verdict)"
)


@runtime_checkable
class IntegrablePath(Protocol):
    """A path that declares the derivative of its log-density in beta (what thermodynamic integration integrates)."""

    log_partition_initial: float

    def log_density_derivative(self, state: Any, beta: float) -> Tensor:
        """d log f_beta(x) / d beta at each chain's state, float64 shaped (*B,)."""
        ...

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> Any: ...

    def transition(self, state: Any, beta: float, generator: torch.Generator) -> Any: ...


@dataclass
class ThermodynamicResult:
    """A thermodynamic-integration estimate of log Z_1.

    log_normalizer: log Z_0 + the trapezoid integral averaged over chains (float64, shape ()).
    stderr: its standard error over chains (shape ()): see `CAVEAT`.
    integrand_means: the chains' mean of g at each beta, float64 shaped (K + 1,).
    betas: the schedule, float64 shaped (K + 1,).
    """

    log_normalizer: Tensor
    stderr: Tensor
    integrand_means: Tensor
    betas: Tensor
    num_chains: int
    num_steps: int
    seconds: float
    caveat: str = CAVEAT

    def to_dict(self) -> dict[str, Any]:
        return {
            "log_normalizer": float(self.log_normalizer),
            "stderr": float(self.stderr),
            "num_chains": self.num_chains,
            "num_steps": self.num_steps,
            "rule": "trapezoid",
            "seconds": self.seconds,
            "caveat": self.caveat,
        }


def trapezoid_weights(betas: Tensor) -> Tensor:
    """The trapezoid rule's weights over the points `betas` (K + 1,): (beta_{k+1} - beta_{k-1}) / 2 inside,
    half an interval at each end; they sum to beta_K - beta_0. Float64."""
    betas = torch.as_tensor(betas, dtype=torch.float64)
    gaps = betas[1:] - betas[:-1]
    weights = torch.zeros_like(betas)
    weights[:-1] += gaps / 2
    weights[1:] += gaps / 2
    return weights


def thermodynamic_integration(
    path: IntegrablePath,
    betas: Tensor,
    num_chains: int,
    *,
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    progress: bool = False,
) -> ThermodynamicResult:
    """log Z_1 by thermodynamic integration along `path` over the schedule `betas` (from 0 to 1), with
    `num_chains` chains started from exact samples of the base and moved by one transition at each beta (AIS's
    chains: `anneal`).

    Raises TypeError when the path declares no `log_density_derivative` (a Boltzmann path that sums layers out:
    its derivative is a posterior mean, not offered yet).
    """
    if not isinstance(path, IntegrablePath):
        raise TypeError(
            f"thermodynamic integration needs a path that declares log_density_derivative(state, beta); "
            f"{type(path).__name__} does not"
        )
    num_chains = check_count("num_chains", num_chains, least=2)
    betas = validate_schedule(betas)
    start = time.perf_counter()
    beta_list, weights = betas.tolist(), trapezoid_weights(betas).tolist()
    state = path.sample_initial(num_chains, generator)
    # Each chain's trapezoid sum and the chains' mean of g at each beta, accumulated as the chains go (float64, on
    # the chains' device): no (K + 1) x chains table is kept, and nothing is read back to the host per step.
    running: dict[str, Any] = {"per_chain": None, "means": []}

    def add(k: int, state) -> None:
        g = path.log_density_derivative(state, beta_list[k]).to(torch.float64).reshape(-1)  # g at beta_k
        running["means"].append(g.mean())
        term = g * weights[k]
        running["per_chain"] = term if running["per_chain"] is None else running["per_chain"].add_(term)

    # after step j (steps_done = j + 1) the state was moved at beta_j (`anneal`: transition, then weight update)
    final, _ = anneal(
        path, state, betas, generator=generator, kernel=kernel, progress=progress, desc="thermodynamic integration",
        on_step=lambda steps_done, state, log_weights: add(steps_done - 1, state),
    )  # fmt: skip
    step = path.transition if kernel is None else kernel
    add(len(beta_list) - 1, step(final, beta_list[-1], generator))
    per_chain = running["per_chain"]
    return ThermodynamicResult(
        log_normalizer=path.log_partition_initial + per_chain.mean(),
        stderr=per_chain.std() / per_chain.numel() ** 0.5,
        integrand_means=torch.stack(running["means"]).cpu(),
        betas=betas,
        num_chains=int(num_chains),
        num_steps=len(beta_list) - 1,
        seconds=time.perf_counter() - start,
    )
