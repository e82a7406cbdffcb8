"""The table and amx routes' data structures (`products`): subset-sum tables of weight rows for binary inputs
(`SubsetSumTable`) and weights held as integers for AMX tiles (`IntegerWeights`), with their sizes and buffers."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

_FLOAT32_TWO_TO_23_BITS = 0x4B000000  # the bits of 2.0**23 in float32
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

        from raise_eval.models import native

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


