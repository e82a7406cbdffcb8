"""The annealing loop shared by every estimator: AIS, RAISE and both directions of BDMC.

A path supplies log-density ratios between inverse temperatures; a kernel (state, beta, generator) -> state
leaves the beta-distribution invariant and must be reversible (detailed balance), so that running the same loop
on the reversed schedule is the exact reversal of the forward chain. One loop serves all directions:

    for j = 0 .. K-1:   x <- T_{beta_j}(x);   log w += log f_{beta_{j+1}}(x) - log f_{beta_j}(x)

Forward AIS starts from an exact sample of p_0 (its first transition then changes nothing in distribution); RAISE
and reverse AIS run the reversed schedule from their own start. This is the convention of the RAISE derivation
with the index slip of the paper's Algorithm 2 fixed: the state x_k is drawn with the operator of p_{k+1}
(reversible, so equal to its reversal) and weighted by f_k(x_k) / f_{k+1}(x_k).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any, Callable, Optional, TypeVar

import torch
from torch import Tensor
from tqdm.auto import tqdm

from raise_eval.contracts import (
    AnnealingPath,
    InfoKernel,
    InPlaceTransitions,
    InPlaceWeightUpdates,
    KernelInfo,
    OffersStepProgram,
    WeightUpdates,
)
from raise_eval.step_programs import Reporting, current_loop_options, run_program

S = TypeVar("S")

Kernel = Callable[[Any, float, torch.Generator], Any]
"""A transition (state, beta, generator) -> state that leaves p_beta invariant and satisfies detailed balance."""


# Optionally a path also offers `transition_(state, beta, generator)`, the default kernel writing into `state`'s
# own tensors, and `clone_state(state)`; `anneal` then updates a private copy of the start in place. A path may
# also offer `weight_update(state, beta_from, beta_to)` (and the in-place `weight_update_`) -> (log-density ratio,
# state): the state then carries what the weight update computed for the next transition at beta_to (for block
# Gibbs, the odd layers' probabilities), so that what one step hands to the next travels in the state.

class NonFiniteLogWeightError(FloatingPointError):
    """Log-weights that are NaN or +inf (or an estimate whose every chain has weight zero): no estimate can be made
    from them. A log-weight of -inf is a weight of zero (a state the next distribution gives probability zero) and
    is legitimate; NaN or +inf says that a log-density was NaN or infinite (e.g. a decoder or parameters that
    turned NaN). `stage` names the pass (the `desc` of `anneal`), `steps` the steps (first, last) between which the
    log-weights went bad (None when not known), `num_steps` the pass's K."""

    def __init__(
        self,
        stage: str,
        detail: str,
        hint: str = "",
        steps: Optional[tuple[int, int]] = None,
        num_steps: Optional[int] = None,
    ):
        self.stage, self.detail, self.steps, self.num_steps = stage, detail, steps, num_steps
        where = ""
        if steps is not None:
            first, last = steps
            where = f" at step {last}" if first == last else f" between steps {first} and {last}"
            where += "" if num_steps is None else f" of {num_steps}"
        super().__init__(f"{stage}: {detail}{where}" + (f" ({hint})" if hint else ""))


def check_finite(values: Tensor, stage: str, what: str, hint: str) -> None:
    """Raise `NonFiniteLogWeightError` naming `stage` where `values` (which must all be finite, unlike log-weights:
    e.g. log f(v) of test vectors) hold NaN or an infinity: "`what` is NaN or infinite in k of n entries (hint)"."""
    bad = int((~torch.isfinite(values)).sum())
    if bad:
        raise NonFiniteLogWeightError(stage, f"{what} is NaN or infinite in {bad} of {values.numel()} entries", hint)


