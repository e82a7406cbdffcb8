"""How the C kernels are built (`raise_eval.models.native`, issue 45): cached between processes under a key of the
sources, the compiler and the CPU, written whole or not at all, stopped when the compiler hangs, said on stderr while
the compiler runs, and a library that does not export the kernels' functions taken as a kernel that failed to build."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest
import torch
from raise_eval.models import native


def _script(tmp_path, name: str, body: str):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A new process's view of the kernels (nothing loaded yet), with a cache folder of its own."""
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("RAISE_EVAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv(native.NATIVE_ENV, raising=False)
    return tmp_path / "cache" / "native"


def _needs_cc() -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) here")


def _logging_cc(tmp_path):
    """A CC that appends its arguments to a log, then runs cc."""
    log = tmp_path / "cc.log"
    return _script(tmp_path, "logging-cc", f'echo "$@" >> {log}\nexec cc "$@"\n'), log


def test_a_compiled_kernel_is_cached_for_the_next_process(fresh, monkeypatch, tmp_path):
    """The first process compiles, the next loads the cached library without compiling (only `--version` is
    asked); another compiler command is another key, compiled anew. Nothing partial is left."""
    _needs_cc()
    cc, log = _logging_cc(tmp_path)
    monkeypatch.setenv("CC", str(cc))
    assert native.library("step") is not None
    compiles = [line for line in log.read_text().splitlines() if "step.c" in line]
    assert len(compiles) == 1
    cached = sorted(p.name for p in fresh.iterdir())
    assert len(cached) == 1 and cached[0].startswith("step-") and cached[0].endswith(".so")
    monkeypatch.setattr(native, "_state", {})  # the next process
    assert native.library("step") is not None
    assert [line for line in log.read_text().splitlines() if "step.c" in line] == compiles
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("CC", f"{cc} -DRAISE_EVAL_TEST_FLAG")  # other flags: another library
    assert native.library("step") is not None
    assert len([line for line in log.read_text().splitlines() if "step.c" in line]) == 2
    assert len(list(fresh.glob("step-*.so"))) == 2 and not list(fresh.glob(".*"))


def test_a_damaged_cached_library_or_a_killed_compile_breaks_nothing(fresh, monkeypatch, tmp_path):
    """A cached library that does not load (truncated) is compiled again and replaced; the partial library of a
    process killed while compiling is never loaded, and removed once it is old."""
    _needs_cc()
    assert native.library("step") is not None
    (cached,) = fresh.glob("step-*.so")
    # a new file in its place (as another process's damage would be): writing over the library in place would
    # truncate the pages this process has mapped, and the process would die of SIGBUS when it touches them
    cached.unlink()
    cached.write_bytes(b"\x7fELF truncated")
    stale = fresh / ".step-killed.so.partial"
    stale.write_bytes(b"half a library")
    old = time.time() - 2 * native.STALE_PARTIAL_SECONDS
    os.utime(stale, (old, old))
    monkeypatch.setattr(native, "_state", {})
    assert native.library("step") is not None and native.unavailable_reason("step") is None
    assert cached.stat().st_size > 1000 and not stale.exists()


