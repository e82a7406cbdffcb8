"""Native (C) kernels for the inner loops that eager PyTorch runs op by op, compiled on first use.

Three kernels so far, each its own shared library, so that one that does not compile here leaves the others usable:

- "dbn_sweep" (`dbn_sweep.c`, used by `raise_eval.paths.posterior`): a unit-wise Gibbs sweep whose work per unit is
  a few hundred multiply-adds per chain, too small for a tensor op to pay for its dispatch;
- "step" (`step.c`, used by `raise_eval.models.sampling` and `LayeredBoltzmannMachine.log_ratio_to`): the
  elementwise passes of an annealing step (Bernoulli samples from random bytes, the weight update's log1p terms),
  each in one pass where eager PyTorch makes several;
- "amx_products" (`amx_products.c`, used by `raise_eval.models.boltzmann.products`): the product of 0./1. inputs
  with weights held as integer digits, on the AMX tiles of Intel CPUs that have them (`amx_unavailable_reason`).

The C sources ship with the package and are compiled once per process with the system's C compiler (`$CC`, else
`cc`) into a temporary folder that is removed at exit; nothing is written anywhere else. Where no compiler works,
or `RAISE_EVAL_NATIVE=0` is set, `library()` returns None with the reason in `unavailable_reason()`, and callers
take their PyTorch route: the same distribution, slower.
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
_HERE = Path(__file__).parent
_lock = threading.Lock()
_state: dict = {}  # kernel name -> (library or None, why not); emptied by tests to compile again

_c_int64, _c_void_p, _c_double = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double


def _declare_dbn_sweep(lib: ctypes.CDLL) -> None:
    for name in ("dbn_sweep_float32", "dbn_sweep_float64"):
        fn = getattr(lib, name)
        fn.restype = None
        fn.argtypes = [_c_int64] * 4 + [_c_void_p] * 6 + [_c_double] + [
            _c_void_p, _c_void_p, _c_int64, _c_int64, _c_double,
        ] + [_c_void_p] * 3  # fmt: skip


def _declare_amx_products(lib: ctypes.CDLL) -> None:
    lib.amx_int8_ready.restype = ctypes.c_int
    lib.amx_int8_ready.argtypes = []
    fn = lib.amx_binary_product
    fn.restype = None
    fn.argtypes = [_c_int64, _c_void_p, _c_void_p, _c_void_p, _c_int64, _c_int64, _c_void_p, _c_int64, _c_void_p]
    fn.argtypes += [_c_double, _c_void_p, _c_int64, _c_int64, _c_void_p]


def _declare_step(lib: ctypes.CDLL) -> None:
    for dtype in ("float32", "float64"):
        fn = getattr(lib, f"log1p_expm1_{dtype}")
        fn.restype = None
        fn.argtypes = [_c_int64] * 3 + [_c_void_p] * 3 + [_c_double, _c_int64, _c_void_p]
    lib.weight_update_float32.restype = None
    lib.weight_update_float32.argtypes = [_c_int64] * 3 + [_c_void_p, _c_void_p, _c_double, _c_void_p, _c_double]
    lib.weight_update_float32.argtypes += [_c_int64, _c_void_p, _c_void_p]
    lib.philox4x32_10.restype = None
    lib.philox4x32_10.argtypes = [_c_void_p] * 3
    for name in ("bernoulli_philox_float32", "bernoulli_philox_float64", "bernoulli_philox_logits_float32"):
        fn = getattr(lib, name)
        fn.restype = None
        fn.argtypes = [_c_int64, _c_void_p, _c_void_p, ctypes.c_uint32, ctypes.c_uint32, _c_int64]


# name -> (source, extra compiler flags, declaration of its functions)
_KERNELS = {
    "dbn_sweep": ("dbn_sweep.c", [], _declare_dbn_sweep),
    # vectorized clamps (no trapping math) and fused multiply-adds: the same bits on one machine, not across machines
    "step": ("step.c", ["-fno-trapping-math", "-ffp-contract=fast"], _declare_step),
    "amx_products": ("amx_products.c", ["-mamx-tile", "-mamx-int8"], _declare_amx_products),
}


def requested() -> bool:
    """False where RAISE_EVAL_NATIVE is 0, off or false (any case): the PyTorch routes are taken."""
    value = os.environ.get(NATIVE_ENV, "").strip().lower()
    if value in ("", "1", "on", "true", "auto"):
        return True
    if value in ("0", "off", "false"):
        return False
    raise ValueError(f"{NATIVE_ENV}={value!r} is not understood: set it to 0 (PyTorch routes only) or 1 (the default)")


def _compile(directory: str, name: str) -> tuple[Optional[ctypes.CDLL], Optional[str]]:
    source, extra, _ = _KERNELS[name]
    compiler = os.environ.get("CC") or "cc"
    try:
        program = shlex.split(compiler)  # CC may carry a wrapper or flags ("ccache gcc")
    except ValueError as e:
        return None, f"CC={compiler!r} cannot be parsed: {e}"
    if not program:
        return None, f"CC={compiler!r} names no compiler"
    out = os.path.join(directory, f"{name}.so")
    flags = ["-O3", "-ffp-contract=off", "-fPIC", "-shared", *extra, str(_HERE / source), "-o", out, "-lm"]
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


def library(name: str = "dbn_sweep") -> Optional[ctypes.CDLL]:
    """The compiled kernel `name` (ctypes), compiled at the first call of the process; None where unavailable."""
    if name not in _KERNELS:
        raise ValueError(f"no native kernel named {name!r}: expected one of {', '.join(_KERNELS)}")
    if not requested():
        return None
    with _lock:
        if name not in _state:
            directory = tempfile.mkdtemp(prefix="raise_eval_native_")
            atexit.register(shutil.rmtree, directory, True)
            lib, why = _compile(directory, name)
            if lib is not None:
                _KERNELS[name][2](lib)
            _state[name] = (lib, why)
        return _state[name][0]


def unavailable_reason(name: str = "dbn_sweep") -> Optional[str]:
    """Why `library(name)` is None (None where it is available or not asked for yet)."""
    if not requested():
        return f"{NATIVE_ENV}=0"
    return _state.get(name, (None, None))[1]


def amx_library() -> Optional[ctypes.CDLL]:
    """The "amx_products" kernel where this CPU and operating system let it run its AMX int8 tiles, else None
    (`amx_unavailable_reason` says why). Asking the kernel for the tiles' state (Linux's ARCH_REQ_XCOMP_PERM) is
    done once per process."""
    lib = library("amx_products")
    if lib is None:
        return None
    with _lock:
        if "amx_ready" not in _state:
            _state["amx_ready"] = bool(lib.amx_int8_ready())
        return lib if _state["amx_ready"] else None


def amx_unavailable_reason() -> Optional[str]:
    """Why `amx_library()` is None (None where it is available or not asked for yet)."""
    why = unavailable_reason("amx_products")
    if why is not None:
        return why
    if _state.get("amx_ready") is False:
        return "this CPU has no AMX int8 tiles, or the operating system does not grant them"
    return None


def report() -> dict:
    """For a run's report: the C kernels of a CPU run's annealing step ("step": the draws and the weight update;
    "amx_products": the amx product route), each "in use" where it compiled (the amx one: and the CPU grants its
    tiles), else why not. Whether they run changes a run's random numbers, so it belongs with its settings."""
    step = "in use" if library("step") is not None else unavailable_reason("step")
    amx = "in use" if amx_library() is not None else amx_unavailable_reason()
    return {"step": step, "amx_products": amx}


_pools: dict = {}


def thread_pool(workers: int):
    """A thread pool of `workers` threads kept for the process (the kernels release the GIL while they run)."""
    from concurrent.futures import ThreadPoolExecutor

    with _lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="raise_eval_native")
        return pool


def split_rows(rows: int, parts: int, multiple: int = 1) -> list[int]:
    """Bounds [0, ..., rows] cutting `rows` into at most `parts` contiguous pieces whose starts are multiples of
    `multiple`."""
    blocks = -(-rows // multiple)
    parts = max(1, min(parts, blocks))
    return [min(rows, (blocks * k // parts) * multiple) for k in range(parts + 1)]


def run_in_parts(function, bounds: list[int], *per_part) -> list:
    """[function(begin, end, *those of the part) for each piece of `bounds`]: in this thread for one piece, else
    each piece on a thread of `thread_pool` (the kernels release the GIL). `per_part`: sequences with one item per
    piece."""
    if len(bounds) == 2:
        return [function(bounds[0], bounds[1], *(items[0] for items in per_part))]
    return list(thread_pool(len(bounds) - 1).map(function, bounds[:-1], bounds[1:], *per_part))
