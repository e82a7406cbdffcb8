"""Native (C) kernels for the inner loops that eager PyTorch runs op by op, compiled on first use and cached.

Four kernels so far, each its own shared library, so that one that does not compile here leaves the others usable:

- "dbn_sweep" (`dbn_sweep.c`, used by `raise_eval.paths.posterior`): a unit-wise Gibbs sweep whose work per unit is
  a few hundred multiply-adds per chain, too small for a tensor op to pay for its dispatch;
- "step" (`step.c`, used by `raise_eval.models.sampling` and `LayeredBoltzmannMachine.log_ratio_to`): the
  elementwise passes of an annealing step (Bernoulli samples from random bytes, the weight update's log1p terms),
  each in one pass where eager PyTorch makes several;
- "energy_leapfrog" (`energy_leapfrog.c`, used by `raise_eval.kernels.energy_leapfrog`): an HMC leapfrog step's
  elementwise work on an energy model (momentum and position updates with the base's gradient, the reflection at a
  box's walls, the acceptance test's sums) in one pass, and the acceptance test in one call;
- "amx_products" (`amx_products.c`, used by `raise_eval.models.boltzmann.products`): the product of 0./1. inputs
  with weights held as integer digits, on the AMX tiles of Intel CPUs that have them (`amx_unavailable_reason`).

The C sources ship with the package and are compiled with the system's C compiler (`$CC`, else `cc`) the first time
a process needs them, then kept in the user's cache folder (`cache_folder()`: `$RAISE_EVAL_CACHE_DIR`, else
`$XDG_CACHE_HOME/raise-eval`, else `~/.cache/raise-eval`; its `native` subfolder) under a name that is a hash of the
sources, the compiler's command, flags and `--version` answer, and the CPU: later processes load them without
compiling. A library is written to a temporary name in that folder and renamed once it compiled and loaded whole, so
that concurrent or killed processes never leave a half-written library under a name that gets loaded. Where the
folder cannot be written, a temporary folder removed at exit serves instead. A compile is stopped after
COMPILE_SECONDS (and the compiler is not asked again in this process); within `announcing_compiles(True)` a status
line on standard error (tqdm) says which kernel is being compiled. Where no compiler works, its library does not
export the kernel's functions, or `RAISE_EVAL_NATIVE=0` is set, `library()` returns None with the reason in
`unavailable_reason()`, and callers take their PyTorch route: the same distribution, slower.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

NATIVE_ENV = "RAISE_EVAL_NATIVE"
CACHE_ENV = "RAISE_EVAL_CACHE_DIR"
# A kernel compiles in 0.3 to 1 s on an idle machine (gcc 12, -O3); 30 s leaves room for a machine many times as
# busy, and bounds what a compiler that hangs can cost a run: it is stopped, and not asked again in the process.
COMPILE_SECONDS = 30.0
# `CC --version` (part of the cache key) answers in milliseconds; a compiler that does not is taken as hung.
VERSION_SECONDS = 10.0
# A partial library older than this was left by a process killed while compiling: removed by the next compile.
STALE_PARTIAL_SECONDS = 3600.0
_HERE = Path(__file__).parent
_lock = threading.Lock()
_state: dict = {}  # kernel name -> (library or None, why not), ("compiler", argv) -> its --version or why unusable;
# emptied by tests to compile again
_announce = False  # set by announcing_compiles

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


def _declare_energy_leapfrog(lib: ctypes.CDLL) -> None:
    for dtype in ("float32", "float64"):
        fn = getattr(lib, f"energy_leapfrog_{dtype}")
        fn.restype = None
        fn.argtypes = [_c_int64] * 3 + [_c_void_p] * 8 + [_c_int64, _c_void_p, _c_double, _c_double, _c_int64]
        fn.argtypes += [_c_double, _c_double] + [_c_void_p] * 6
    lib.select_rows.restype = None
    lib.select_rows.argtypes = [_c_int64, _c_int64] + [_c_void_p] * 4
    lib.hmc_finish.restype = None
    lib.hmc_finish.argtypes = [_c_int64, _c_int64, _c_double] + [_c_void_p] * 15


# name -> (source, extra compiler flags, declaration of its functions)
_KERNELS = {
    "dbn_sweep": ("dbn_sweep.c", [], _declare_dbn_sweep),
    # vectorized clamps (no trapping math) and fused multiply-adds: the same bits on one machine, not across machines
    "step": ("step.c", ["-fno-trapping-math", "-ffp-contract=fast"], _declare_step),
    # vectorized clamps and selections (no trapping math); no contractions: the PyTorch route's numbers exactly
    "energy_leapfrog": ("energy_leapfrog.c", ["-fno-trapping-math"], _declare_energy_leapfrog),
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


def cache_folder() -> Path:
    """Where compiled kernels are kept between runs: `$RAISE_EVAL_CACHE_DIR/native`, else
    `$XDG_CACHE_HOME/raise-eval/native` (an absolute XDG_CACHE_HOME), else `~/.cache/raise-eval/native`."""
    root = os.environ.get(CACHE_ENV, "").strip()
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "raise-eval")
    return Path(os.path.expanduser(root)) / "native"


@contextlib.contextmanager
def announcing_compiles(enabled: bool) -> Iterator[None]:
    """Within the block, a kernel compiled (not found in the cache) shows a tqdm status line on standard error
    while its compiler runs (the command line's progress setting turns it on)."""
    global _announce
    previous, _announce = _announce, bool(enabled)
    try:
        yield
    finally:
        _announce = previous


def _temporary_folder() -> Path:
    """A folder of this process, removed at exit: where the kernels go when the cache folder cannot be written."""
    if "temporary folder" not in _state:
        folder = tempfile.mkdtemp(prefix="raise_eval_native_")
        atexit.register(shutil.rmtree, folder, True)
        _state["temporary folder"] = Path(folder)
    return _state["temporary folder"]


def _status(description: str):
    """A tqdm status line on standard error (within `announcing_compiles(True)`; else a disabled one): close it."""
    from tqdm.auto import tqdm

    return tqdm(total=1, desc=description, bar_format="{desc}", leave=False, disable=not _announce)


def _run_compiler(command: list[str], timeout: float, slow: Optional[str] = None) -> tuple[int, str]:
    """(exit status, stdout and stderr) of `command`; subprocess.TimeoutExpired after `timeout` seconds. It runs in a
    session of its own so that a stop (timeout, Ctrl-C) reaches the whole group (a driver's cc1, as and ld, a
    wrapper script's children), SIGTERM first so that the compiler removes its temporary files. `slow`: a status
    line shown (`_status`) where it has not finished after a second."""
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        errors="replace", start_new_session=True,
    )  # fmt: skip
    status = None
    try:
        if slow is not None and timeout > 1.0:
            try:
                output, _ = process.communicate(timeout=1.0)
                return process.returncode, output
            except subprocess.TimeoutExpired:  # retrying communicate loses no output
                status, timeout = _status(slow), timeout - 1.0
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output
    except BaseException:
        for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            try:
                os.killpg(process.pid, sig)
            except OSError:  # the group is gone already
                break
            try:
                process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        process.kill()
        if process.stdout is not None:
            process.stdout.close()  # a child that left the group may still hold the pipe: do not wait for it
        process.wait()
        raise
    finally:
        if status is not None:
            status.close()


