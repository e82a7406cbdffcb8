"""Ctrl-C during a resumable run: finish the annealing step, save, then stop (`deferred_interrupts`). Used by the
resume files' checkpoints (`raise_eval.runtime.resume`) and the shard loop (`raise_eval.runtime.sharding`)."""

from __future__ import annotations

import contextlib
import signal
import threading

_interrupts = {"deferring": 0, "requested": False}


def interrupt_requested() -> bool:
    """Whether Ctrl-C was pressed while interrupts were deferred (see `deferred_interrupts`)."""
    return _interrupts["requested"]


def _on_sigint(signum, frame):
    if _interrupts["deferring"] and not _interrupts["requested"]:
        _interrupts["requested"] = True  # the annealing loop saves at the end of its step, then stops
    else:
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred_interrupts():
    """While active, Ctrl-C (SIGINT) only sets `interrupt_requested()`; the code that checks it (a ShardCheckpoint
    callback, the shard loop) saves and raises KeyboardInterrupt. A second Ctrl-C raises at once. Only in the main
    thread (elsewhere signals cannot be caught) and when Ctrl-C is not ignored; otherwise this does nothing."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) in (
        signal.SIG_IGN,
        None,
    ):
        yield  # a process that ignores Ctrl-C (e.g. a background job of a script) goes on ignoring it
        return
    # Count first and put the old handler back before uncounting, so that a Ctrl-C landing between the two finds
    # a consistent pair (no window where our handler is installed but not counted).
    _interrupts["deferring"] += 1
    previous = None
    try:
        previous = signal.signal(signal.SIGINT, _on_sigint)
        yield
        if _interrupts["requested"]:
            raise KeyboardInterrupt
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        _interrupts["deferring"] -= 1
        if _interrupts["deferring"] == 0:
            _interrupts["requested"] = False
