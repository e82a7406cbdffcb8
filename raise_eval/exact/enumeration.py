"""What every exact answer shares: enumeration of configurations in chunks within a memory bound, a running
log-sum-exp over the chunks, the progress bar, the limits, and the cost record (`ExactCost`). `binary` (binary
layers and DBNs) and `typed` (typed layers) build their routes from these."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch import Tensor
from tqdm.auto import tqdm

DEFAULT_MAX_UNITS = 25
# Float64 temporaries of one chunk of configurations (and of its table against the test vectors).
DEFAULT_MAX_BYTES = 256 * 2**20
# Below this many configurations per chunk the per-chunk overhead shows, so vectors are split into blocks instead.
MIN_CONFIG_CHUNK = 1024
BYTES = 8  # float64 (and the int64 codes of `binary_configurations`)
# The routes of exact log f(v) (`ExactCost.log_f_route`, the `route` keyword of `log_unnormalized_visible`).
def binary_configurations(
    n: int, start: int = 0, stop: int | None = None, *, dtype=torch.float64, device=None
) -> Tensor:
    """Rows are the binary codes of the integers start..stop-1 (bit j = column j), shaped (stop - start, n)."""
    stop = 2**n if stop is None else stop
    codes = torch.arange(start, stop, device=device, dtype=torch.int64)
    bits = torch.arange(n, device=device, dtype=torch.int64)
    return ((codes.unsqueeze(-1) >> bits) & 1).to(dtype)


def configuration_index(x: Tensor) -> Tensor:
    """Integer code sum_j x_j 2^j of binary vectors x shaped (*batch, n), as int64 shaped (*batch,)."""
    weights = 2 ** torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    return (x.round().to(torch.int64) * weights).sum(-1)


def check_units(units: int, max_units: int, what: str) -> None:
    if units > max_units:
        raise ValueError(
            f"exact {what} would enumerate 2^{units} configurations (limit 2^{max_units}); "
            "use AIS/RAISE, or raise max_units if you really want to wait"
        )


def softplus_(x: Tensor) -> Tensor:
    """softplus in place (F.softplus has no in-place form; this halves the chunk's temporaries)."""
    return torch.ops.aten.softplus.out(x, 1.0, 20.0, out=x)


# ----------------------------------------------------------------------------------------------- chunking
def plan_chunks(
    n_configs: int,
    n_rows: int,
    per_config: int,
    per_pair: int,
    per_row: int,
    max_bytes: int,
    chunk_size: Optional[int] = None,
) -> tuple[int, int]:
    """(configurations per chunk c, rows per block nb) with c * per_config + nb * c * per_pair + nb * per_row
    <= max_bytes whenever one configuration and one row fit at all (at least one of each is always used).

    All rows go in one block when a chunk of at least `MIN_CONFIG_CHUNK` configurations (or all of them) still
    fits beside them; otherwise rows are split into blocks, so the per-configuration work is done once per chunk
    however many vectors there are, and the chunk takes at most about half the budget (the rest is the blocks').
    `chunk_size` caps c.
    """
    cap = n_configs if chunk_size is None else max(1, min(n_configs, int(chunk_size)))
    c = (max_bytes - n_rows * per_row) // (per_config + n_rows * per_pair)
    if c >= min(cap, MIN_CONFIG_CHUNK):
        return int(min(c, cap)), n_rows
    c = max(1, min(cap, MIN_CONFIG_CHUNK, (max_bytes // 2) // (per_config + per_pair + per_row)))
    nb = max(1, min(n_rows, (max_bytes - c * per_config) // max(1, c * per_pair + per_row)))
    return int(c), int(nb)


class RunningLogSumExp:
    """log sum_k exp(x_rk) per row r over chunks of k: a running maximum and the sum of exp(x - maximum), so the
    rounding does not grow with |log f| as a logaddexp per chunk would."""

    def __init__(self, n: int, device):
        self.max = torch.full((n,), float("-inf"), dtype=torch.float64, device=device)
        self.sum = torch.zeros(n, dtype=torch.float64, device=device)

    def add_(self, begin: int, end: int, table: Tensor) -> None:
        """Fold in the columns of `table` (rows begin..end-1, shaped (end - begin, c)), overwriting it."""
        old = self.max[begin:end]
        new = torch.maximum(old, table.amax(1))
        shift = torch.where(torch.isfinite(new), new, torch.zeros_like(new))  # rows with only -inf so far
        scale = torch.exp(old - shift)
        self.sum[begin:end] = self.sum[begin:end] * scale + table.sub_(shift.unsqueeze(1)).exp_().sum(1)
        self.max[begin:end] = new

    def result(self) -> Tensor:
        """The log-sum-exp of everything folded in, shaped (n,)."""
        return self.max + self.sum.log()


def progress_bar(progress: bool, desc: str):
    return tqdm(total=0, desc=desc, disable=not progress, leave=False)


def grow_bar(bar, steps: int) -> None:
    # levels of a DBN are planned one after the other, so the bar learns its total as it goes
    bar.total += steps
    bar.refresh()


def chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(a, min(a + size, n)) for a in range(0, n, size)]


# A transcendental function (softplus, exp) costs about as much as this many multiply-adds in a product.
EXP_MACS = 10.0


@dataclasses.dataclass(frozen=True)
class ExactCost:
    """What exact log Z and log f(v) of `num_vectors` vectors would take, estimated without doing the work.

    log_z_units / log_f_units: units enumerated (2^units configurations) by the routes `log_partition` and
    `log_unnormalized_visible` choose; log_z_group: the parity group log Z enumerates ('even' or 'odd' layers,
    a DBN's top RBM's); log_f_route: 'even', 'odd', 'closed-form' (RBM) or 'dbn'. *_macs: multiply-adds;
    *_exps: elementwise transcendental evaluations (a softplus or the exp of a log-sum-exp counts one each).
    Time is about macs / (a measured float64 multiply-add rate) plus exps / (a measured exp rate).
    refusal: why no exact route exists (e.g. a continuous layer that can be neither enumerated nor integrated), or
    None; with a refusal the counts are zero and mean nothing: check `enumerable` before comparing units.
    """

    num_vectors: int
    log_z_units: int
    log_z_group: str
    log_z_macs: int
    log_z_exps: int
    log_f_route: str
    log_f_units: int
    log_f_macs: int
    log_f_exps: int
    refusal: Optional[str] = None

    @property
    def enumerable(self) -> bool:
        """Whether exact answers have a route at all (no `refusal`)."""
        return self.refusal is None

    @property
    def multiply_adds(self) -> int:
        """log_z_macs + log_f_macs: the multiply-adds of both exact answers."""
        return self.log_z_macs + self.log_f_macs

    @property
    def log_z_work(self) -> float:
        """Exact log Z in multiply-add equivalents (a transcendental evaluation counts EXP_MACS)."""
        return self.log_z_macs + EXP_MACS * self.log_z_exps

    @property
    def log_f_work(self) -> float:
        """Exact log f(v) of the vectors in multiply-add equivalents (a transcendental evaluation counts EXP_MACS)."""
        return self.log_f_macs + EXP_MACS * self.log_f_exps

    def to_dict(self) -> dict:
        """The fields and `multiply_adds`, as plain ints and strings."""
        out = {**dataclasses.asdict(self), "multiply_adds": self.multiply_adds}
        if self.refusal is None:
            del out["refusal"]  # the keys of 0.3's documents where there is a route
        return out