def _useful_line(output: str) -> Optional[str]:
    """The line of a compiler's output that says what went wrong: the first that names an error (other than the
    driver's summary "collect2: error: ld returned 1 exit status"), else the last ("compilation terminated." is
    the last line of a compile that ran out of disk; the line before says so)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    named = [line for line in lines if re.search(r"\b(error|fatal|cannot|no space)\b", line, re.IGNORECASE)]
    summary = re.compile(r"^(collect2|clang)(\.exe)?: error: \S+ (returned|failed)")
    specific = [line for line in named if not summary.match(line)]
    if specific or named:
        return (specific or named)[0]
    return lines[-1] if lines else None


def _compiler_identity(program: list[str]) -> str:
    """`program --version`'s answer (part of the cache key: another compiler, another library); RuntimeError where
    the compiler cannot be started or does not answer within VERSION_SECONDS. Asked once per process."""
    key = ("compiler", tuple(program))
    if key not in _state:
        try:
            slow = f"waiting for the C compiler ({shlex.join(program)}) to answer --version (at most"
            slow += f" {VERSION_SECONDS:g} s)"
            status, output = _run_compiler(program + ["--version"], VERSION_SECONDS, slow)
            _state[key] = (f"exit status {status}\n{output}", None)
        except subprocess.TimeoutExpired:
            _state[key] = (None, f"it did not answer --version within {VERSION_SECONDS:g} s (stopped)")
        except (OSError, subprocess.SubprocessError) as e:
            _state[key] = (None, str(e))
    identity, why = _state[key]
    if why is not None:
        raise RuntimeError(why)
    return identity


def _cpu_identity() -> str:
    """The CPU's model and features (Linux's first /proc/cpuinfo entry), for the cache key: -march=native builds for
    this CPU, and a cache folder can be shared with other machines (a home folder over NFS)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    return _cpu_summary(text)


def _cpu_summary(cpuinfo: str) -> str:
    """The lines of /proc/cpuinfo's first entry that say what the CPU is and can run."""
    lines = [line.split(":", 1) for line in cpuinfo.split("\n\n")[0].splitlines() if ":" in line]
    # what the CPU is and can run, not what it does now (cpu MHz, bogomips) or the kernel's patches (microcode, bugs)
    return platform.machine() + "".join(f"\n{k.strip()}:{v.strip()}" for k, v in lines if k.strip() in _CPU_KEYS)


