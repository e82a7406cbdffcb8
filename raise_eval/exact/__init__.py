"""Exact answers by enumeration: the ground truth of every estimator test, and the exact values of evaluations.

One package: `enumeration` (chunks within a memory bound, the running log-sum-exp, limits, `ExactCost`), `binary`
(binary layers: RBMs, DBMs, and DBNs), `typed` (typed layers, dispatched on their declared supports),
`fully_visible` (pairwise models with no hidden units), `energy` (a user's energy on discrete support). The functions
below take any such model and hand it to the module its declared `family` names (a Boltzmann machine: the module of
its layers, as it declares `typed_layers`).

- `log_partition`, `log_unnormalized_visible`, `log_likelihood`: log Z, log f(v), log p(v) in float64.
- `exact_cost`, `log_f_units`: what they would enumerate, without doing it (or why they cannot: `ExactCost.refusal`).
- `annealing_model_marginal`, `log_annealing_model`: p_ann(v), what RAISE is unbiased for.
- `block_gibbs_transition_matrix`, `annealing_model_marginal_along`, `binary_configurations`,
  `configuration_index`: binary machines' tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from torch import Tensor

from raise_eval.exact import binary, energy, fully_visible, typed
from raise_eval.exact.binary import (
    LOG_F_ROUTES,
    annealing_model_marginal_along,
    block_gibbs_transition_matrix,
)
from raise_eval.exact.enumeration import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_UNITS,
    EXP_MACS,
    ExactCost,
    binary_configurations,
    configuration_index,
    softplus_,
)

# The module of each family whose exact answers do not depend on its layers' form; a Boltzmann machine ('RBM',
# 'DBM', 'DBN') goes to the module of its layers, as it declares them (`typed_layers`).
_FAMILY_MODULES = {"fully-visible": fully_visible, "energy": energy}


def _module(model):
    module = _FAMILY_MODULES.get(model.family)
    if module is not None:
        return module
    return typed if model.typed_layers else binary


def exact_cost(model, num_vectors: int) -> ExactCost:
    """The units, routes and approximate work of exact log Z and of exact log f(v) for `num_vectors` vectors,
    without enumerating anything; `ExactCost.refusal` says why when there is no route."""
    return _module(model).exact_cost(model, num_vectors)


def chunk_bytes(model, num_vectors: int, with_log_f: bool, max_bytes: int) -> int:
    """Peak bytes of one chunk of the exact enumerations within `max_bytes` (log Z, and log f(v) of `num_vectors`
    vectors `with_log_f`), by the module of the model's layers: the memory model's exact-stage term."""
    return _module(model).chunk_bytes(model, num_vectors, with_log_f, max_bytes)


def log_f_units(model) -> int:
    """Units the cheapest exact log f(v) route enumerates (2^units configurations; 0 for an RBM, whose log f(v) is
    closed-form); ValueError saying why when no route exists."""
    module = _module(model)
    if module is fully_visible or module is energy:
        return module.log_f_units(model)
    if module is typed:
        cost = typed.exact_cost(model, 1)
        if not cost.enumerable:
            raise ValueError(cost.refusal)
        return cost.log_f_units
    return binary.log_f_units(model)


def log_partition(
    model,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    chunk_size: Optional[int] = None,
    max_bytes: Optional[int] = None,
    progress: bool = False,
) -> float:
    """Exact log Z in float64 (for a DBN, its top RBM's). max_units: refuse (ValueError) to enumerate more than
    2^max_units configurations; chunk_size: at most this many per chunk; max_bytes: bound on one chunk's float64
    temporaries (None: `DEFAULT_MAX_BYTES`); progress: a tqdm bar over the chunks."""
    return _module(model).log_partition(
        model, max_units=max_units, chunk_size=chunk_size, max_bytes=max_bytes, progress=progress
    )


def log_unnormalized_visible(
    model,
    v: Tensor,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    chunk_size: Optional[int] = None,
    max_bytes: Optional[int] = None,
    progress: bool = False,
    route: Optional[str] = None,
) -> Tensor:
    """Exact log f(v) in float64, shaped (*batch,) for v shaped (*batch, n_visible) (see `binary` for the routes of
    binary machines; `route` forces one of them; typed machines choose their own)."""
    module = _module(model)
    if module is not binary and route is not None:
        raise ValueError(f"route {route!r} applies to binary machines; a {model.describe()} chooses its own")
    if module is fully_visible or module is energy:
        return module.log_unnormalized_visible(model, v, max_bytes=max_bytes)
    if module is typed:
        return typed.log_unnormalized_visible(
            model, v, max_units=max_units, chunk_size=chunk_size, max_bytes=max_bytes, progress=progress
        )
    return binary.log_unnormalized_visible(
        model, v, max_units=max_units, chunk_size=chunk_size, max_bytes=max_bytes, progress=progress, route=route
    )


def log_likelihood(
    model, v: Tensor, *, max_units: int = DEFAULT_MAX_UNITS, max_bytes: Optional[int] = None, progress: bool = False
) -> Tensor:
    """Exact log p(v) = log f(v) - log Z in float64, shaped (*batch,)."""
    log_f = log_unnormalized_visible(model, v, max_units=max_units, max_bytes=max_bytes, progress=progress)
    return log_f - log_partition(model, max_units=max_units, max_bytes=max_bytes, progress=progress)


def annealing_model_marginal(model, base_biases: Sequence[Tensor], betas: Tensor, *, max_units: int = 14) -> Tensor:
    """p_ann(v) for every visible configuration (index `configuration_index(v)` for binary machines, the visible
    layer's `configuration_index` for typed ones, `fully_visible.site_configuration_index` for fully visible ones:
    `base_biases` then holds the base's fields, and the kernel is the palindromic single-site Gibbs scan), float64:
    the visible state's distribution after the forward annealing chain from the base through the collapsed
    block-Gibbs kernels at `betas`. Tiny models only."""
    return _module(model).annealing_model_marginal(model, base_biases, betas, max_units=max_units)


def log_annealing_model(model, base_biases: Sequence[Tensor], betas: Tensor, v: Tensor) -> Tensor:
    """log p_ann(v) at the rows of v (N, n_visible), float64 shaped (N,): what RAISE's weights are unbiased for (a
    log-density for a continuous visible layer)."""
    return _module(model).log_annealing_model(model, base_biases, betas, v)


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_UNITS",
    "EXP_MACS",
    "LOG_F_ROUTES",
    "ExactCost",
    "annealing_model_marginal",
    "annealing_model_marginal_along",
    "chunk_bytes",
    "binary_configurations",
    "block_gibbs_transition_matrix",
    "configuration_index",
    "exact_cost",
    "log_annealing_model",
    "log_f_units",
    "log_likelihood",
    "log_partition",
    "log_unnormalized_visible",
    "softplus_",
]