def test_an_unwritable_cache_folder_leaves_a_temporary_one(fresh, monkeypatch, tmp_path):
    _needs_cc()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(native.CACHE_ENV, str(blocker))
    assert native.library("step") is not None
    assert blocker.read_text() == "not a folder"
    assert native._state["temporary folder"].is_dir()


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "mine"))
    assert native.cache_folder() == tmp_path / "mine" / "native"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(native.CACHE_ENV, "~/kernels")  # quoted, so the shell left the ~
    assert native.cache_folder() == tmp_path / "home" / "kernels" / "native"
    monkeypatch.delenv(native.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.cache_folder() == tmp_path / "xdg" / "raise-eval" / "native"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert native.cache_folder() == tmp_path / "home" / ".cache" / "raise-eval" / "native"


def test_hidden_visibility_flags_keep_the_kernels(fresh, monkeypatch):
    """CC='cc -fvisibility=hidden' (a hardening flag) gave an AttributeError (undefined symbol): the sources now
    export their entry points explicitly."""
    _needs_cc()
    monkeypatch.setenv("CC", "cc -fvisibility=hidden")
    for name in ("step", "dbn_sweep"):
        assert native.library(name) is not None, native.unavailable_reason(name)


def test_a_library_without_the_functions_is_a_kernel_that_failed(fresh, monkeypatch, tmp_path):
    """A compiler whose library lacks the kernel's functions: no traceback, the PyTorch route and a note that says
    why (a new user's CC='cc -fvisibility=hidden' gave `AttributeError: ... undefined symbol`); nothing cached."""
    _needs_cc()
    empty = tmp_path / "empty.c"
    empty.write_text("int raise_eval_test_nothing(void) { return 0; }\n")
    body = 'out=""\nprev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
    body += f'[ -z "$out" ] && exec cc "$@"\nexec cc -shared -fPIC {empty} -o "$out"\n'
    monkeypatch.setenv("CC", str(_script(tmp_path, "empty-cc", body)))
    assert native.library("step") is None
    assert "does not export log1p_expm1_float32" in native.unavailable_reason("step")
    assert not fresh.exists() or not list(fresh.glob("*"))

    from raise_eval import RBM, evaluate

    g = torch.Generator().manual_seed(0)
    model = RBM.random(12, 5, generator=g)
    test = (torch.rand(6, 12, generator=g) < 0.5).float()
    report = evaluate(model, test, init="uniform", steps=5, ais_chains=10, raise_examples=2, raise_chains=2, threads=1)
    assert "does not export log1p_expm1_float32" in report.settings["native_kernels"]["step"]
    assert any(n.startswith("the C kernels of the annealing step are not in use") for n in report.notes)


def _in_a_thread(function, seconds: float):
    """function()'s result, or AssertionError where it has not returned within `seconds` (it is left running)."""
    result = []
    thread = threading.Thread(target=lambda: result.append(function()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, f"still waiting after {seconds} s"
    return result[0]


def _ends_soon(pid: int) -> bool:
    """Whether process `pid` is gone, or a zombie, within 5 s (its parent, killed, leaves it to init to reap)."""
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.1)
    return False


def test_a_compiler_that_hangs_on_version_is_stopped(fresh, monkeypatch, tmp_path):
    """A compiler that never answers: stopped after VERSION_SECONDS, once per process for every kernel (it took two
    120-s attempts per kernel, in silence)."""
    monkeypatch.setattr(native, "VERSION_SECONDS", 1.0)
    monkeypatch.setenv("CC", str(_script(tmp_path, "hang-cc", "sleep 60\n")))
    begin = time.monotonic()
    assert _in_a_thread(lambda: native.library("step"), 20) is None
    assert _in_a_thread(lambda: native.library("dbn_sweep"), 20) is None
    assert time.monotonic() - begin < 10
    assert native.unavailable_reason("dbn_sweep").endswith("it did not answer --version within 1 s (stopped)")


def test_a_compiler_that_hangs_while_compiling_is_stopped_whole(fresh, monkeypatch, tmp_path):
    """A compile that does not finish: stopped after COMPILE_SECONDS with its children (the session is killed),
    nothing is left in the cache, and the other kernels do not wait for it again."""
    pid_file = tmp_path / "sleep.pid"
    body = f'[ "$1" = --version ] && echo hang-cc 1.0 && exit 0\nsleep 60 &\necho $! > {pid_file}\nwait\n'
    monkeypatch.setattr(native, "COMPILE_SECONDS", 2.0)
    monkeypatch.setenv("CC", str(_script(tmp_path, "hang-cc", body)))
    begin = time.monotonic()
    assert _in_a_thread(lambda: native.library("step"), 30) is None
    assert _in_a_thread(lambda: native.library("dbn_sweep"), 30) is None
    assert time.monotonic() - begin < 10
    assert native.unavailable_reason("step").endswith("it did not finish compiling step.c within 2 s (stopped)")
    assert "did not finish compiling step.c" in native.unavailable_reason("dbn_sweep")
    assert _ends_soon(int(pid_file.read_text()))
    assert not list(fresh.glob("*"))


def test_a_compile_says_so_on_stderr_when_asked(fresh, capfd):
    _needs_cc()
    assert native.library("step") is not None
    assert "compiling" not in capfd.readouterr().err  # the library's default: silent
    native._state.clear()
    for path in fresh.glob("*"):
        path.unlink()
    with native.announcing_compiles(True):
        assert native.library("step") is not None
    assert f"compiling the C kernel step.c (once: kept in {fresh}" in capfd.readouterr().err


def test_the_useful_line_of_a_failed_compile():
    """A compile out of disk ended with "compilation terminated.": the reason is the line that says why."""
    disk = (
        "/x/models/native/step.c:248:1: fatal error: error writing to /tmp/ccinBxI1.s: No space left on device\n"
        "  248 | BERNOULLI_PHILOX(float, int32_t, bernoulli_philox_logits_float32, 1, 0)\n"
        "      | ^~~~~~~~~~~~~~~~\ncompilation terminated.\n"
    )
    assert native._useful_line(disk).endswith("No space left on device")
    link = "/usr/bin/ld: cannot find -lm: No such file or directory\ncollect2: error: ld returned 1 exit status\n"
    assert native._useful_line(link) == "/usr/bin/ld: cannot find -lm: No such file or directory"
    assert native._useful_line("something odd\nthe end\n") == "the end"
    assert native._useful_line("\n") is None


def test_the_cache_key_follows_what_the_cpu_can_run_not_its_clock():
    """A key that took the CPU's current MHz would compile again in every run."""
    entry = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 207\ncpu MHz\t\t: {mhz}\nflags\t\t: {flags}\n"
    entry += "bogomips\t: {mhz}\n\nprocessor\t: 1\ncpu MHz\t\t: 1.0\n"
    summary = native._cpu_summary(entry.format(mhz="2299.998", flags="fpu avx2"))
    assert summary == native._cpu_summary(entry.format(mhz="3100.5", flags="fpu avx2"))
    assert summary != native._cpu_summary(entry.format(mhz="2299.998", flags="fpu avx2 avx512f"))
    assert "model:207" in summary and "MHz" not in summary
