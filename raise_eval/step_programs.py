"""Annealing loops run as step programs: many steps captured in one CUDA graph, no host work between them.

`anneal` spends most of a small step's time on the GPU launching kernels and in the Python that chooses them
(a float32 AIS step of a 784-500 RBM with 1,000 chains took 0.74 ms against 0.06 ms of bare products on an H200).
A path that can write its transition and weight update with the inverse temperatures as device tensors offers a
*step program* (`contracts.StepProgram`, from `path.step_program(state)`): the chains' state in tensors of its own,
and `step(beta_from, beta_to, generator)` that advances them in place. `run_program` then captures
`steps_per_graph` steps in one CUDA graph (`torch.cuda.CUDAGraph`, the generator registered with it, so that each
replay draws new random numbers from it, as the same steps run eagerly would) and replays it over the schedule,
the betas of each replay copied on the device into the graph's window first: one launch for many steps and no
host-device synchronisation but the log-weights' check every `annealing.CHECK_EVERY` steps. Steps that do not fill a
graph (the first, which also initialises what capture needs, and the schedule's remainder) run the same program
eagerly. Off CUDA (or with `programs='always'`) the same program runs eagerly step by step, which is how the CPU
tests check its distributions.

`LoopOptions` holds the settings, validated once: `loop_options(...)` overrides them for a block (as
`torch.backends` flags are), and RAISE_EVAL_STEP_PROGRAMS (`cuda`, `always` or `never`) sets where programs run
for a whole process (`never`: the eager loop of every step, as before programs existed).
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import os
import warnings
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

import torch
from torch import Tensor
from tqdm.auto import tqdm

PROGRAMS = ("cuda", "always", "never")
PRODUCTS = ("model", "half-split", "tf32-split", "half-path", "tf32-path")
# The products whose chains anneal the model with rounded weights (`kernels.binary_program`), and the rounding's name
ROUNDED_PATHS = {"half-path": "float16", "tf32-path": "tf32"}
FUSE = ("auto", "none", "compile", "fused")


# 'auto' fusion compiles for runs of at least this many chain-steps (chains x steps): the first compilation of a
# process took about 12 s on an H200 and saves about 0.15 ms a step at 5,000 chains (784-500 RBM, float32)
FUSE_MIN_CHAIN_STEPS = 200_000_000


def _has_triton() -> bool:
    try:
        from torch.utils._triton import has_triton

        return bool(has_triton())
    except Exception:  # noqa: BLE001 (any failure to find it: no fusion)
        return False


@dataclass(frozen=True)
class LoopOptions:
    """How `anneal` runs a path's step program.

    programs: 'cuda' (on CUDA devices only, the default), 'always' (on every device: eagerly off CUDA) or 'never'.
    steps_per_graph: steps captured in one CUDA graph (0: run the program eagerly on CUDA too).
    products: 'model' (matrix products in the model's dtype), 'tf32-split' (float32 binary states times the weights
        split into two TF32 terms on the TF32 tensor cores, within `kernels.split_products.tf32_split_error_bound`)
        or 'half-split' (binary states, exact in half
        precision, times the weights split into half-precision terms whose sum is the weight to within a bound
        reported by `kernels.split_products.split_error_bound`; float32 models on CUDA) or 'half-path' (the states
        times the weights rounded to float16, one product: the chains anneal that rounded model, and the runs'
        ends at beta = 1 are the model's own: AIS stays unbiased for its Z, and RAISE estimates the rounded model,
        the shift measured in the report; `kernels.binary_program`, `evaluation.rounding`) or
        'tf32-path' (the same with the weights rounded to TF32, read exactly by the TF32 tensor cores, the states
        as they are).
    fuse: 'auto' (the default: compile on CUDA for a run of at least FUSE_MIN_CHAIN_STEPS chain-steps, where Triton
        is present and the compilation succeeds: the first compilation in a process takes about 10 s, which a long
        run repays; else as 'none'), 'none' (one op at a time), 'compile' (the elementwise work of a step through
        torch.compile, in few kernels, wherever the program runs);
        'fused' runs the functions compile would compile as they are (to test them where nothing compiles).
    """

    programs: str = "cuda"
    steps_per_graph: int = 32
    products: str = "model"
    fuse: str = "auto"

    def __post_init__(self):
        for name, allowed in (("programs", PROGRAMS), ("products", PRODUCTS), ("fuse", FUSE)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")
        steps = self.steps_per_graph
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps_per_graph must be a non-negative integer, got {steps!r}")

    def copy(self, **overrides: Any) -> LoopOptions:
        return replace(self, **overrides)

    def fuse_for(self, device: torch.device, chain_steps: int) -> str:
        """The fusion a run of `chain_steps` chain-steps on `device` takes ('auto' resolved)."""
        if self.fuse != "auto":
            return self.fuse
        return "compile" if device.type == "cuda" and chain_steps >= FUSE_MIN_CHAIN_STEPS and _has_triton() else "none"

    def runs_on(self, device: torch.device) -> bool:
        """Whether a path's program (where it offers one) replaces the eager loop on `device`."""
        return self.programs == "always" or (self.programs == "cuda" and device.type == "cuda")