_CPU_KEYS = {"vendor_id", "cpu family", "model", "model name", "stepping", "flags", "Features", "CPU implementer",
             "CPU architecture", "CPU variant", "CPU part", "CPU revision", "isa", "uarch", "cpu"}  # fmt: skip


def _load(path: Path, name: str) -> tuple[Optional[ctypes.CDLL], Optional[str]]:
    """The library at `path` with its functions declared, else why not (one that does not export them, e.g. built
    with flags that hide its symbols, is a kernel that failed to build)."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        return None, f"loading the compiled kernel failed: {e}"
    try:
        _KERNELS[name][2](lib)
    except AttributeError as e:
        symbol = str(e).rsplit(": ", 1)[-1]
        return None, (
            f"the library it built from {_KERNELS[name][0]} does not export {symbol} (flags that hide symbols?)"
        )
    return lib, None


def _sources_digest(program: list[str], commands: list[list[str]]) -> str:
    """The cache key: the kernel sources (every .c and .h here: they include each other), the compile commands, the
    compiler's --version and the CPU."""
    h = hashlib.sha256()
    for path in sorted(_HERE.glob("*.[ch]")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(json.dumps([commands, _compiler_identity(program), _cpu_identity()]).encode())
    return h.hexdigest()[:32]


def _remove_stale_partials(folder: Path) -> None:
    now = time.time()
    for partial in folder.glob(".*.so.partial"):
        with contextlib.suppress(OSError):
            if now - partial.stat().st_mtime > STALE_PARTIAL_SECONDS:
                partial.unlink()


def _compile(name: str) -> tuple[Optional[ctypes.CDLL], Optional[str]]:
    """The kernel `name` from the cache, else compiled (at most COMPILE_SECONDS) and cached; else None and why."""
    source, extra, _ = _KERNELS[name]
    compiler = os.environ.get("CC") or "cc"
    try:
        program = shlex.split(compiler)  # CC may carry a wrapper or flags ("ccache gcc")
    except ValueError as e:
        return None, f"CC={compiler!r} cannot be parsed: {e}"
    if not program:
        return None, f"CC={compiler!r} names no compiler"
    flags = ["-O3", "-ffp-contract=off", "-fPIC", "-shared", *extra, str(_HERE / source), "-lm"]
    # -march=native first (the vector units of this CPU); some compilers or CPUs refuse it
    commands = [program + ["-march=native"] + flags, program + flags]
    failed = f"the C compiler ({compiler}) failed"
    try:
        digest = _sources_digest(program, commands)
    except RuntimeError as e:
        return None, f"{failed}: {e}"
    folder = cache_folder()
    target = folder / f"{name}-{digest}.so"
    if target.is_file():
        lib, why = _load(target, name)
        if lib is not None:
            return lib, None  # else (a library damaged since) compiled again, replacing it
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor, partial = tempfile.mkstemp(prefix=f".{name}-", suffix=".so.partial", dir=folder)
    except OSError:  # a cache folder that cannot be written: this process's temporary folder
        folder = _temporary_folder()
        target = folder / target.name
        descriptor, partial = tempfile.mkstemp(prefix=f".{name}-", suffix=".so.partial", dir=folder)
    os.close(descriptor)
    _remove_stale_partials(folder)
    status = _status(f"compiling the C kernel {source} (once: kept in {folder}; at most {COMPILE_SECONDS:g} s)")
    try:
        return _compile_into(Path(partial), target, name, program, commands, failed)
    finally:
        status.close()
        with contextlib.suppress(OSError):
            os.unlink(partial)


def _compile_into(partial: Path, target: Path, name: str, program: list[str], commands, failed: str):
    """Compile into `partial`, load it, and rename it to `target`: a library is cached only once it loaded whole."""
    deadline = time.monotonic() + COMPILE_SECONDS
    why = "no output"
    for command in commands:
        try:
            status, output = _run_compiler(command + ["-o", str(partial)], max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            why = f"it did not finish compiling {_KERNELS[name][0]} within {COMPILE_SECONDS:g} s (stopped)"
            _state[("compiler", tuple(program))] = (None, why)  # the other kernels do not wait for it again
            break
        except (OSError, subprocess.SubprocessError) as e:
            why = str(e)
            break
        if status == 0:
            lib, why = _load(partial, name)
            if lib is None:
                break  # the other command would build the same library
            with contextlib.suppress(OSError):
                os.chmod(partial, 0o644)
                os.replace(partial, target)
            return lib, None
        why = _useful_line(output) or f"exit status {status}, no output"
    return None, f"{failed}: {why}"


def library(name: str = "dbn_sweep") -> Optional[ctypes.CDLL]:
    """The compiled kernel `name` (ctypes): loaded from the cache folder, else compiled, at the first call of the
    process; None where unavailable."""
    if name not in _KERNELS:
        raise ValueError(f"no native kernel named {name!r}: expected one of {', '.join(_KERNELS)}")
    if not requested():
        return None
    with _lock:
        if name not in _state:
            _state[name] = _compile(name)
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