def check_log_weights(
    log_weights: Tensor,
    stage: str,
    *,
    steps: Optional[tuple[int, int]] = None,
    num_steps: Optional[int] = None,
    chains_dim: Optional[int] = None,
) -> None:
    """Raise `NonFiniteLogWeightError` where `log_weights` hold NaN or +inf; with `chains_dim`, also where every
    chain of an estimate (every entry along that dimension) is -inf, so that the estimate would be -inf. One
    reduction and one read of a boolean while all is well (a device sync: call it once per pass, or every many
    steps)."""
    if bool((log_weights < math.inf).all()):  # False for NaN and +inf only
        if chains_dim is None or log_weights.numel() == 0:
            return
        zero = (log_weights == -math.inf).all(dim=chains_dim)
        if not bool(zero.any()):
            return
        raise NonFiniteLogWeightError(
            stage,
            f"every chain's weight is zero (log-weight -inf) in {int(zero.sum())} of {zero.numel()} estimates",
            "their states have probability zero under the target: check the model's support, or run more chains",
            steps,
            num_steps,
        )
    nan = int(torch.isnan(log_weights).sum())
    pos = int(torch.isposinf(log_weights).sum())
    kinds = " and ".join(f"{count} {word}" for count, word in ((nan, "NaN"), (pos, "+inf")) if count)
    raise NonFiniteLogWeightError(
        stage,
        f"{kinds} among {log_weights.numel()} log-weights",
        "a log-density was NaN or infinite: check the model's parameters and outputs",
        steps,
        num_steps,
    )


CHECK_EVERY = 100
"""`anneal` checks its log-weights for NaN and +inf every CHECK_EVERY steps and after the last (one device sync
each): a bad run stops within CHECK_EVERY steps of going wrong, at no measurable cost per step."""

StepCallback = Callable[[int, Any, Tensor], None]
"""Called as (steps done, state, log-weights) after every transition and weight update of `anneal`: the state is
the loop's own (it is overwritten by the next step; copy what you keep)."""


def anneal(
    path: AnnealingPath[S],
    state: S,
    betas: Tensor,
    *,
    generator: torch.Generator,
    kernel: Optional[Kernel] = None,
    progress: bool = False,
    desc: str = "annealing",
    log_weights: Optional[Tensor] = None,
    start_step: int = 0,
    on_step: Optional[StepCallback] = None,
    on_info: Optional[Callable[[int, KernelInfo], None]] = None,
    report_steps: Optional[Collection[int]] = None,
) -> tuple[S, Tensor]:
    """Run the annealing chain from `state` through `betas` (beta_0 .. beta_K, in the order given).

    Args:
        path: supplies `log_density_ratio` (and the default kernel, `path.transition`).
        state: the start, with batch dimensions B (not modified).
        betas: the schedule in the direction to run (reversed for RAISE and reverse AIS), shaped (K + 1,).
        generator: the only source of randomness.
        kernel: replaces `path.transition` (the start state is then never modified).
        progress: show a tqdm progress bar.
        log_weights: float64 log-weights shaped B to accumulate into (zeros when None).
        start_step: the number of steps already done: `state` and `log_weights` are those after step
            `start_step` (as `on_step` saw them) and the loop runs steps start_step .. K-1, so that a saved run,
            with its generator's state restored, continues with the numbers of an uninterrupted one.
        on_step: called as on_step(steps done, state, log-weights) after every step (e.g. to save them).
        report_steps: with `on_step`, the steps after which it must be called, where a step program runs many steps
            per CUDA graph: it is then called after each graph and after these steps (an empty collection: any
            graph's end will do, e.g. for saves that are due every so many seconds). None: after every step, so that
            no graphs are captured.
        on_info: called as on_info(steps done, info) with each transition's `KernelInfo` (acceptance rates and the
            like); needs a kernel that reports them (`contracts.InfoKernel`: its `step` returns (state, info)).

    Returns:
        (final state, log-weights), the log-weights in float64 shaped B:
        sum_j log f_{beta_{j+1}}(x_j) - log f_{beta_j}(x_j), x_j the state after the j-th transition.

    A path that offers a step program (`contracts.StepProgram`, `path.step_program(options)`), or a given kernel
    that offers one (HMC), runs through it where `step_programs.current_loop_options()` allows (CUDA by default:
    many steps per CUDA graph), unless `on_info` is given: the same chain and weights, computed by the program.

    Raises `NonFiniteLogWeightError` (naming `desc` and the steps) when a log-weight turns NaN or +inf, checked
    every CHECK_EVERY steps and after the last (-inf, a weight of zero, is legitimate).
    """
    program = None
    owner = path if kernel is None else kernel  # a kernel of the caller's may offer a program of its own (HMC)
    if on_info is None and isinstance(owner, OffersStepProgram):
        program = owner.step_program(current_loop_options())  # None where it has none for this model or device
    if program is not None:
        return _run_program(
            program, state, betas, generator=generator, progress=progress, desc=desc, log_weights=log_weights,
            start_step=start_step, reported=(on_step, report_steps),
        )  # fmt: skip
    if kernel is None and isinstance(path, InPlaceTransitions):
        # The loop owns a copy of the start and updates it in place: no multi-megabyte allocation per step.
        state = path.clone_state(state)
        step = path.transition_
        update = path.weight_update_ if isinstance(path, InPlaceWeightUpdates) else None
    else:
        step = path.transition if kernel is None else kernel
        # A kernel of the caller's gets plain states (it might not use what a weight update left in them).
        update = path.weight_update if kernel is None and isinstance(path, WeightUpdates) else None
    if update is None:
        update = lambda x, b0, b1: (path.log_density_ratio(x, b0, b1), x)  # noqa: E731
    if on_info is not None:
        if not isinstance(kernel, InfoKernel):
            raise ValueError("on_info needs a kernel that reports what each step did (contracts.InfoKernel)")
        info_step, infos = kernel.step, []

        def step(x, beta, gen):  # the kernel's (state, info), the info handed on after the weight update
            x, info = info_step(x, beta, gen)
            infos.append(info)
            return x

    beta_list, num_steps = _schedule(betas, start_step, log_weights)
    bar = tqdm(total=num_steps, initial=start_step, desc=desc, disable=not progress, leave=False, mininterval=0.5)
    checked = start_step  # the log-weights were good after this many steps
    try:
        for j in range(start_step, num_steps):
            beta_from, beta_to = beta_list[j], beta_list[j + 1]
            state = step(state, beta_from, generator)
            increment, state = update(state, beta_from, beta_to)
            if log_weights is None:
                log_weights = increment.to(torch.float64)
            else:
                log_weights.add_(increment)  # float64 accumulator
            bar.update(1)
            if on_info is not None:
                on_info(j + 1, infos.pop())
            if j + 1 - checked >= CHECK_EVERY or j + 1 == num_steps:
                check_log_weights(log_weights, desc, steps=(checked + 1, j + 1), num_steps=num_steps)
                checked = j + 1
            if on_step is not None:
                on_step(j + 1, state, log_weights)
    finally:
        bar.close()
    return state, log_weights