def refuse_rounded_paths(what: str) -> None:
    """Refuse a rounded path (`LoopOptions.products` 'half-path' or 'tf32-path') for `what`, a pass that reads the
    log-weights before a run's end: until the run's last link to the model's own distribution they are the rounded
    model's."""
    products = current_loop_options().products
    if products in ROUNDED_PATHS:
        raise ValueError(
            f"{what} reads its log-weights at intermediate rungs, which products={products!r} holds for the model "
            "with rounded weights (only a run's end at beta = 1 is the model's own): run it with products='model'"
        )


def _from_environment() -> LoopOptions:
    value = os.environ.get("RAISE_EVAL_STEP_PROGRAMS", "cuda").strip().lower() or "cuda"
    if value not in PROGRAMS:
        raise ValueError(f"RAISE_EVAL_STEP_PROGRAMS must be one of {', '.join(PROGRAMS)}; got {value!r}")
    return LoopOptions(programs=value)


_OPTIONS: contextvars.ContextVar[Optional[LoopOptions]] = contextvars.ContextVar("loop_options", default=None)


def current_loop_options() -> LoopOptions:
    options = _OPTIONS.get()
    return _from_environment() if options is None else options


@contextlib.contextmanager
def loop_options(**overrides: Any):
    """Run the block with these `LoopOptions` fields changed (validated here, before any work). `evaluate` and
    `certify` take theirs from their settings (`loop`, `gpu_products`, `gpu_fuse`) and warn where a block's products
    differ."""
    token = _OPTIONS.set(current_loop_options().copy(**overrides))
    try:
        yield _OPTIONS.get()
    finally:
        _OPTIONS.reset(token)


def schedule_table(program, betas: Tensor) -> tuple[Tensor, ...]:
    """What each step of `program` reads, one row per beta: (betas,) (float64, K + 1), or the program's own table
    (`program.schedule(betas)`, e.g. HMC's step sizes beside the betas)."""
    schedule = getattr(program, "schedule", None)
    return (betas,) if schedule is None else tuple(schedule(betas))


def _rows(table: tuple[Tensor, ...], j: int):
    """Row j of the table: the betas' entry alone (a 0-d tensor) where the table is the betas alone."""
    return table[0][j] if len(table) == 1 else tuple(t[j] for t in table)


def _capture(program, steps: int, generator: torch.Generator, stream, table) -> tuple[Any, tuple[Tensor, ...]]:
    """A CUDA graph of `steps` program steps reading their rows of the schedule table from a window (steps + 1 rows)
    on the device."""
    window = tuple(torch.zeros((steps + 1, *t.shape[1:]), dtype=t.dtype, device=t.device) for t in table)
    graph = torch.cuda.CUDAGraph()
    index = program.device.index if program.device.index is not None else torch.cuda.current_device()
    if generator is not torch.cuda.default_generators[index]:
        graph.register_generator_state(generator)  # the default generator is registered by capture itself
    with torch.cuda.graph(graph, stream=stream):
        for i in range(steps):
            program.step(_rows(window, i), _rows(window, i + 1), generator)
    return graph, window


def _graph_fits(done: int, per_graph: int, num_steps: int, reported: list[int]) -> bool:
    """Whether a graph of `per_graph` steps can run after `done` steps: within the schedule, and with no step that
    must be reported strictly inside it."""
    if num_steps - done < per_graph:
        return False
    after = bisect.bisect_right(reported, done)
    return after == len(reported) or reported[after] >= done + per_graph


