"""RAISE, the Reverse AIS Estimator (Burda, Grosse & Salakhutdinov, 2015, Alg. 2), for RBMs.

For a test vector v, the reverse chain starts from an exact sample of p_K(h | v) (here: h summed out, the state
is v itself) and anneals down to the base distribution:

    x_K = v;  for k = K-1 .. 0:  x_k ~ T_{k+1}(. | x_{k+1}),  w *= f_k(x_k) / f_{k+1}(x_k);   w *= f_K(v) / Z_0

T_{k+1} is the reversible block-Gibbs kernel of p_{k+1} (the paper's box writes T~_k: an index slip). Then
E[w] = p_ann(v), the probability of v under the annealing model (the distribution of AIS's final visible state),
so log mean w is a stochastic lower bound on log p_ann(v): a conservative log-likelihood.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from raise_eval.annealing import Kernel, anneal
from raise_eval.datasets import check_binary
from raise_eval.paths.boltzmann import BoltzmannPath
from raise_eval.schedules import validate_schedule
from raise_eval.stats import log_mean_exp, mean_and_stderr


@dataclass
class RAISEResult:
    """Per-example RAISE estimates.

    log_weights: per-chain log w, float64, shaped (N, num_chains); exp(log_w) is unbiased for p_ann(v_i).
    log_likelihood: log mean w over chains, shaped (N,): stochastic lower bounds on log p_ann(v_i).
    log_unnormalized: log f(v_i) under the model, shaped (N,), the control variate of Sec. 4.
    mean, stderr: average of log_likelihood over the N examples and its standard error.
    """

    log_weights: Tensor
    log_likelihood: Tensor
    log_unnormalized: Tensor
    mean: float
    stderr: float
    num_steps: int
    num_chains: int
    seconds: float

    def control_variate_mean(self, all_log_unnormalized: Tensor) -> tuple[float, float]:
        """Average log-likelihood over a whole test set from RAISE on a subset (the paper's Sec. 4, alpha = 1).

        mean_subset(Y - X) + mean_all(X), with Y the RAISE estimates and X = log f(v), which is cheap for every
        test vector. Returns (estimate, standard error); the error is sd(Y - X) / sqrt(n), which also counts the
        Monte Carlo noise of each Y (and overstates the error when the subset is the whole set).

        Args:
            all_log_unnormalized: log f(v) for every test vector, shaped (N_all,).
        """
        diff_mean, diff_se = mean_and_stderr(self.log_likelihood - self.log_unnormalized)
        return diff_mean + float(all_log_unnormalized.double().mean()), diff_se

    def to_dict(self) -> dict:
        return {
            "mean": self.mean,
            "stderr": self.stderr,
            "num_examples": int(self.log_likelihood.shape[0]),
            "num_steps": self.num_steps,
            "num_chains": self.num_chains,
            "seconds": self.seconds,
            "log_likelihood": self.log_likelihood,
        }


def raise_log_likelihood(
    path: BoltzmannPath,
    data: Tensor,
    betas: Tensor,
    num_chains: int,
    *,
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    progress: bool = False,
) -> RAISEResult:
    """Run RAISE for every row of `data` with `num_chains` chains each, all N x C chains in one batch.

    Args:
        path: geometric path of an RBM (two layers; DBMs need the heating variant).
        data: binary test vectors shaped (N, n_visible).
        betas: the forward schedule from 0 to 1 (it is run backwards), shaped (K + 1,).
        num_chains: chains per example C.
        generator: the only source of randomness.
    """
    betas = validate_schedule(betas)
    model = path.model
    if model.num_layers != 2:
        raise NotImplementedError(
            "RAISE from a test vector starts from an exact sample of p(hidden | v), which is tractable only for "
            f"RBMs; this model has {model.num_layers} layers and needs the heating variant (Alg. 3)"
        )
    if isinstance(num_chains, bool) or not isinstance(num_chains, int) or num_chains < 1:
        raise ValueError(f"num_chains must be a positive integer, got {num_chains!r}")
    check_binary(data, model.n_visible, "RAISE test data")
    start = time.perf_counter()
    v = data.to(device=model.device, dtype=model.dtype)
    n = v.shape[0]
    log_f = path.log_density(path.state_from_layers([v, None]), 1.0).to(torch.float64)  # (N,)
    state = path.state_from_layers([v.unsqueeze(1).expand(n, num_chains, v.shape[1]).contiguous(), None])
    _, log_w = anneal(path, state, betas.flip(0), generator=generator, kernel=kernel, progress=progress, desc="RAISE")
    log_w = log_w + (log_f - path.log_partition_initial).unsqueeze(1)
    per_example = log_mean_exp(log_w, dim=1)
    mean, se = mean_and_stderr(per_example)
    return RAISEResult(
        log_weights=log_w,
        log_likelihood=per_example,
        log_unnormalized=log_f,
        mean=mean,
        stderr=se,
        num_steps=betas.numel() - 1,
        num_chains=num_chains,
        seconds=time.perf_counter() - start,
    )