def _schedule(betas: Tensor, start_step: int, log_weights: Optional[Tensor]) -> tuple[list[float], int]:
    """The betas as Python floats (no device sync per step, and 32 bytes a step) and K, the start step checked."""
    beta_list = torch.as_tensor(betas, dtype=torch.float64).tolist()
    num_steps = len(beta_list) - 1
    if isinstance(start_step, bool) or not isinstance(start_step, int) or not 0 <= start_step <= num_steps:
        raise ValueError(f"start_step must be an integer in [0, {num_steps}], got {start_step!r}")
    if start_step > 0 and log_weights is None:
        raise ValueError("continuing at start_step > 0 needs the log-weights accumulated so far")
    return beta_list, num_steps


def _run_program(program, state, betas, *, generator, progress, desc, log_weights, start_step, reported):
    """`anneal` through the path's step program (`step_programs`): the same steps, many per CUDA graph. `reported`:
    anneal's (on_step, report_steps)."""
    beta_list, num_steps = _schedule(betas, start_step, log_weights)
    program.begin(state, log_weights, beta_list[start_step], num_steps, start_step)
    on_step, report_steps = reported

    def check(values: Tensor, steps: tuple[int, int]) -> None:
        check_log_weights(values, desc, steps=steps, num_steps=num_steps)

    reporting = Reporting(check, CHECK_EVERY, on_step, None if on_step is None else report_steps)
    run_program(
        program, beta_list, start_step=start_step, generator=generator, options=current_loop_options(),
        progress=progress, desc=desc, reporting=reporting,
    )  # fmt: skip
    return program.state(beta_list[-1]), program.finish(beta_list[-1])


def continuation(checkpoint: Any, phase: str, saved: Optional[dict], extra: Optional[dict] = None) -> dict[str, Any]:
    """The `anneal` arguments of a phase run under a checkpoint (`raise_eval.runtime.resume.ShardCheckpoint`, or None):
    from `saved` (what `checkpoint.restore(phase, path)` returned, or None for a fresh start) and saving through
    `checkpoint.on_step(phase, extra)` as it goes (at any step's end: saves are due by the clock, and a step
    program's graphs keep running between them)."""
    return {
        "log_weights": None if saved is None else saved["log_weights"],
        "start_step": 0 if saved is None else saved["step"],
        "on_step": None if checkpoint is None else checkpoint.on_step(phase, extra),
        "report_steps": (),
    }
