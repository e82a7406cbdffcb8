"""How many threads to give torch on a shared machine.

torch's CPU kernels use one OpenMP thread per core and spin while waiting for each other. When another process
keeps a core busy, a thread that loses its core stalls every parallel region, and a job can run 20 to 40 times
slower than on an idle machine (seen here: 3.8 s became 72 to 172 s with one `yes > /dev/null` beside it). Using
only the cores that are idle avoids that. The measurement reads /proc/stat twice, a tenth of a second apart
(Linux); elsewhere it falls back on the load average.

The thread count does not enter the random streams, and the results for the shapes tried here were bit-identical
with 1 and 2 threads; it is recorded in the JSON settings all the same, since a BLAS may split a reduction
differently with another count.

The command line sets the count once per run (--threads, default auto); the Python API's entry points
(`raise_eval.evaluate`, `raise_eval.certify`, `raise_eval.bdmc_report.evaluate_bdmc`) take `threads` ('auto' by
default, a count, or None to leave torch's setting alone) and apply it for the call only (`with_threads`), putting
the caller's count back on return.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import time
from collections.abc import Iterator
from typing import Optional, Union

import torch

from raise_eval.settings import Setting, normalize

Threads = Optional[Union[int, str]]  # 'auto', a count, or None (torch's setting unchanged)


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields), idle


def busy_cores(interval: float = 0.1) -> float:
    """Cores kept busy by other processes right now (0 on an idle machine)."""
    try:
        total0, idle0 = _cpu_times()
        time.sleep(interval)
        total1, idle1 = _cpu_times()
        elapsed = total1 - total0
        return 0.0 if elapsed <= 0 else (os.cpu_count() or 1) * (1 - (idle1 - idle0) / elapsed)
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except OSError:
            return 0.0


def default_threads(available: int) -> int:
    """Threads for torch: the idle cores, at least 1 and at most `available` (torch's own default)."""
    if available <= 1:
        return 1  # nothing to choose: no measurement (it takes a tenth of a second)
    idle = (os.cpu_count() or 1) - round(busy_cores())
    return max(1, min(available, idle))


THREADS = Setting("threads", "auto", "", none="torch's setting", name="threads")


def resolve_threads(threads: Threads, current: int) -> int:
    """The thread count `threads` asks for when torch now uses `current`: 'auto' gives `default_threads(current)`
    (never more than the caller's setting), None keeps `current`, a positive int is taken as it is. ValueError for
    anything else."""
    if threads is None:
        return current
    if threads == "auto":
        return default_threads(current)
    return normalize(THREADS, threads)


@contextlib.contextmanager
def using_threads(threads: Threads = "auto") -> Iterator[int]:
    """Run the block with torch's thread count chosen by `threads` (see `resolve_threads`); the previous count is
    put back afterwards, also after an exception or Ctrl-C. Yields the count in use."""
    previous = torch.get_num_threads()
    count = resolve_threads(threads, previous)
    if count != previous:
        torch.set_num_threads(count)
    try:
        yield count
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def with_threads(function):
    """Decorator of an API entry point with a `threads` parameter: the call runs `using_threads(threads)`."""
    signature = inspect.signature(function)
    default = signature.parameters["threads"].default

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        threads = signature.bind(*args, **kwargs).arguments.get("threads", default)
        with using_threads(threads):
            return function(*args, **kwargs)

    return wrapper
