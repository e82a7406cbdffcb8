"""RAISE, the Reverse AIS Estimator (Burda, Grosse & Salakhutdinov, 2015), for RBMs, DBMs, DBNs, fully visible
pairwise models and a user's energy models.

The annealing model p_ann is the forward chain x_0 ~ p_0, x_k ~ T_k(. | x_{k-1}) (k = 1..K, T_k the reversible
block-Gibbs kernel of p_k on the even layers, odd layers summed out), read off at its final visible state. RAISE is
one reverse pass of that chain from a start at beta = 1 that contains the test vector v, with a start weight w_0:

    x_K = start;  for k = K-1 .. 0:  x_k ~ T_{k+1}(. | x_{k+1}),  w *= f_k(x_k) / f_{k+1}(x_k)

(the paper's Alg. 2 writes T~_k: an index slip; with the operator of p_{k+1} the weight is taken at the new
state). E[w] = p_ann(v), so log mean w is a stochastic lower bound on log p_ann(v): a conservative
log-likelihood. The start depends on the family:

- RBM (Alg. 2): the hidden layer is summed out, so the state is v itself and w_0 = f_K(v) / Z_0.
- Fully visible (DCA Potts, Ising: `paths.fully_visible`) and a user's energy (`paths.energy`): no hidden units, so
  likewise the state is v itself and w_0 = f_K(v) / Z_0 (the path declares it: `test_vector_start`); the kernel is
  reversible (the palindromic single-site scan; HMC with its momentum flip; Gibbs with gradients).
- DBM (heating, Alg. 3): p(hidden | v) is intractable. Draw the even hidden layers h'_0 ~ p_0(h | v), then heat
  with v clamped, h'_k ~ T_{k-1}^(v)(. | h'_{k-1}) for k = 1..K, w_0 = p_0(v) prod_k f_k(v, h'_k) / f_{k-1}(v, h'_k),
  and start the reverse pass from (v, h'_K). The box draws h'_k with T_k^(v); but the auxiliary forward chain
  of eq. (13) cools h' with T_{k}^(v)(h'_k | h'_{k+1}), whose reversal draws h'_{k+1} from h'_k with the
  operator of p_k. Then p_fwd / q_rev telescopes to the weight above. Heating is forward AIS on p(h | v) from
  p_0(h | v): it is the same annealing loop with the visible layer clamped, and its weight alone estimates
  f(v) / f_0(v).
- DBN. Layers v = x_0, h = (x_1, ..., x_{L-1}) directed (sigmoid) and a top RBM over (x_{L-1}, x_L):
  f(v, h) = prod_{l<L-1} p(x_l | x_{l+1}) f_top(x_{L-1}), p(v) = sum_h f(v, h) / Z_top. The annealing model is
  the unrolled one (Sec. 3.3, Fig. 2): the top RBM's forward chain gives p_ann_top(x_{L-1}), the directed layers
  are then sampled downwards, so
      p_ann(v) = sum_h prod_{l<L-1} p(x_l | x_{l+1}) p_ann_top(x_{L-1}) = sum_h f(v, h) psi(x_{L-1}),
      psi(x) = p_ann_top(x) / f_top(x).
  The top RBM's reverse pass from a state x, with start weight f_top(x) / Z_0, is unbiased for p_ann_top(x) (the
  RBM case above), so its annealing weight w_rev divided by Z_0 is unbiased for psi(x). Two ways to reach x:
  - unrolled (`dbn_start='unrolled'`, the paper's): draw h ~ q(h | v), the recognition distribution, and weight
    w_0 = prod_{l<L-1} p(x_l | x_{l+1}) / q(h | v) * f_top(x_{L-1}) / Z_0 = f(v, h) / q(h | v) / Z_0. When q
    misses modes of p(h | v), f / q is heavy-tailed and log mean w stays low by an amount K does not change.
  - heated (`dbn_start='heated'`, the default): forward AIS over h with v clamped, on the posterior path of
    `raise_eval.paths.posterior.DBNPosteriorPath` (from its factorial base, q(x_1 | v) itself for two hidden
    layers, to f(v, .)): h_0 from the base, then for j = 0 .. K_h - 1, h <- T_{beta_j}(h) (the kernel of the
    temperature the state has, which need not be reversible) and W *= f_{beta_{j+1}}(h) / f_{beta_j}(h); with
    W_0 = Z_0(v) the base's normalizer. (h, W) is properly weighted for f(v, .): E[W phi(h)] = sum_h f(v, h) phi(h)
    for every phi (AIS on the extended space of the whole trajectory). Then the top RBM's reverse pass runs from
    x_{L-1} of h, and w = W w_rev / Z_0, so E[w] = sum_h f(v, h) psi(x_{L-1}) = p_ann(v).
  Both are unbiased for the same p_ann(v), whatever the heating schedule (`heating_betas`, by default the betas of
  the reverse pass); one heating step (betas [0, 1]) is importance sampling with the base, which for two hidden
  layers is unrolling itself. As K_h grows the heated state becomes a draw of p(h | v) and w loses the proposal's
  mismatch, while p_ann(v) approaches p(v) as K grows (p_ann_top approaches the top RBM). Heating the directed
  layers with the kernel of the next temperature (T_{beta_{j+1}}, as Alg. 3's box prints it for DBMs) is biased.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from torch import Tensor

from raise_eval.annealing import Kernel, anneal, check_log_weights, continuation
from raise_eval.contracts import ResumableState, StartsAtTestVector
from raise_eval.estimators.control_variates import ControlVariateEstimate, control_variate_mean
from raise_eval.models.boltzmann.unit_data import check_binary
from raise_eval.paths.boltzmann import BoltzmannPath
from raise_eval.paths.posterior import DBNPosteriorPath
from raise_eval.schedules import validate_schedule
from raise_eval.settings import check_count
from raise_eval.stats import log_mean_exp, mean_and_stderr


@dataclass
class RAISEResult:
    """Per-example RAISE estimates.

    log_weights: per-chain log w, float64, shaped (N, num_chains); exp(log_w) is unbiased for p_ann(v_i).
    log_likelihood: log mean w over chains, shaped (N,): stochastic lower bounds on log p_ann(v_i).
    log_unnormalized: exact log f(v_i) under the model, shaped (N,), for RBMs (the control variate of Sec. 4);
        None for DBMs and DBNs, whose log f(v) must be estimated (pass the estimates to `control_variate_mean`).
    mean, stderr: average of log_likelihood over the N examples and its standard error.
    start: 'exact posterior' (RBM), 'heating' (DBM), 'heated' or 'unrolled' (DBN), 'test vector' (a fully visible
        model: the reverse pass starts from v itself).
    """

    log_weights: Tensor
    log_likelihood: Tensor
    log_unnormalized: Optional[Tensor]
    mean: float
    stderr: float
    num_steps: int
    num_chains: int
    seconds: float
    start: str = "exact posterior"

    @classmethod
    def from_log_weights(
        cls, log_weights: Tensor, log_unnormalized: Optional[Tensor], num_steps: int, start: float, kind: str
    ) -> RAISEResult:
        """The result whose chains have these log-weights (N, num_chains), timed from `start` (time.perf_counter());
        the per-example estimates and their summary are computed here."""
        per_example = log_mean_exp(log_weights, dim=1)
        mean, se = mean_and_stderr(per_example)
        return cls(
            log_weights=log_weights,
            log_likelihood=per_example,
            log_unnormalized=log_unnormalized,
            mean=mean,
            stderr=se,
            num_steps=num_steps,
            num_chains=log_weights.shape[1],
            seconds=time.perf_counter() - start,
            start=kind,
        )

    def control_variate_mean(
        self,
        all_log_unnormalized: Tensor,
        subset_log_unnormalized: Optional[Tensor] = None,
        alpha: Union[float, str] = 1.0,
    ) -> ControlVariateEstimate:
        """Average log-likelihood over a whole test set from RAISE on a subset (the paper's Sec. 4, eq. 14).

        mean_subset(Y - alpha X) + alpha mean_all(X), with Y the RAISE estimates and X = log f(v) (exact or
        estimated), cheap for every test vector. See `control_variate_mean`.

        Args:
            all_log_unnormalized: X for every test vector, shaped (N_all,).
            subset_log_unnormalized: X for this result's examples, shaped (N,): the same values as in
                `all_log_unnormalized` (not a fresh estimate); defaults to the exact `log_unnormalized`.
            alpha: a number, or 'optimal' for Cov(Y, X) / Var(X) estimated on the subset.
        """
        x = self.log_unnormalized if subset_log_unnormalized is None else subset_log_unnormalized
        if x is None:
            raise ValueError(
                "this model's log f(v) has no exact value: pass the estimates of log f(v) for the subset "
                "(subset_log_unnormalized), taken from the same values as all_log_unnormalized"
            )
        return control_variate_mean(self.log_likelihood, x, all_log_unnormalized, alpha=alpha)

    def to_dict(self) -> dict:
        return {
            "mean": self.mean,
            "stderr": self.stderr,
            "num_examples": int(self.log_likelihood.shape[0]),
            "num_steps": self.num_steps,
            "num_chains": self.num_chains,
            "seconds": self.seconds,
            "start": self.start,
            "log_likelihood": self.log_likelihood,
        }


DBN_STARTS = ("heated", "unrolled")


def raise_log_likelihood(
    path: BoltzmannPath,
    data: Tensor,
    betas: Tensor,
    num_chains: int,
    *,
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    heating_kernel: Optional[Kernel] = None,
    unroll: Any = None,
    dbn_start: str = "heated",
    heating_betas: Optional[Tensor] = None,
    progress: bool = False,
    checkpoint: Any = None,
) -> RAISEResult:
    """Run RAISE for every row of `data` with `num_chains` chains each, all N x C chains in one batch.

    The start follows the model (see the module docstring): the exact posterior for an RBM, heating for a DBM
    (any layered machine with even hidden layers); for a DBN (`unroll`), heated (default) or unrolled directed
    layers below the top RBM that `path` anneals.

    Args:
        path: geometric path of the Boltzmann machine annealed (for a DBN, of its top RBM), or of a model with no
            hidden units (`FullyVisiblePath`, `EnergyPath`: RAISE then starts from each test vector itself).
        data: test vectors shaped (N, n_visible): binary, a typed visible layer's states, or a fully visible
            model's site states.
        betas: the forward schedule from 0 to 1 (it is run backwards), shaped (K + 1,).
        num_chains: chains per example C.
        generator: the only source of randomness.
        kernel: replaces the path's kernel in the reverse pass.
        heating_kernel: replaces the kernel of the heating pass: the clamped block Gibbs kernel (DBMs) or the
            posterior sweep of `DBNPosteriorPath` (heated DBNs).
        unroll: a DBN (`sample_recognition`, `log_directed_likelihood`, `top`) below whose top RBM RAISE runs;
            `path.model` must be its top RBM.
        dbn_start: for a DBN, 'heated' (forward AIS over the directed layers' posterior with v clamped, then the
            reverse pass) or 'unrolled' (the directed layers drawn once from the recognition distribution, as in
            the paper). Both are unbiased for the unrolled annealing model's p_ann(v).
        heating_betas: the schedule (K_h + 1,) of a heated DBN's heating pass, from 0 to 1; `betas` when None.
        checkpoint: saves the annealing state as it goes and restores a saved one (`raise_eval.runtime.resume.
            ShardCheckpoint`, phases 'heating' and 'RAISE'): a restored run continues from its saved step with the
            generator's saved state, and gives the numbers of an uninterrupted run.
    """
    betas = validate_schedule(betas)
    check_count("num_chains", num_chains)
    if dbn_start not in DBN_STARTS:
        raise ValueError(f"dbn_start must be one of {', '.join(DBN_STARTS)}, got {dbn_start!r}")
    if heating_betas is not None:
        if unroll is None or dbn_start != "heated":
            raise ValueError(
                "heating_betas is the schedule of a heated DBN's heating pass: it needs unroll=dbn and "
                f"dbn_start='heated' (got {'no unroll' if unroll is None else f'dbn_start={dbn_start!r}'})"
            )
        heating_betas = validate_schedule(heating_betas)
    model = path.model
    if isinstance(path, StartsAtTestVector):  # a path with no hidden units declares its start at v
        what = "fully visible" if model.family == "fully-visible" else model.family
        article = "an" if what[0] in "aeiou" else "a"
        if unroll is not None or heating_betas is not None or heating_kernel is not None:
            raise ValueError(f"{article} {what} model has no hidden units: unroll and heating do not apply to it")
        if checkpoint is not None and not isinstance(path, ResumableState):
            raise ValueError(f"resume files do not cover {what} models yet: run without a checkpoint")
        return _raise_from_test_vectors(path, data, betas, num_chains, generator, kernel, progress, checkpoint)
    if unroll is not None and unroll.top.weights[0] is not model.weights[0]:
        raise ValueError("RAISE for a DBN anneals its top RBM: build the path on dbn.top")
    n_visible = unroll.n_visible if unroll is not None else model.n_visible
    if model.typed_layers:  # typed layers (MixedBoltzmannMachine): states of its visible layer
        model.check_visible(data, "RAISE test data")
    else:
        check_binary(data, n_visible, "RAISE test data")
    start = time.perf_counter()
    v = data.to(device=model.device, dtype=model.dtype)
    n = v.shape[0]
    log_f = None
    if unroll is None and not _even_hidden_layers(model):
        log_f = path.log_density(path.state_from_layers([v, None]), 1.0).to(torch.float64)  # (N,), exact
    if unroll is not None:
        kind = dbn_start
    else:
        kind = "heating" if _even_hidden_layers(model) else "exact posterior"
    saved = None if checkpoint is None else checkpoint.restore("RAISE", path)
    if saved is not None:  # the start was drawn before the save: continue the reverse pass
        state, log_w0 = saved["state"], saved["extra"]["log_w0"]
    elif kind == "unrolled":
        layers, log_q = unroll.sample_recognition(v, generator, num_samples=num_chains)
        state, log_w0 = _posterior_start(path, layers[-1])
        log_w0 = log_w0 + unroll.log_directed_likelihood(layers) - log_q
    elif kind == "heated":
        heating = betas if heating_betas is None else heating_betas
        state, log_w0 = _heat_dbn(path, unroll, v, num_chains, heating, generator, heating_kernel, progress, checkpoint)
    elif kind == "exact posterior":
        state = path.state_from_layers([v.unsqueeze(1).expand(n, num_chains, n_visible).contiguous(), None])
        log_w0 = (log_f - path.log_partition_initial).unsqueeze(1)
    else:
        v_chains = v.unsqueeze(1).expand(n, num_chains, n_visible).contiguous()
        state, log_w0 = _heat(path, v_chains, betas, generator, heating_kernel, progress, checkpoint)
    _, log_w = anneal(
        path,
        state,
        betas.flip(0),
        generator=generator,
        kernel=kernel,
        progress=progress,
        desc="RAISE",
        **continuation(checkpoint, "RAISE", saved, extra={"log_w0": log_w0}),
    )
    log_w = log_w + log_w0
    check_log_weights(log_w, "RAISE", chains_dim=1)  # the start weights too (log f(v), heating, recognition)
    return RAISEResult.from_log_weights(log_w, log_f, betas.numel() - 1, start, kind)


def _raise_from_test_vectors(
    path, data: Tensor, betas: Tensor, num_chains: int, generator, kernel, progress, checkpoint=None
):
    """RAISE on a model with no hidden units (a fully visible model, a user's energy): its path declares
    `test_vector_start(data, num_chains, what) -> (state (N, C, ...), log f(v) (N,))`, and the reverse pass starts
    from the test vector itself with log w_0 = log f(v) - log Z_0 (the RBM case without a hidden layer to sum
    out). data: test vectors (N, ...) in the model's convention. A `checkpoint` (a path whose states a resume file
    keeps: `ResumableState`) continues a saved reverse pass from its step."""
    start = time.perf_counter()
    state, log_f = path.test_vector_start(data, num_chains, "RAISE test data")
    log_f = log_f.to(torch.float64)
    log_w0 = (log_f - path.log_partition_initial).unsqueeze(1)
    saved = None if checkpoint is None else checkpoint.restore("RAISE", path)
    if saved is not None:  # the start is the test vectors themselves: only the chains' state was saved
        state = saved["state"]
    _, log_w = anneal(
        path, state, betas.flip(0), generator=generator, kernel=kernel, progress=progress, desc="RAISE",
        **continuation(checkpoint, "RAISE", saved),
    )  # fmt: skip
    log_w = log_w + log_w0
    check_log_weights(log_w, "RAISE", chains_dim=1)
    return RAISEResult.from_log_weights(log_w, log_f, betas.numel() - 1, start, "test vector")


def _even_hidden_layers(model) -> list[int]:
    return list(range(2, model.num_layers, 2))


def _posterior_start(path: BoltzmannPath, v: Tensor) -> tuple[Any, Tensor]:
    """Start of an RBM's reverse pass: the state v (hidden summed out) and log w_0 = log f_K(v) - log Z_0."""
    if _even_hidden_layers(path.model):
        raise ValueError("an exact posterior start needs a two-layer machine (an RBM)")
    state = path.state_from_layers([v, None])
    return state, path.log_density(state, 1.0).to(torch.float64) - path.log_partition_initial


def _heat(
    path: BoltzmannPath, v: Tensor, betas: Tensor, generator, heating_kernel, progress, checkpoint=None
) -> tuple[Any, Tensor]:
    """Heating (Alg. 3, slip fixed): h'_0 ~ p_0(h | v), then forward annealing with v clamped.

    Returns the state (v, h'_K) at beta = 1 and log w_0 = log p_0(v) + sum_k log f_k(v, h'_k) - log f_{k-1}(v, h'_k),
    h'_k drawn with the clamped kernel of p_{k-1} (the same loop as AIS). Shapes: v (N, C, n_visible); log w_0
    (N, C) in float64.
    """
    model = path.model
    heating = path.with_clamped((0,))
    saved = None if checkpoint is None else checkpoint.restore("heating", heating)
    if saved is None:
        layers = [v] + [
            path.sample_base_layer(l, v.shape[:-1], generator) if l % 2 == 0 else None
            for l in range(1, model.num_layers)
        ]
        state = heating.state_from_layers(layers)
    else:
        state = saved["state"]
    state, log_w = _anneal_heating(heating, state, betas, generator, heating_kernel, progress, checkpoint, saved)
    return state, log_w + path.log_base_prob(v, 0)


def _heat_dbn(
    path: BoltzmannPath, dbn, v: Tensor, num_chains: int, betas: Tensor, generator, heating_kernel, progress,
    checkpoint=None,
) -> tuple[Any, Tensor]:
    """A heated DBN's start: forward AIS over the directed layers with v clamped (`DBNPosteriorPath`), then the
    top RBM's state x_{L-1} of its final state.

    Returns the top path's state (batch (N, C)) and log w_0 = log Z_0(v) + log W - log Z_0_top (float64, (N, C)),
    W the heating's annealing weight (see the module docstring). Shapes: v (N, n_visible).
    """
    posterior = DBNPosteriorPath(dbn)
    saved = None if checkpoint is None else checkpoint.restore("heating", posterior)
    if saved is None:
        state, log_z0 = posterior.start(v, num_chains, generator)
    else:  # a saved state keeps its layers; the rest is a function of them and v
        state = posterior.state_from_layers(v, saved["state"])  # the saved layers (`state_from_record`)
        log_z0 = posterior.base_log_partition(v, state.base_logits)
    final, log_w = _anneal_heating(posterior, state, betas, generator, heating_kernel, progress, checkpoint, saved)
    top_visible = final.layers[-1]
    return path.state_from_layers([top_visible, None]), log_w + log_z0.unsqueeze(1) - path.log_partition_initial


def _anneal_heating(
    heating, state, betas: Tensor, generator, kernel, progress, checkpoint, saved
) -> tuple[Any, Tensor]:
    """The heating pass (a DBM's clamped path or a DBN's posterior path) from `state`, continued from `saved`."""
    return anneal(
        heating, state, betas, generator=generator, kernel=kernel, progress=progress, desc="RAISE heating",
        **continuation(checkpoint, "heating", saved),
    )  # fmt: skip
