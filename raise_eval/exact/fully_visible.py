"""Exact answers for fully visible pairwise models (`FullyVisibleModel`): log f(v) in closed form, log Z by
enumerating the q^L configurations in chunks within the memory bound, and, for tiny models, the palindromic
single-site scan as a transition matrix and the annealing model's p_ann(v) (what RAISE is unbiased for).

Configurations are numbered in base q with site 0 the least significant digit (`site_configurations`,
`site_configuration_index`), as `binary_configurations` numbers binary ones.
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
    plan_chunks,
    progress_bar,
)
from raise_eval.models.fully_visible import FullyVisibleModel

SCAN_METHODS = ("gibbs", "metropolis")


def configuration_units(model: FullyVisibleModel) -> int:
    """log2 of the number of configurations q^L, rounded up: what `max_units` limits."""
    return math.ceil(model.n_visible * math.log2(model.num_states) - 1e-9)


def site_configurations(size: int, q: int, start: int = 0, stop: Optional[int] = None, *, device=None) -> Tensor:
    """Rows are the base-q digits of the integers start..stop-1 (digit i = site i), int64 shaped (stop - start, L)."""
    stop = q**size if stop is None else stop
    codes = torch.arange(start, stop, device=device, dtype=torch.int64)
    powers = q ** torch.arange(size, device=device, dtype=torch.int64)
    return (codes.unsqueeze(-1) // powers) % q


def site_configuration_index(codes: Tensor, q: int) -> Tensor:
    """The integer sum_i v_i q^i of codes (*batch, L), int64 shaped (*batch,)."""
    powers = q ** torch.arange(codes.shape[-1], device=codes.device, dtype=torch.int64)
    return (codes.to(torch.int64) * powers).sum(-1)


def _per_config_bytes(model: FullyVisibleModel) -> int:
    # the one-hot rows, their product with the couplings and the gathered terms, float64
    return 3 * model.n_visible * model.num_states * BYTES


def exact_cost(model: FullyVisibleModel, num_vectors: int) -> ExactCost:
    """The configurations and approximate work of exact log Z (q^L configurations, a product of (Lq)^2 each) and of
    exact log f(v) (closed form), without enumerating anything."""
    width = model.n_visible * model.num_states
    configs = model.num_states**model.n_visible
    return ExactCost(
        num_vectors=int(num_vectors),
        log_z_units=configuration_units(model),
        log_z_group="sites",
        log_z_macs=int(configs * width * width),
        log_z_exps=int(configs),
        log_f_route="closed-form",
        log_f_units=0,
        log_f_macs=int(num_vectors * width * width),
        log_f_exps=0,
    )


def chunk_bytes(model: FullyVisibleModel, num_vectors: int, with_log_f: bool, max_bytes: int) -> int:
    """Peak bytes of one chunk of the log Z enumeration within `max_bytes` (log f(v) is closed form: its rows
    cost the same per vector)."""
    per_config = _per_config_bytes(model)
    configs = model.num_states**model.n_visible
    c, _ = plan_chunks(configs, 0, per_config, 0, 0, max_bytes)
    rows = num_vectors * per_config if with_log_f else 0
    return int(max(c * per_config, rows))


def log_f_units(model: FullyVisibleModel) -> int:
    """0: log f(v) is closed form."""
    return 0


def log_partition(
    model: FullyVisibleModel,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    chunk_size: Optional[int] = None,
    max_bytes: Optional[int] = None,
    progress: bool = False,
) -> float:
    """Exact log Z = log sum_v f(v) over the q^L configurations, float64, in chunks whose temporaries stay within
    `max_bytes` (refused, ValueError, beyond 2^max_units configurations)."""
    check_units(configuration_units(model), max_units, "log Z")
    m = model.to(dtype=torch.float64)
    size, q = m.n_visible, m.num_states
    configs = q**size
    c, _ = plan_chunks(configs, 0, _per_config_bytes(m), 0, 0, DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
                       chunk_size)  # fmt: skip
    total = RunningLogSumExp(1, m.device)
    bar = progress_bar(progress, "exact log Z")
    bar.total = len(chunks(configs, c))
    for start, stop in chunks(configs, c):
        codes = site_configurations(size, q, start, stop, device=m.device)
        total.add_(0, 1, m.log_unnormalized_codes(codes).unsqueeze(0))
        bar.update(1)
    bar.close()
    return float(total.result()[0])


def log_unnormalized_visible(model: FullyVisibleModel, v: Tensor, *, max_bytes: Optional[int] = None, **_) -> Tensor:
    """Exact log f(v) in float64 (closed form), shaped (*batch,) for site states v (*batch, L), computed in
    blocks of rows within `max_bytes`."""
    m = model.to(dtype=torch.float64)
    codes = m.codes(v, "v")
    flat = codes.reshape(-1, m.n_visible)
    block = max(1, (DEFAULT_MAX_BYTES if max_bytes is None else max_bytes) // _per_config_bytes(m))
    out = [m.log_unnormalized_codes(flat[a:b]) for a, b in chunks(flat.shape[0], block)]
    return (torch.cat(out) if out else flat.new_zeros(0, dtype=torch.float64)).reshape(codes.shape[:-1])


# ----------------------------------------------------------------------------------------------- tiny models
def _log_table(model: FullyVisibleModel, max_units: int) -> tuple[Tensor, Tensor]:
    """(codes of every configuration (q^L, L), log f of each (q^L,)), float64."""
    check_units(configuration_units(model), max_units, "a transition matrix")
    m = model.to(dtype=torch.float64)
    codes = site_configurations(m.n_visible, m.num_states, device=m.device)
    return codes, m.log_unnormalized_codes(codes)


def site_update_matrix(model: FullyVisibleModel, site: int, method: str = "gibbs", *, max_units: int = 14) -> Tensor:
    """The q^L x q^L transition matrix of one update of `site` (every other site kept): 'gibbs' draws the site
    from its conditional; 'metropolis' proposes one of the q - 1 other states uniformly and accepts with
    min(1, f(v') / f(v)). Float64; configurations numbered as `site_configurations`."""
    if method not in SCAN_METHODS:
        raise ValueError(f"method must be one of {', '.join(SCAN_METHODS)}, got {method!r}")
    codes, log_f = _log_table(model, max_units)
    q = model.num_states
    index = torch.arange(codes.shape[0], device=codes.device)
    power = q**site
    digit = codes[:, site]
    # the configuration with `site` set to each state a: (q^L, q)
    neighbours = index.unsqueeze(1) + (torch.arange(q, device=codes.device) - digit.unsqueeze(1)) * power
    log_f_neighbours = log_f[neighbours]
    if method == "gibbs":
        probs = torch.softmax(log_f_neighbours, dim=1)
    else:
        accept = torch.exp((log_f_neighbours - log_f.unsqueeze(1)).clamp(max=0.0)) / (q - 1)
        own = torch.nn.functional.one_hot(digit, q).bool()
        probs = torch.where(own, torch.zeros_like(accept), accept)
        probs = probs + own * (1 - probs.sum(1, keepdim=True))
    matrix = torch.zeros(codes.shape[0], codes.shape[0], dtype=torch.float64, device=codes.device)
    return matrix.scatter_add_(1, neighbours, probs)


def scan_transition_matrix(
    model: FullyVisibleModel, method: str = "gibbs", *, max_units: int = 14, order: Optional[Sequence[int]] = None
) -> Tensor:  # fmt: skip
    """The transition matrix of one palindromic scan, float64 (q^L, q^L): sites 0..L-1, then L-1..0, or the sites in
    `order` (the kernel's `CouplingTables.scan_order()`: by colour for sparse couplings)."""
    matrix = None
    size = model.n_visible
    for site in [*range(size), *reversed(range(size))] if order is None else order:
        step = site_update_matrix(model, site, method, max_units=max_units)
        matrix = step if matrix is None else matrix @ step
    return matrix


def annealing_model_marginal(
    model: FullyVisibleModel, base_fields: Sequence[Tensor], betas: Tensor, *, method: str = "gibbs",
    max_units: int = 14,
) -> Tensor:  # fmt: skip
    """p_ann(v) for every configuration (index `site_configuration_index(codes, q)`), float64 (q^L,): x_0 drawn
    exactly from the independent-site base, then one palindromic scan at each of betas[1], ..., betas[K] (the
    forward chain whose reversal RAISE runs). `base_fields`: the base's fields in the model's convention (a
    one-element sequence, as `FullyVisiblePath.base_biases` holds them, or the tensor itself)."""
    base = base_fields[0] if isinstance(base_fields, (list, tuple)) else base_fields
    m = model.to(dtype=torch.float64)
    base = torch.as_tensor(base, dtype=torch.float64, device=m.device)
    betas = torch.as_tensor(betas, dtype=torch.float64).tolist()
    _, log_f0 = _log_table(m.annealed(0.0, base), max_units)
    p = torch.softmax(log_f0, dim=0)
    for beta in betas[1:]:
        p = p @ scan_transition_matrix(m.annealed(beta, base), method, max_units=max_units)
    return p


def log_annealing_model(
    model: FullyVisibleModel, base_fields: Sequence[Tensor], betas: Tensor, v: Tensor, *, method: str = "gibbs"
) -> Tensor:
    """log p_ann(v) at site states v (N, L), float64 shaped (N,): what RAISE's weights are unbiased for."""
    p = annealing_model_marginal(model, base_fields, betas, method=method)
    return p[site_configuration_index(model.codes(v), model.num_states)].log()