def can_capture(generator: torch.Generator) -> bool:
    """Whether a CUDA graph can draw from `generator` (a non-default CUDA generator needs torch >= 2.5)."""
    return generator.device.type == "cuda" and hasattr(torch.cuda.CUDAGraph, "register_generator_state")


@dataclass(frozen=True)
class Reporting:
    """What a run of steps (`run_program`) checks and reports, and when: `check(log_weights, (first, last))` every
    `check_every` steps and after the last; `on_step(steps done, state, log-weights)` after each launch (a graph of
    steps, or one eager step), never inside a graph for the steps in `report_steps` (None: every step, so no graphs
    with `on_step`)."""

    check: Callable[[Tensor, tuple[int, int]], None]
    check_every: int
    on_step: Optional[Callable[[int, Any, Tensor], None]] = None
    report_steps: Optional[Collection[int]] = None


def run_program(
    program,
    betas: list[float],
    *,
    start_step: int,
    generator: torch.Generator,
    options: LoopOptions,
    progress: bool,
    desc: str,
    reporting: Reporting,
) -> None:
    """Run steps start_step .. K-1 of `betas` (beta_0 .. beta_K as Python floats) through `program`, which holds the
    state and log-weights (`program.begin` was called), checking and reporting as `reporting` says."""
    check, check_every = reporting.check, reporting.check_every
    on_step, report_steps = reporting.on_step, reporting.report_steps
    device = program.device
    num_steps = len(betas) - 1
    table = schedule_table(program, torch.tensor(betas, dtype=torch.float64, device=device))
    per_graph = options.steps_per_graph if device.type == "cuda" and can_capture(generator) else 0
    if on_step is not None and report_steps is None:
        per_graph = 0
    reported = sorted(set(report_steps or ()))
    stream = torch.cuda.Stream(device) if per_graph else None
    caller = torch.cuda.current_stream(device) if per_graph else None
    bar = tqdm(total=num_steps, initial=start_step, desc=desc, disable=not progress, leave=False, mininterval=0.5)
    graph = window = None
    done = checked = start_step
    try:
        if stream is not None:
            stream.wait_stream(caller)
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            while done < num_steps:
                capture = graph is None and done > start_step
                if per_graph and capture and _graph_fits(done, per_graph, num_steps, reported):
                    # (the run's first step is eager: it initialises what capture needs on this stream)
                    try:
                        graph, window = _capture(program, per_graph, generator, stream, table)
                    except RuntimeError as e:
                        # Capture runs nothing: the state and the generator are as they were, and the same steps
                        # run eagerly (e.g. a user's decoder that reads a value back to the host cannot be captured)
                        warnings.warn(
                            f"{desc}: the steps could not be captured in a CUDA graph ({str(e).splitlines()[0]}); "
                            "they run one at a time", RuntimeWarning, stacklevel=3,
                        )  # fmt: skip
                        per_graph = 0
                if per_graph and graph is not None and _graph_fits(done, per_graph, num_steps, reported):
                    for w, t in zip(window, table):
                        w.copy_(t[done : done + per_graph + 1])
                    graph.replay()
                    taken = per_graph
                else:
                    program.step(_rows(table, done), _rows(table, done + 1), generator)
                    taken = 1
                done += taken
                bar.update(taken)
                if done - checked >= check_every or done == num_steps:
                    check(program.log_weights, (checked + 1, done))
                    checked = done
                if on_step is not None:
                    on_step(done, program.state(betas[done]), program.log_weights)
    finally:
        if stream is not None:
            caller.wait_stream(stream)
        bar.close()
        del graph, window  # the graph's memory pool goes with it


def describe_per_graph(options: LoopOptions, device: torch.device) -> str:
    """A few words on how the loop runs on `device` (for reports)."""
    if not options.runs_on(device):
        return "eager loop"
    if device.type == "cuda" and options.steps_per_graph:
        return f"step program, {options.steps_per_graph} steps per CUDA graph"
    return "step program, eager"


__all__ = [
    "LoopOptions",
    "current_loop_options",
    "loop_options",
    "run_program",
    "refuse_rounded_paths",
    "can_capture",
    "describe_per_graph",
]
