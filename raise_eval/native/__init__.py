"""Native (C) kernels for the inner loops that eager PyTorch runs op by op, compiled on first use.

The only one so far is the DBN posterior sweep (`dbn_sweep.c`, used by `raise_eval.paths.posterior`): a unit-wise
Gibbs sweep whose work per unit is a few hundred multiply-adds per chain, too small for a tensor op to pay for its
dispatch. The C source ships with the package and is compiled once per process with the system's C compiler
(`$CC`, else `cc`) into a temporary folder that is removed at exit; nothing is written anywhere else. Where no
compiler works, or `RAISE_EVAL_NATIVE=0` is set, `library()` returns None with the reason in `unavailable_reason()`,
and callers take their PyTorch route: the same distribution, slower.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional

NATIVE_ENV = "RAISE_EVAL_NATIVE"
_SOURCE = Path(__file__).with_name("dbn_sweep.c")
_lock = threading.Lock()
_state: dict = {}


def requested() -> bool:
    """False where RAISE_EVAL_NATIVE is 0, off or false (any case): the PyTorch routes are taken."""
    value = os.environ.get(NATIVE_ENV, "").strip().lower()
    if value in ("", "1", "on", "true", "auto"):
        return True
    if value in ("0", "off", "false"):
        return False
    raise ValueError(f"{NATIVE_ENV}={value!r} is not understood: set it to 0 (PyTorch routes only) or 1 (the default)")


def _compile(directory: str) -> tuple[Optional[ctypes.CDLL], Optional[str]]:
    compiler = os.environ.get("CC") or "cc"
    try:
        program = shlex.split(compiler)  # CC may carry a wrapper or flags ("ccache gcc")
    except ValueError as e:
        return None, f"CC={compiler!r} cannot be parsed: {e}"
    if not program:
        return None, f"CC={compiler!r} names no compiler"
    out = os.path.join(directory, "dbn_sweep.so")
    flags = ["-O3", "-ffp-contract=off", "-fPIC", "-shared", str(_SOURCE), "-o", out, "-lm"]
    why = "no output"
    # -march=native first (the vector units of this CPU); some compilers or CPUs refuse it
    for command in (program + ["-march=native"] + flags, program + flags):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            why = str(e)
            continue
        if done.returncode == 0:
            try:
                return ctypes.CDLL(out), None
            except OSError as e:
                why = f"loading the compiled kernel failed: {e}"
                continue
        lines = (done.stderr + done.stdout).strip().splitlines()
        why = lines[-1] if lines else f"exit status {done.returncode}, no output"
    return None, f"the C compiler ({compiler}) failed: {why}"


def library() -> Optional[ctypes.CDLL]:
    """The compiled kernels (ctypes), compiled at the first call of the process; None where unavailable."""
    if not requested():
        return None
    with _lock:
        if "lib" not in _state:
            directory = tempfile.mkdtemp(prefix="raise_eval_native_")
            atexit.register(shutil.rmtree, directory, True)
            lib, why = _compile(directory)
            if lib is not None:
                for name in ("dbn_sweep_float32", "dbn_sweep_float64"):
                    fn = getattr(lib, name)
                    fn.restype = None
                    fn.argtypes = [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 6 + [ctypes.c_double] + [
                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_double,
                    ] + [ctypes.c_void_p] * 3  # fmt: skip
            _state["lib"], _state["why"] = lib, why
        return _state["lib"]


def unavailable_reason() -> Optional[str]:
    """Why `library()` is None (None where it is available or not asked for yet)."""
    if not requested():
        return f"{NATIVE_ENV}=0"
    return _state.get("why")


_pools: dict = {}


def thread_pool(workers: int):
    """A thread pool of `workers` threads kept for the process (the kernels release the GIL while they run)."""
    from concurrent.futures import ThreadPoolExecutor

    with _lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="raise_eval_native")
        return pool
