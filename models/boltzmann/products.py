"""The routes of a layer's input from its neighbours on the CPU, and the choice between them by timing.

A sampling step of a Boltzmann machine spends most of its time in the products x_{l-1} W_{l-1} + x_{l+1} W_l^T
(`LayeredBoltzmannMachine.unscaled_input`, `layer_logits`). They can be computed three ways:

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
  integers by the C kernel of `raise_eval.native` (amx_products.c), then rounded once: the only error beyond that
  rounding is the weights' quantization, at most half a float32 ulp of the column's mean nonzero |A_ij| per weight
  (weights whose largest is too far above their mean are not offered the route).

The first three accumulate in the layer's dtype, the fourth in integers, so they agree up to rounding (a few units
in the last place of the sum of |terms|); each gives the same bits on every call for a given shape and thread count
(the amx route for any thread count), and a row's result does not depend on the other rows. Which is fastest
depends on the CPU (its vector instructions), the thread count and the machine's load: so the first product of each
shape (rows, inner widths, columns, dtype, threads, binary or not) in a process times every route that can compute
it on random data of that shape (a few milliseconds) and keeps the fastest for the rest of the process.
`route_choices()` returns these choices with their timings, for reports.

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
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

ROUTES = ("mm", "onednn", "table", "amx")
ROUTE_ENV = "RAISE_EVAL_PRODUCT_ROUTE"

# Products with fewer multiply-adds (rows x inner x columns) than this use torch.mm untimed: its call overhead is the
# lowest, and timing would cost more than it could save. None: every product uses torch.mm (unless forced).
MIN_TIMED_MACS: Optional[int] = 1 << 20
# Rows of random data the routes are timed on (fewer when the product has fewer): the routes' costs per row are
# flat from here on, and three rounds of every route then take a few milliseconds.
TIMING_ROWS = 1024
TIMING_ROUNDS = 2
# The table route's column blocks hold 256 bytes of each table row (64 float32 columns), and its group size k is the
# largest in TABLE_GROUP_SIZES that divides the inputs' width and keeps a block of the table within TABLE_BLOCK_BYTES
# (about a core's L2 cache: the lookups of a block then hit the cache); the smallest that divides it otherwise.
TABLE_GROUP_SIZES = (6, 5, 4, 3)
TABLE_ROW_BYTES = 256
TABLE_BLOCK_BYTES = 1 << 20
# The table route is not offered when its tables would exceed this many bytes (per product).
TABLE_MAX_BYTES = 256 << 20
# A group whose units are all 0 adds the table's zero row: when at least this share of the groups are (sparse
# states, e.g. MNIST pixels late in an annealing run), the table route leaves them out of the lookups (the sums are
# the same bits: adding +0. changes nothing), which saves more than the compaction costs; the share is measured on
# every TABLE_SPARSE_CHECK_EVERY-th product of a table (states change slowly along a run).
TABLE_SPARSE_MIN_ZERO_SHARE = 0.35
TABLE_SPARSE_CHECK_EVERY = 16
_FLOAT32_TWO_TO_23_BITS = 0x4B000000  # the bits of 2.0**23 in float32


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
        _cache.clear()


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


# --------------------------------------------------------------------------------------------- the table route
def table_group_size(width: int, element_size: int = 4) -> Optional[int]:
    """The group size k the table route uses for inputs of this width (None: no k in TABLE_GROUP_SIZES divides it)."""
    dividing = [k for k in TABLE_GROUP_SIZES if width % k == 0]
    for k in sorted(dividing, reverse=True):
        if (width // k) * (1 << k) * TABLE_ROW_BYTES <= TABLE_BLOCK_BYTES:
            return k
    return min(dividing) if dividing else None


class SubsetSumTable:
    """The table route for one sum of products x_1 A_1 + x_2 A_2 + ... (each A_t shaped (n_t, cols)).

    For term t with group size k_t (dividing n_t), rows offset_t + g 2^k_t + c of the table hold
    sum_{i < k_t, bit i of c set} A_t[g k_t + i], summed in float64 and rounded once to the weights' dtype; the
    columns are stored in contiguous blocks of TABLE_COLUMN_BLOCK.
    """

    def __init__(self, matrices: Sequence[Tensor]):
        self.dtype = matrices[0].dtype
        self.cols = matrices[0].shape[1]
        element_size = matrices[0].element_size()
        self.group_sizes, self.offsets, pieces = [], [], []
        offset = 0
        for a in matrices:
            n = a.shape[0]
            k = table_group_size(n, element_size)
            if k is None:
                raise ValueError(f"no group size in {TABLE_GROUP_SIZES} divides {n}")
            codes = torch.arange(1 << k)
            bits = ((codes.unsqueeze(1) >> torch.arange(k)) & 1).to(torch.float64)  # (2^k, k)
            sums = torch.einsum("ck,gkn->gcn", bits, a.detach().to(torch.float64).reshape(n // k, k, self.cols))
            pieces.append(sums.reshape(-1, self.cols).to(self.dtype))
            self.group_sizes.append(k)
            self.offsets.append(offset)
            offset += (n // k) << k
        if offset >= 1 << 24:
            raise ValueError("the table has too many rows for exact float codes")
        table = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
        block = max(1, TABLE_ROW_BYTES // element_size)
        self.blocks = [table[:, j : j + block].contiguous() for j in range(0, self.cols, block)]
        # float32 codes are computed as 2^23 + code, whose bits are 0x4B000000 + code (the exponent of 2^23 and the
        # code in the mantissa): an integer subtraction on those bits gives the int32 codes, where a conversion from
        # float takes 3 to 4 times as long (0.34 ms for 1,000 x 196 codes); exact while 2^23 + the largest code
        # stays below 2^24.
        self._magic = self.dtype == torch.float32 and offset < 1 << 23
        self.nbytes = table.numel() * table.element_size()
        self.groups = sum(a.shape[0] // k for a, k in zip(matrices, self.group_sizes))
        self._bases: dict[tuple[int, int], Tensor] = {}  # (term, rows) -> offset + g 2^k, repeated over rows
        self._bag_starts: dict[int, Tensor] = {}  # rows -> where each row's codes start (embedding_bag's offsets)
        self._weights = [torch.tensor([float(1 << i) for i in range(k)], dtype=self.dtype) for k in self.group_sizes]
        # The code of each group's zero row (offset + g 2^k), and whether to leave such codes out (see
        # TABLE_SPARSE_MIN_ZERO_SHARE); shared by threads that use this table, which only affects speed.
        self._zero_codes = torch.cat(
            [
                off + torch.arange(a.shape[0] // k) * (1 << k)
                for a, k, off in zip(matrices, self.group_sizes, self.offsets)
            ]
        ).to(torch.int32)
        self._products = 0
        self._compact = False

    @staticmethod
    def nbytes_for(inner: Sequence[int], cols: int, element_size: int) -> Optional[int]:
        total = 0
        for n in inner:
            k = table_group_size(n, element_size)
            if k is None:
                return None
            total += (n // k) * (1 << k) * cols * element_size
        return total

    def _codes(self, xs: Sequence[Tensor]) -> Tensor:
        """The table rows each input row adds up, shaped (rows, groups), int32."""
        rows = xs[0].shape[0]
        parts = []
        for t, x in enumerate(xs):
            k = self.group_sizes[t]
            base = self._bases.get((t, rows))
            if base is None:
                groups = x.shape[1] // k
                base = (self.offsets[t] + (torch.arange(groups, dtype=torch.float64) * (1 << k))).repeat(rows)
                if self._magic:
                    base += float(1 << 23)
                base = self._bases[(t, rows)] = base.to(self.dtype)
            # x's units are 0. or 1.: base + sum_i 2^i x_{g k + i} is an exact small integer.
            parts.append(torch.addmv(base, x.view(-1, k), self._weights[t]).view(rows, -1))
        codes = parts[0] if len(parts) == 1 else torch.cat(parts, 1)
        if self._magic:
            return codes.view(torch.int32).sub_(_FLOAT32_TWO_TO_23_BITS)
        return codes.to(torch.int32)

    def _lookups(self, codes: Tensor) -> tuple[Tensor, Tensor]:
        """The table rows to add, flattened, and where each input row's start (embedding_bag's indices and offsets),
        from codes shaped (rows, groups): all of them, or, while the inputs are sparse, all but the zero rows."""
        rows = codes.shape[0]
        check = self._products % TABLE_SPARSE_CHECK_EVERY == 0
        self._products += 1
        keep = codes != self._zero_codes if check or self._compact else None
        if check:
            self._compact = int(torch.count_nonzero(keep)) <= (1.0 - TABLE_SPARSE_MIN_ZERO_SHARE) * codes.numel()
        if self._compact:
            starts = torch.zeros(rows, dtype=torch.int32)
            torch.cumsum(keep[:-1].sum(1, dtype=torch.int32), 0, out=starts[1:])
            return codes[keep], starts
        starts = self._bag_starts.get(rows)
        if starts is None:
            starts = self._bag_starts[rows] = torch.arange(0, rows * self.groups, self.groups, dtype=torch.int32)
        return codes.view(-1), starts

    def __call__(self, xs: Sequence[Tensor], out: Optional[Tensor], bias: Optional[Tensor], alpha: float) -> Tensor:
        """sum_t xs[t] A_t (times alpha, plus bias, when bias is given), shaped (rows, cols), written into `out`."""
        rows = xs[0].shape[0]
        codes, starts = self._lookups(self._codes(xs))
        # torch.embedding_bag (mode 0: sum) rather than F.embedding_bag: a third less call overhead, and a block
        # costs a few tens of microseconds.
        sums = [torch.embedding_bag(block, codes, starts, False, 0, False, None, False)[0] for block in self.blocks]
        if out is None:
            out = torch.empty(rows, self.cols, dtype=self.dtype)
        torch.cat(sums, 1, out=out)
        if bias is not None:
            torch.add(bias, out, alpha=alpha, out=out)
        return out


# --------------------------------------------------------------------------------------------- the amx route
# Weights held as integers: this many bits below a column's largest |A_ij| (a power of two at or above it).
INTEGER_BITS = 30
INTEGER_DIGITS = 4  # balanced base-256 digits of each integer (amx_products.c)


class IntegerWeights:
    """The amx route for one sum of products x_1 A_1 + x_2 A_2 + ... of binary x (each A_t shaped (n_t, cols)).

    The terms' inputs are stacked, A = [A_1; A_2; ...] (K rows), and column j is held as q_ij = round(A_ij / s_j),
    s_j the power of two with max_i |A_ij| / s_j in (2^29, 2^30], in four int8 digits laid out for the AMX tiles
    (see amx_products.c). The kernel sums x q exactly and rounds bias + alpha s_j (x q) once to float32, so the
    result differs from the exact x A by that rounding and by the sum of the quantization errors of the weights where
    x is 1, each at most s_j / 2. `eligible` is False where that could exceed half a float32 ulp of the column's
    mean nonzero |A_ij| (s_j > 2^-23 times that mean: a column whose largest weight is 64 to 128 times its mean), or
    where the weights are not finite, or K >= 2^22 (the int64 sums would not fit a double): the route is then not
    offered, and torch.mm computes these products.
    """

    def __init__(self, matrices: Sequence[Tensor]):
        import ctypes

        a = torch.cat([m.detach().to(device="cpu", dtype=torch.float64) for m in matrices])
        self._widths = (ctypes.c_int64 * len(matrices))(*[m.shape[0] for m in matrices])  # the kernel's argument
        k, self.cols = a.shape
        self.kpad = -(-k // 64) * 64
        self.nblocks = -(-self.cols // 16)
        magnitude = a.abs()
        largest = magnitude.amax(0)
        nonzero = (magnitude > 0).sum(0)
        mean = magnitude.sum(0) / nonzero.clamp_min(1)
        exponent = torch.where(largest > 0, torch.ceil(torch.log2(largest)) - INTEGER_BITS, torch.zeros_like(largest))
        exponent += (largest / torch.exp2(exponent) > 2.0**INTEGER_BITS).to(torch.float64)  # log2's rounding
        scale = torch.exp2(exponent)
        self.eligible = bool(
            torch.isfinite(a).all() and k < (1 << 22) and bool((scale <= 2.0**-23 * mean)[largest > 0].all())
        )
        if not self.eligible:
            return
        q = torch.zeros(self.kpad, self.nblocks * 16, dtype=torch.int64)
        q[:k, : self.cols] = torch.round(a / scale).to(torch.int64)
        digits = []
        for _ in range(INTEGER_DIGITS):  # least significant first
            d = (q + 128).remainder(256) - 128
            digits.append(d)
            q = (q - d) // 256
        d = torch.stack(digits[::-1]).to(torch.int8)  # (digits, kpad, cols), most significant first
        # (column block, digit, kpad / 4, 16 columns, 4 inputs): TDPBUSD's B tiles, one panel per block and digit
        self.packed = d.view(INTEGER_DIGITS, self.kpad // 4, 4, self.nblocks, 16).permute(3, 0, 1, 4, 2).contiguous()
        self.scales = torch.zeros(self.nblocks * 16, dtype=torch.float64)
        self.scales[: self.cols] = scale

    def __call__(self, xs: Sequence[Tensor], out: Optional[Tensor], bias: Optional[Tensor], alpha: float) -> Tensor:
        """sum_t xs[t] A_t (times alpha, plus bias, when bias is given), shaped (rows, cols), written into `out`;
        xs float32, contiguous, 0. and 1. only."""
        import ctypes

        from raise_eval import native

        lib = native.amx_library()
        rows = xs[0].shape[0]
        if out is None:
            out = torch.empty(rows, self.cols, dtype=torch.float32)
        bias_f = None if bias is None else bias.detach().to(torch.float32).contiguous()
        pointers = (ctypes.c_void_p * len(xs))(*[x.data_ptr() for x in xs])
        weights = (self._widths, self.packed.data_ptr(), self.kpad, self.nblocks, self.scales.data_ptr())
        head = (len(xs), pointers, *weights)
        tail = (self.cols, None if bias_f is None else bias_f.data_ptr(), float(alpha), out.data_ptr())

        bounds = native.split_rows(rows, torch.get_num_threads(), 32)
        stages = [_staging(part, -(-(end - begin) // 32) * 32 * self.kpad) for part, (begin, end) in
                  enumerate(zip(bounds[:-1], bounds[1:]))]  # fmt: skip

        def run(begin: int, end: int, stage: Tensor) -> None:
            lib.amx_binary_product(*head, *tail, begin, end, stage.data_ptr())

        native.run_in_parts(run, bounds, stages)
        return out


_local = threading.local()


def _staging(part: int, nbytes: int) -> Tensor:
    """A 64-byte aligned uint8 buffer of at least `nbytes` for the amx kernel's staged inputs of one part of the rows,
    kept per calling thread and part (fresh pages each call would fault: about a tenth of a product's time)."""
    buffers = _local.__dict__.setdefault("staging", {})
    buf = buffers.get(part)
    if buf is None or buf.numel() < nbytes + 64:
        buf = buffers[part] = torch.empty(nbytes + 64, dtype=torch.uint8)
    offset = (-buf.data_ptr()) % 64
    return buf[offset : offset + nbytes]


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
    from raise_eval import native

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


def _candidates(inner: Sequence[int], cols: int, dtype: torch.dtype, binary: bool, amx: bool = True) -> list[str]:
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


def neighbour_product(
    terms: Sequence[tuple[Tensor, Tensor, bool]],
    out: Optional[Tensor],
    bias: Optional[Tensor] = None,
    alpha: float = 1.0,
    binary: bool = False,
) -> Tensor:
    """bias + alpha sum_t x_t A_t (or the bare sum when bias is None) through the route chosen for its shape.

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
    choice = choose_route(*shape)
    route = "mm" if choice is None else choice.route
    if route == "amx":
        held = cached_integer_weights([(w, t) for _, w, t in terms])
        if held is not None and held.eligible and all(x.is_contiguous() for x, _, _ in terms):
            return run_route(route, terms, out, bias, alpha, held)
        if held is not None and not held.eligible:  # chosen for the shape, but these weights are not for it
            choice = choose_route(*shape, amx=False)
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
