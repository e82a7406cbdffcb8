"""The machine a benchmark ran on, for its output: the CPU (model, family/model, vector extension) and its load.

Ratios of a step to its products differ between CPU models (docs/speed.md), so every benchmark script prints the
machine, the load average before and after, and the share of the CPUs other processes used while it timed."""

from __future__ import annotations

import os
import platform
import subprocess
import time


def cpu_description() -> str:
    """CPU model name, family/model/stepping and the widest x86 vector extension, from lscpu (or platform)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("Flags", "").split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return (
        f"{fields.get('Model name', '?')} (family {fields.get('CPU family', '?')}, model {fields.get('Model', '?')}, "
        f"stepping {fields.get('Stepping', '?')}; {isa}; {fields.get('CPU(s)', '?')} CPUs)"
    )


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages from /proc/loadavg ('?' where it is missing)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


class LoadMeter:
    """The share of all CPUs that other processes kept busy between start() and stop(), from /proc/stat's busy
    time less this process's own CPU time, and its finished children's where it runs its work in subprocesses
    (`children=True`: scripts/race_peers.py); None where /proc is missing."""

    def __init__(self, children: bool = False):
        self.children = children

    def start(self) -> None:
        self._t0, self._busy0, self._own0 = time.perf_counter(), self._busy(), self._own()

    def stop(self) -> float | None:
        busy, own, wall = self._busy(), self._own(), time.perf_counter() - self._t0
        # /proc/stat counts in clock ticks (10 ms): under a second the share is mostly rounding (a review saw 762%)
        if busy is None or self._busy0 is None or wall < 1.0:
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        others = (busy - self._busy0) / ticks - (own - self._own0)
        return min(1.0, max(0.0, others / (wall * (os.cpu_count() or 1))))

    @staticmethod
    def _busy() -> int | None:
        try:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
        except OSError:
            return None
        # all but idle and iowait, and guest time once (the kernel counts it in user time too); steal time counts
        # as busy: the hypervisor gave the CPU to someone else
        return sum(values[:8]) - values[3] - values[4]

    def _own(self) -> float:
        t = os.times()
        own = t.user + t.system
        return own + t.children_user + t.children_system if self.children else own
