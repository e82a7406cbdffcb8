"""Which route each product of a Boltzmann machine takes on the CPU (`raise_eval.models.boltzmann.products` holds
the routes: mm, onednn, table, amx), chosen by timing: the policy, installed into the model layer when `raise_eval`
is imported (its `__init__` calls `products.install_route_chooser(choose_route)`), so that models/ holds no
process-global choice, environment variable or timing of its own.

Which route is fastest depends on the CPU (its vector instructions), the thread count and the machine's load: so the
first product of each shape (rows, inner widths, columns, dtype, threads, binary or not) in a process times every
route that can compute it on random data of that shape (a few milliseconds) and keeps the fastest for the rest of the
process. `route_choices()` returns these choices with their timings, for reports.

`RAISE_EVAL_PRODUCT_ROUTE` (environment variable: auto, mm, onednn, table or amx) or `force_route` (in code) sends
every product that the route can compute there through it, without timing, whatever its size (for tests and for
reproducing a run bit for bit); a product that the forced route cannot compute (e.g. "table" for non-binary
inputs, "onednn" in float64) uses torch.mm. Float32 and float64 CPU products smaller than `MIN_TIMED_MACS`
multiply-adds, CUDA products and products that need a gradient use torch.mm without timing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

import torch

from raise_eval.models.boltzmann import products
from raise_eval.models.boltzmann.products import ROUTES, IntegerWeights, SubsetSumTable, amx_available, run_route
from raise_eval.models.boltzmann.products import available_routes as _candidates

ROUTE_ENV = "RAISE_EVAL_PRODUCT_ROUTE"

# Products with fewer multiply-adds (rows x inner x columns) than this use torch.mm untimed: its call overhead is the
# lowest, and timing would cost more than it could save. None: every product uses torch.mm (unless forced).
MIN_TIMED_MACS: Optional[int] = 1 << 20
# Rows of random data the routes are timed on (fewer when the product has fewer): the routes' costs per row are
# flat from here on, and three rounds of every route then take a few milliseconds.
TIMING_ROWS = 1024
TIMING_ROUNDS = 2


@dataclass(frozen=True)
class RouteChoice:
    """The route of one shape of product, and how it was chosen.

    Attributes:
        rows: rows of x (the batch, flattened).
        inner: the widths of the neighbouring layers (one or two products summed).
        cols: the width of the layer computed.
        dtype: e.g. "float32".
        threads: torch.get_num_threads() when it was chosen.
        binary: whether the inputs were known to be 0./1. (the table and amx routes need it).
        route: "mm", "onednn", "table" or "amx".
        how: "measured" (the fastest of `timings_ms`), "forced" (RAISE_EVAL_PRODUCT_ROUTE or `force_route`),
            "forced-unavailable" (the forced route cannot compute it: torch.mm), "only" (one route applies) or
            "adopted" (`adopt_route_choices`, e.g. from a checkpoint).
        timings_ms: (route, milliseconds per product of TIMING_ROWS rows, the best of TIMING_ROUNDS) for every
            route timed; empty unless measured.
        weights_for_amx: False for the choice made, for weights the amx route cannot hold (`IntegerWeights`),
            among the other routes: a shape can have both choices.
    """

    rows: int
    inner: tuple[int, ...]
    cols: int
    dtype: str
    threads: int
    binary: bool
    route: str
    how: str
    timings_ms: tuple[tuple[str, float], ...] = ()
    weights_for_amx: bool = True

    def as_dict(self) -> dict:
        """A JSON-ready dict (timings as {route: ms})."""
        return {
            "rows": self.rows,
            "inner": list(self.inner),
            "cols": self.cols,
            "dtype": self.dtype,
            "threads": self.threads,
            "binary": self.binary,
            "route": self.route,
            "how": self.how,
            "timings_ms": {name: round(ms, 4) for name, ms in self.timings_ms},
            "weights_for_amx": self.weights_for_amx,
        }


_lock = threading.Lock()
_choices: dict[tuple, RouteChoice] = {}
_forced: Optional[str] = None  # set by force_route; overrides the environment variable


def requested_route() -> Optional[str]:
    """The forced route (force_route, else the environment variable), or None for timing."""
    return _forced if _forced is not None else environment_route()


def environment_route() -> Optional[str]:
    """The route RAISE_EVAL_PRODUCT_ROUTE forces (None: unset or auto), whatever `force_route` says."""
    route = os.environ.get(ROUTE_ENV, "auto").strip().lower() or "auto"
    if route == "auto":
        return None
    if route not in ROUTES:
        raise ValueError(f"{ROUTE_ENV}={route!r}: expected auto, {', '.join(ROUTES)}")
    return route


def force_route(route: Optional[str]) -> Optional[str]:
    """Send every product through `route` ("mm", "onednn", "table", "amx"), or time them again ("auto" or None, the
    default: then RAISE_EVAL_PRODUCT_ROUTE decides). Returns the previous setting. Choices already made for other
    settings stay cached under their own setting."""
    global _forced
    if route is not None and route != "auto" and route not in ROUTES:
        raise ValueError(f"unknown product route {route!r}: expected auto, {', '.join(ROUTES)}")
    with _lock:
        previous, _forced = _forced, (None if route in (None, "auto") else route)
    return previous


@contextlib.contextmanager
def forced_route(route: Optional[str]) -> Iterator[None]:
    """`force_route` for the duration of a with-block."""
    previous = force_route(route)
    try:
        yield
    finally:
        force_route(previous)


def route_choices() -> tuple[RouteChoice, ...]:
    """The routes chosen so far in this process, in the order they were first needed."""
    with _lock:
        return tuple(_choices.values())


def adopt_route_choices(records) -> None:
    """Take routes chosen by another process (`RouteChoice`s or their `as_dict()`, e.g. saved with a checkpoint) for
    the same shapes and thread counts, without timing: a resumed run then computes its products as the interrupted
    one did and continues to its bits. Shapes not among them are timed as usual. A choice keeps the `how` it was
    made by, so that the continued run's report equals the uninterrupted run's (records without one read
    'adopted'). Records made under another forcing than this process's (`requested_route`) are left out: its own
    setting decides those products."""
    forced = requested_route()
    for record in records:
        r = record.as_dict() if isinstance(record, RouteChoice) else dict(record)
        if r["route"] not in ROUTES:
            raise ValueError(f"unknown product route {r['route']!r}")
        dtype = getattr(torch, r["dtype"])
        key = (int(r["rows"]), tuple(int(n) for n in r["inner"]), int(r["cols"]), dtype, int(r["threads"]))
        how = str(r.get("how") or "adopted")
        # Only the records this process would have made itself, keyed as choose_route keys them: a timed one where
        # no route is forced, a forced one where the same route is, and a "forced-unavailable" one (which does not
        # name the route) where the route forced now cannot compute that product either. The others are left to
        # this process's own choice (a run may be resumed under another forcing): adopted, they would compute
        # its products through routes it did not ask for, or stand unused in its report.
        if r["route"] == "amx" and not amx_available():  # chosen on a CPU with AMX tiles: this one has none
            adopt = False
        elif how == "forced":
            adopt = forced == r["route"]
        elif how == "forced-unavailable":
            amx = bool(r.get("weights_for_amx", True))
            adopt = forced is not None and forced not in _candidates(key[1], key[2], dtype, bool(r["binary"]), amx)
        else:
            adopt = forced is None
        if not adopt:
            continue
        weights_for_amx = bool(r.get("weights_for_amx", True))
        key += (bool(r["binary"]), forced) + (() if weights_for_amx else ("weights not for amx",))
        timings = tuple((name, float(ms)) for name, ms in dict(r.get("timings_ms", {})).items())
        choice = RouteChoice(
            rows=key[0],
            inner=key[1],
            cols=key[2],
            dtype=r["dtype"],
            threads=key[4],
            binary=key[5],
            route=r["route"],
            how=how,
            timings_ms=timings,
            weights_for_amx=weights_for_amx,
        )
        with _lock:
            _choices[key] = choice


def clear_route_choices() -> None:
    """Forget the choices (the next product of each shape is timed again) and the cached tables."""
    with _lock:
        _choices.clear()
    products.clear_held_weights()



def _time_routes(routes: Sequence[str], inner: Sequence[int], cols: int, dtype: torch.dtype, rows: int) -> dict:
    """Milliseconds per product for each route, on random binary inputs of TIMING_ROWS rows (at most `rows`), the
    best of TIMING_ROUNDS rounds in which the routes alternate (so that a change of the machine's load falls on
    all of them); each route runs once untimed first (oneDNN builds its kernel then)."""
    g = torch.Generator().manual_seed(0)
    rows = max(1, min(rows, TIMING_ROWS))
    xs = [(torch.rand(rows, n, generator=g) < 0.5).to(dtype) for n in inner]
    ws = [torch.randn(n, cols, generator=g, dtype=dtype).mul_(0.05) for n in inner]
    terms = [(x, w, False) for x, w in zip(xs, ws)]
    bias = torch.zeros(cols, dtype=dtype)
    out = torch.empty(rows, cols, dtype=dtype)
    held = {"table": SubsetSumTable(ws) if "table" in routes else None}
    held["amx"] = IntegerWeights(ws) if "amx" in routes else None
    best = {}
    for round_ in range(TIMING_ROUNDS + 1):
        for route in routes:
            start = time.perf_counter()
            run_route(route, terms, out, bias, 0.5, held.get(route))
            elapsed = 1e3 * (time.perf_counter() - start)
            if round_ > 0:
                best[route] = min(best.get(route, float("inf")), elapsed)
    return best


def choose_route(
    rows: int,
    inner: Sequence[int],
    cols: int,
    dtype: torch.dtype,
    device: torch.device,
    binary: bool,
    grad: bool,
    amx: bool = True,
) -> Optional[RouteChoice]:
    """The route of a product of this shape: None for torch.mm without a record (CUDA, gradients, small products
    that no route is forced on), else the cached or newly made choice. `amx`: False where the amx route cannot hold
    the weights (`IntegerWeights.eligible`): the choice is then made, and kept, among the other routes."""
    if device.type != "cpu" or grad or dtype not in (torch.float32, torch.float64):
        return None
    forced = requested_route()
    macs = rows * sum(inner) * cols
    if forced is None and (MIN_TIMED_MACS is None or macs < MIN_TIMED_MACS):
        return None
    threads = torch.get_num_threads()
    key = (rows, tuple(inner), cols, dtype, threads, binary, forced) + (() if amx else ("weights not for amx",))
    with _lock:
        choice = _choices.get(key)
    if choice is not None:
        return choice
    routes = _candidates(inner, cols, dtype, binary, amx)
    common = dict(
        rows=rows, inner=tuple(inner), cols=cols, dtype=str(dtype).replace("torch.", ""), threads=threads,
        weights_for_amx=amx,
    )  # fmt: skip
    if forced is not None:
        how = "forced" if forced in routes else "forced-unavailable"
        choice = RouteChoice(**common, binary=binary, route=forced if forced in routes else "mm", how=how)
    elif len(routes) == 1:
        choice = RouteChoice(**common, binary=binary, route="mm", how="only")
    else:
        timings = _time_routes(routes, inner, cols, dtype, rows)
        fastest = min(routes, key=lambda r: timings[r])
        choice = RouteChoice(**common, binary=binary, route=fastest, how="measured", timings_ms=tuple(timings.items()))
    with _lock:
        choice = _choices.setdefault(key, choice)
    return choice



