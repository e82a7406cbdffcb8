"""Exact answers for a user's energy model (`EnergyModel`) on discrete support: log Z by enumerating the q^D
configurations in chunks (the energy called on a chunk at a time, within the memory bound), log f(v) = -E(v), and,
for tiny models, the discrete kernels as transition matrices and the annealing model's p_ann(v) (what RAISE is
unbiased for). A real support has no enumeration: it is refused by name (tests use energies with a closed-form log Z).

Configurations are numbered in base q with site 0 (the first coordinate of x flattened) the least significant
digit, as `fully_visible.site_configurations` numbers them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

from raise_eval.exact.enumeration import (
    BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_UNITS,
    ExactCost,
    RunningLogSumExp,
    check_units,
    chunks,
    progress_bar,
)
from raise_eval.exact.fully_visible import site_configuration_index, site_configurations
from raise_eval.models.energy import TWO_STATE_VALUES, EnergyModel, SiteBase

METHODS = ("metropolis", "gibbs-with-gradients")


def _refuse_real(model: EnergyModel, what: str) -> None:
    if not model.support.discrete:
        raise ValueError(
            f"exact {what} of an energy on {model.support.describe()} support has no enumeration: use AIS and RAISE "
            "(or an energy whose log Z is known in closed form)"
        )


def configuration_units(model: EnergyModel) -> int:
    """log2 of the number of configurations q^D, rounded up: what `max_units` limits."""
    return math.ceil(model.n_visible * math.log2(model.num_states) - 1e-9)


def configurations(model: EnergyModel, start: int = 0, stop: Optional[int] = None) -> Tensor:
    """Configurations start..stop-1 as int64 codes shaped (stop - start, *event_shape)."""
    codes = site_configurations(model.n_visible, model.num_states, start, stop, device=model.device)
    return codes.reshape(-1, *model.event_shape)


def configuration_index(model: EnergyModel, codes: Tensor) -> Tensor:
    """The number of codes (*B, *event_shape) in `configurations`' order, int64 (*B,)."""
    flat = codes.flatten(start_dim=codes.dim() - len(model.event_shape))
    return site_configuration_index(flat, model.num_states)


def _per_config_bytes(model: EnergyModel) -> int:
    # the codes, the energy's input and (a guess at) its activations: a few copies of the input, float64
    return 4 * model.n_visible * max(model.num_states, 1) * BYTES


def exact_cost(model: EnergyModel, num_vectors: int) -> ExactCost:
    """What exact log Z would enumerate (q^D configurations, one energy each) and log f(v) (one energy per vector),
    or, on real support, the refusal."""
    if not model.support.discrete:
        return ExactCost(int(num_vectors), 0, "sites", 0, 0, "energy", 0, 0, 0,
                         refusal=f"an energy on {model.support.describe()} support has no enumeration")  # fmt: skip
    configs = model.num_states**model.n_visible
    return ExactCost(
        num_vectors=int(num_vectors), log_z_units=configuration_units(model), log_z_group="sites",
        log_z_macs=int(configs * model.n_visible), log_z_exps=int(configs), log_f_route="energy", log_f_units=0,
        log_f_macs=int(num_vectors * model.n_visible), log_f_exps=0,
    )  # fmt: skip


def chunk_bytes(model: EnergyModel, num_vectors: int, with_log_f: bool, max_bytes: int) -> int:
    """Peak bytes of one chunk of the log Z enumeration within `max_bytes` (approximate: the energy's own
    activations are the user's)."""
    per = _per_config_bytes(model)
    configs = model.num_states**model.n_visible if model.support.discrete else 0
    return int(min(max_bytes, max(configs * per, (num_vectors * per) if with_log_f else 0)))


def log_f_units(model: EnergyModel) -> int:
    """0: log f(v) = -E(v) is one evaluation of the energy."""
    return 0


def log_partition(
    model: EnergyModel,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    chunk_size: Optional[int] = None,
    max_bytes: Optional[int] = None,
    progress: bool = False,
) -> float:
    """Exact log Z = log sum_x exp(-E(x)) over the q^D configurations, float64, the energy called on chunks of at
    most `chunk_size` configurations (by default as many as `max_bytes` allows); refused (ValueError) on real
    support or beyond 2^max_units configurations."""
    _refuse_real(model, "log Z")
    check_units(configuration_units(model), max_units, "log Z")
    configs = model.num_states**model.n_visible
    size = (DEFAULT_MAX_BYTES if max_bytes is None else max_bytes) // _per_config_bytes(model)
    size = max(1, min(size, configs) if chunk_size is None else min(size, int(chunk_size)))
    total = RunningLogSumExp(1, model.device)
    parts = chunks(configs, size)
    bar = progress_bar(progress, "exact log Z")
    bar.total = len(parts)
    for start, stop in parts:
        total.add_(0, 1, model.log_unnormalized_state(configurations(model, start, stop)).unsqueeze(0))
        bar.update(1)
    bar.close()
    return float(total.result()[0])


def log_unnormalized_visible(model: EnergyModel, v: Tensor, **_) -> Tensor:
    """log f(v) = -E(v) in float64, shaped (*batch,) for examples v (*batch, *event_shape)."""
    return model.log_unnormalized(v)


# ----------------------------------------------------------------------------------------------- tiny models
def _site_base(model: EnergyModel, base) -> SiteBase:
    base = base[0] if isinstance(base, (list, tuple)) else base
    if not isinstance(base, SiteBase):
        raise ValueError(f"a discrete energy's base is a SiteBase, got a {type(base).__name__}")
    return base


