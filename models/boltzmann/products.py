"""The routes of a layer's input from its neighbours on the CPU.

A sampling step of a Boltzmann machine spends most of its time in the products x_{l-1} W_{l-1} + x_{l+1} W_l^T
(`LayeredBoltzmannMachine.unscaled_input`, `layer_logits`). They can be computed four ways:

- "mm": torch.mm / torch.addmm (MKL's sgemm or dgemm on x86 builds), any dtype and device;
- "onednn": `torch.ops.mkldnn._linear_pointwise` (oneDNN, bundled with PyTorch), float32 on the CPU; a second
  neighbour's product is added by the op's binary post-op;
- "table": for binary x (values 0. and 1.) only: the units of x are cut into groups of k (3 to 6, dividing the
  layer's width; see TABLE_GROUP_SIZES), and a table holds, for each group, the 2^k sums of its weight rows (summed in
  float64, rounded once). x W is then the sum over groups of one table row each, which
  `torch.embedding_bag` adds up: k times fewer additions than the dense product's multiply-adds,
  and the table (2^k / k times the weights' memory) is read in column blocks that stay in the cache;
- "amx": for binary x in float32 on CPUs with AMX int8 tiles (Intel Xeon since Sapphire Rapids): each column of the
  weights is held as 31-bit integers under a power-of-two scale (`IntegerWeights`), and x A is summed exactly in
  integers by the C kernel of `raise_eval.models.native` (amx_products.c), then rounded once: the only error beyond
  that rounding is the weights' quantization, at most half a float32 ulp of the column's mean nonzero |A_ij| per
  weight (weights whose largest is too far above their mean are not offered the route).

The first three accumulate in the layer's dtype, the fourth in integers, so they agree up to rounding (a few units
in the last place of the sum of |terms|); each gives the same bits on every call for a given shape and thread count
(the amx route for any thread count), and a row's result does not depend on the other rows.

Which route a product takes is not decided here: `neighbour_product` asks the route chooser installed with
`install_route_chooser` (raise-eval's is `raise_eval.runtime.product_routes`, which times the routes per shape and
honours RAISE_EVAL_PRODUCT_ROUTE; installed when `raise_eval` is imported). With none installed, every product uses
torch.mm. `available_routes` says which routes can compute a product.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Callable, Optional

import torch
from raise_eval.models.boltzmann.product_tables import (  # noqa: F401 (the routes' structures, re-exported)
    INTEGER_BITS,
    INTEGER_DIGITS,
    TABLE_BLOCK_BYTES,
    TABLE_GROUP_SIZES,
    TABLE_MAX_BYTES,
    TABLE_ROW_BYTES,
    TABLE_SPARSE_CHECK_EVERY,
    TABLE_SPARSE_MIN_ZERO_SHARE,
    IntegerWeights,
    SubsetSumTable,
    _staging,
    table_group_size,
)
from torch import Tensor

ROUTES = ("mm", "onednn", "table", "amx")

# (rows, inner, cols, dtype, device, binary, grad, amx=True) -> a choice with a `.route`, or None for torch.mm.
RouteChooser = Callable[..., Optional[object]]


def _no_choice(*shape, amx: bool = True) -> None:
    return None


_chooser: RouteChooser = _no_choice
_lock = threading.Lock()


def install_route_chooser(chooser: Optional[RouteChooser]) -> RouteChooser:
    """Let `chooser(rows, inner, cols, dtype, device, binary, grad, amx=True)` pick every product's route (its answer
    has a `route` among ROUTES, or is None for torch.mm); None: torch.mm for all. Returns the previous chooser."""
    global _chooser
    with _lock:
        previous, _chooser = _chooser, (chooser or _no_choice)
    return previous


def clear_held_weights() -> None:
    """Forget the tables and integer weights held for the table and amx routes."""
    with _lock:
        _cache.clear()


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


# --------------------------------------------------------------------------------------------- the table route
class _CachedEntry:
    def __init__(self, weights: Sequence[Tensor], versions: tuple, value):
        self.refs = [weakref.ref(w) for w in weights]
        self.versions = versions
        self.value = value


_cache: dict[tuple, _CachedEntry] = {}
_MAX_CACHED = 8


def _versions(weights: Sequence[Tensor]) -> Optional[tuple]:
    try:
        return tuple(w._version for w in weights)
    except RuntimeError:  # inference tensors keep no version counter: a table could not notice a change
        return None


def _cached(kind: str, terms: Sequence[tuple[Tensor, bool]], build):
    """build([A_t]) for the weights of `terms`, made once per set of weight tensors and made again when one of them
    changes in place; None when the weights cannot be tracked."""
    weights = [w for w, _ in terms]
    versions = _versions(weights)
    if versions is None:
        return None
    key = (kind,) + tuple((id(w), transposed) for w, transposed in terms)
    with _lock:
        entry = _cache.get(key)
        if entry is not None and all(r() is w for r, w in zip(entry.refs, weights)) and entry.versions == versions:
            return entry.value
    value = build([w.t() if transposed else w for w, transposed in terms])
    with _lock:
        while len(_cache) >= _MAX_CACHED:
            _cache.pop(next(iter(_cache)))
        _cache[key] = _CachedEntry(weights, versions, value)
    return value


def cached_table(terms: Sequence[tuple[Tensor, bool]]) -> Optional[SubsetSumTable]:
    """The table of sum_t x_t A_t with A_t = W_t (or W_t^T when transposed), built once per set of weight tensors
    and rebuilt when one of them changes in place; None when the weights cannot be tracked."""
    return _cached("table", terms, SubsetSumTable)


def cached_integer_weights(terms: Sequence[tuple[Tensor, bool]]) -> Optional[IntegerWeights]:
    """The integer weights (amx route) of sum_t x_t A_t, cached as `cached_table`'s tables are."""
    return _cached("amx", terms, IntegerWeights)


