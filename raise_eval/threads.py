"""How many threads to give torch on a shared machine.

torch's CPU kernels use one OpenMP thread per core and spin while waiting for each other. When another process
keeps a core busy, a thread that loses its core stalls every parallel region, and a job can run 20 to 40 times
slower than on an idle machine (seen here: 3.8 s became 72 to 172 s with one `yes > /dev/null` beside it). Using
only the cores that are idle avoids that. The measurement reads /proc/stat twice, a tenth of a second apart
(Linux); elsewhere it falls back on the load average.

The thread count does not enter the random streams, and the results for the shapes tried here were bit-identical
with 1 and 2 threads; it is recorded in the JSON settings all the same, since a BLAS may split a reduction
differently with another count.
"""

from __future__ import annotations

import os
import time


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
    idle = (os.cpu_count() or 1) - round(busy_cores())
    return max(1, min(available, idle))