def _tables(model: EnergyModel, base: SiteBase, beta: float, max_units: int, with_grad: bool = False):
    """(codes of every configuration (n, D), log f_beta of each (n,), log f's gradient (n, D[, q]) or None)."""
    _refuse_real(model, "transition matrices")
    check_units(configuration_units(model), max_units, "a transition matrix")
    codes = configurations(model)
    if with_grad:
        log_f, grad = model.log_f_and_grad(codes)
        grad = grad.double().reshape(codes.shape[0], model.n_visible, -1)
    else:
        log_f, grad = model.log_unnormalized_state(codes), None
    log_beta = (1 - beta) * base.log_prob(codes) + beta * log_f
    return codes.reshape(codes.shape[0], -1), log_beta, grad


def _neighbours(codes: Tensor, q: int, site: int) -> Tensor:
    """The configuration with `site` set to each state a, for every configuration: (n, q)."""
    index = torch.arange(codes.shape[0], device=codes.device)
    return index.unsqueeze(1) + (torch.arange(q, device=codes.device) - codes[:, site].unsqueeze(1)) * q**site


def metropolis_scan_matrix(model: EnergyModel, base, beta: float, *, max_units: int = 14) -> Tensor:
    """The q^D x q^D transition matrix of one palindromic single-site Metropolis scan at beta (each site proposes
    one of its q - 1 other states uniformly, accepted with min(1, f_beta(x') / f_beta(x))), float64."""
    codes, log_f, _ = _tables(model, _site_base(model, base), beta, max_units)
    q, size = model.num_states, codes.shape[1]
    matrix = None
    for site in [*range(size), *reversed(range(size))]:
        nb = _neighbours(codes, q, site)
        own = torch.nn.functional.one_hot(codes[:, site], q).bool()
        probs = torch.exp((log_f[nb] - log_f.unsqueeze(1)).clamp(max=0.0)) / (q - 1)
        probs = probs.masked_fill(own, 0.0)
        probs = probs + own * (1 - probs.sum(1, keepdim=True))
        step = torch.zeros(codes.shape[0], codes.shape[0], dtype=torch.float64).scatter_add_(1, nb, probs)
        matrix = step if matrix is None else matrix @ step
    return matrix


def gibbs_with_gradients_matrix(
    model: EnergyModel, base, beta: float, *, num_proposals: int = 1, max_units: int = 12
) -> Tensor:
    """The transition matrix of Gibbs with gradients at beta (`num_proposals` Metropolis-Hastings steps, each
    proposing (site i, state a) with probability softmax(d / 2), d the first-order change of log f_beta), float64."""
    site_base = _site_base(model, base)
    codes, log_f, grad = _tables(model, site_base, beta, max_units, with_grad=True)
    q, (n, size) = model.num_states, codes.shape
    if model.support.kind == "categorical":
        change = grad - grad.gather(-1, codes.unsqueeze(-1))  # (n, D, q)
    else:
        values = torch.tensor(TWO_STATE_VALUES[model.support.kind], dtype=torch.float64)
        change = grad * (values - values[codes].unsqueeze(-1))
    base_lp = site_base.log_probs.reshape(size, q)
    base_own = base_lp.expand(n, size, q).gather(-1, codes.unsqueeze(-1))  # (n, D, 1)
    d = (1 - beta) * (base_lp - base_own) + beta * change
    own = torch.nn.functional.one_hot(codes, q).bool()
    log_q = torch.log_softmax(d.masked_fill(own, -torch.inf).reshape(n, -1) / 2, dim=-1).reshape(n, size, q)
    nb = torch.stack([_neighbours(codes, q, i) for i in range(size)], dim=1)  # (n, D, q)
    # q(x | y) for y = x with site i set to a: y's proposal of (i, x_i)
    back = log_q[nb, torch.arange(size).reshape(1, size, 1), codes.unsqueeze(-1).expand(n, size, q)]
    log_accept = (log_f[nb] - log_f.reshape(n, 1, 1) + back - log_q).clamp(max=0.0)
    probs = torch.where(own, torch.zeros_like(log_q), (log_q + log_accept).exp())
    step = torch.zeros(n, n, dtype=torch.float64).scatter_add_(1, nb.reshape(n, -1), probs.reshape(n, -1))
    step += torch.diag(1 - step.sum(1))
    return torch.linalg.matrix_power(step, num_proposals)


def annealing_model_marginal(
    model: EnergyModel, base_biases, betas: Tensor, *, method: str = "metropolis", max_units: int = 12
) -> Tensor:
    """p_ann(x) for every configuration (index `configuration_index`), float64 (q^D,): x_0 drawn exactly from the
    base, then one transition of `method` ('metropolis': the palindromic scan; 'gibbs-with-gradients') at each of
    betas[1], ..., betas[K] (the forward chain whose reversal RAISE runs)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    base = _site_base(model, base_biases)
    matrix = metropolis_scan_matrix if method == "metropolis" else gibbs_with_gradients_matrix
    p = torch.softmax(base.log_prob(configurations(model)), dim=0)
    for beta in torch.as_tensor(betas, dtype=torch.float64).tolist()[1:]:
        p = p @ matrix(model, base, beta, max_units=max_units)
    return p


def log_annealing_model(
    model: EnergyModel, base_biases: Sequence, betas: Tensor, v: Tensor, *, method: str = "metropolis"
) -> Tensor:
    """log p_ann(v) at examples v (N, *event_shape), float64 (N,): what RAISE's weights are unbiased for."""
    p = annealing_model_marginal(model, base_biases, betas, method=method)
    return p[configuration_index(model, model.state_from_data(v, "v"))].log()