# how the table and amx routes hold a product's weights
_HELD = {"table": cached_table, "amx": cached_integer_weights}


def amx_available() -> bool:
    from raise_eval.models import native

    return native.amx_library() is not None


# --------------------------------------------------------------------------------------------- the routes
def run_route(
    route: str,
    terms: Sequence[tuple[Tensor, Tensor, bool]],
    out: Optional[Tensor],
    bias: Optional[Tensor],
    alpha: float,
    table=None,
) -> Tensor:
    """bias + alpha sum_t x_t A_t (the bare sum when bias is None), shaped (rows, cols), into `out` when given.

    terms: (x_t shaped (rows, n_t), W_t, transposed): A_t is W_t, or W_t^T when transposed.
    table: the weights as the table or amx route holds them (`SubsetSumTable`, `IntegerWeights`), when at hand.
    """
    if route in ("table", "amx"):
        if table is None:
            table = _HELD[route]([(w, transposed) for _, w, transposed in terms])
        return table([x for x, _, _ in terms], out, bias, alpha)
    mats = [(x, w.t() if transposed else w) for x, w, transposed in terms]
    if route == "onednn":
        # x A is linear(x, A^T); a second neighbour's product is added by the op's binary post-op.
        acc = None
        for x, a in mats:
            if acc is None:
                acc = torch.ops.mkldnn._linear_pointwise(x, a.t(), None, "none", [], "")
            else:
                acc = torch.ops.mkldnn._linear_pointwise.binary(x, acc, a.t(), None, "add")
        if bias is not None:
            return torch.add(bias, acc, alpha=alpha, **({} if out is None else {"out": out}))
        return acc if out is None else out.copy_(acc)
    for i, (x, a) in enumerate(mats):  # out=None, not a new tensor: products that need a gradient take this route
        if i > 0:
            out.addmm_(x, a, alpha=alpha)
        elif bias is None:
            out = torch.mm(x, a, out=out)
        else:
            out = torch.addmm(bias, x, a, alpha=alpha, out=out)
    return out


def available_routes(
    inner: Sequence[int], cols: int, dtype: torch.dtype, binary: bool, amx: bool = True
) -> list[str]:
    """The routes that can compute a CPU product of inputs of widths `inner` into `cols` columns (`amx`: False where
    the weights cannot be held as integers)."""
    routes = ["mm"]
    if dtype == torch.float32 and onednn_available():
        routes.append("onednn")
    if binary and dtype in (torch.float32, torch.float64):
        nbytes = SubsetSumTable.nbytes_for(inner, cols, torch.empty((), dtype=dtype).element_size())
        if nbytes is not None and nbytes <= TABLE_MAX_BYTES:
            routes.append("table")
    if amx and binary and dtype == torch.float32 and amx_available():
        routes.append("amx")
    return routes




def neighbour_product(
    terms: Sequence[tuple[Tensor, Tensor, bool]],
    out: Optional[Tensor],
    bias: Optional[Tensor] = None,
    alpha: float = 1.0,
    binary: bool = False,
) -> Tensor:
    """bias + alpha sum_t x_t A_t (or the bare sum when bias is None) through the route the installed chooser picks
    for its shape.

    Args:
        terms: (x_t shaped (rows, n_t), contiguous; W_t; transposed): A_t = W_t, or W_t^T when transposed,
            shaped (n_t, cols).
        out: contiguous (rows, cols) tensor to write into, or None.
        binary: every x_t holds only 0. and 1. (the table and amx routes need it).
    """
    x0, w0, t0 = terms[0]
    cols = w0.shape[0] if t0 else w0.shape[1]
    grad = torch.is_grad_enabled() and any(x.requires_grad or w.requires_grad for x, w, _ in terms)
    shape = (x0.shape[0], [x.shape[1] for x, _, _ in terms], cols, x0.dtype, x0.device, binary, grad)
    choice = _chooser(*shape)
    route = "mm" if choice is None else choice.route
    if route == "amx":
        held = cached_integer_weights([(w, t) for _, w, t in terms])
        if held is not None and held.eligible and all(x.is_contiguous() for x, _, _ in terms):
            return run_route(route, terms, out, bias, alpha, held)
        if held is not None and not held.eligible:  # chosen for the shape, but these weights are not for it
            choice = _chooser(*shape, amx=False)
            route = "mm" if choice is None else choice.route
        else:
            route = "mm"
    if route == "table":
        if not all(x.is_contiguous() for x, _, _ in terms):
            route = "mm"
        else:
            table = cached_table([(w, transposed) for _, w, transposed in terms])
            if table is not None:
                return run_route("table", terms, out, bias, alpha, table)
            route = "mm"
    return run_route(route, terms, out, bias, alpha)
