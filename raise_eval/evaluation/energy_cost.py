"""The cost model of an energy model's evaluation (`evaluate_energy`): its predicted wall time, stage by stage, as a
`CostEstimate` (the Boltzmann machines' form: `format()` is what `raise-eval evaluate` prints, `to_dict()` the JSON).

The user's energy dominates a transition's cost: HMC's L leapfrog steps are L forward-and-backward passes (the state
carries log f and its gradient, so a weight update costs none), MALA's one, Gibbs with gradients' one per proposal,
the Metropolis scan's 2D forward passes. Timing bare passes of the energy leaves out what a transition adds to them
(the base's gradient, the momenta, the accept step: most of the time for a small energy, whose passes are cheap), so
a few transitions of the run's own kernel are timed instead (after a warm-up, the fastest), at each stage's batch:
AIS's chains, RAISE's test vectors x chains, the pilot's chains (batches above MAX_TIMED_BATCH are timed at it and
scaled linearly), and multiplied by the stage's transitions (the pilot's do not depend on K beyond `pilot_steps`).
The states are drawn from the base with a generator of their own: the run's random streams are untouched.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

import torch
from torch import Tensor

from raise_eval.evaluation.energy_checks import PROBE_CHAINS, PROBE_STEPS
from raise_eval.evaluation.memory import CostEstimate, StageCost
from raise_eval.kernels.energy_hmc import EnergyHMCKernel, tune_step_sizes
from raise_eval.kernels.energy_sites import GibbsWithGradientsKernel, MetropolisScanKernel
from raise_eval.models.energy import fit_base
from raise_eval.paths.energy import EnergyPath

MAX_TIMED_BATCH = 4096  # a larger batch's transition is timed at this size and scaled linearly
TIMED_TRANSITIONS = 3  # the fastest of this many transitions (after one warm-up) is a transition's time
TIMING_BETA = 0.5  # the temperature the transitions are timed at
PILOT_CHAINS = tune_step_sizes.__kwdefaults__["num_chains"]
PILOT_WARMUP = tune_step_sizes.__kwdefaults__["warmup"]
STATE_COPIES = 4  # position, gradient, momentum and a proposal per chain: the chains' states' memory


def kernel_words(kind: str, num_leapfrog: int) -> str:
    """What one transition of kernel `kind` costs, in passes of the energy."""
    if kind == "hmc":
        return f"{num_leapfrog} forward-and-backward passes each"
    if kind in ("mala", "gibbs-with-gradients"):
        return "1 forward-and-backward pass each"
    return "2 forward passes per site each"


def energy_cost(
    n_test: int, settings, kind: str, state_bytes: int, step_seconds: Callable[[int], float], fitted: bool = False
) -> CostEstimate:
    """The predicted cost of `evaluate_energy` with `settings` (an `EnergySettings`) and kernel `kind` on `n_test`
    test vectors, from `step_seconds(batch)`: one transition of the kernel on `batch` chains. state_bytes: one
    example's bytes; fitted: the base is fitted to training data, so the run also probes it (a short AIS from the
    broad default base, `energy_checks.base_probe_warning`)."""
    k = settings.steps
    each = kernel_words(kind, settings.num_leapfrog)
    stages = []
    tuned = kind in ("hmc", "mala")
    if tuned:
        transitions = 2 * (min(k, settings.pilot_steps) + 1) + PILOT_WARMUP
        stages.append(
            StageCost(
                "pilot", "step-size pilot", f"{PILOT_CHAINS} chains x {transitions:,} transitions ({each})",
                PILOT_CHAINS * state_bytes * STATE_COPIES, transitions * step_seconds(PILOT_CHAINS),
                steps_independent=True,
            )
        )  # fmt: skip
    for name, label, batch in (("ais", "AIS", settings.ais_chains), ("raise", "RAISE", n_test * settings.raise_chains)):
        stages.append(
            StageCost(
                name, label, f"{batch:,} chains x {k:,} transitions ({each})", batch * state_bytes * STATE_COPIES,
                k * step_seconds(batch),
            )
        )  # fmt: skip
    if fitted:  # its own pilot (at most PROBE_STEPS temperatures), then PROBE_STEPS transitions of PROBE_CHAINS
        pilot = 2 * (min(PROBE_STEPS, settings.pilot_steps) + 1) + PILOT_WARMUP if tuned else 0
        probe = StageCost(
            "probe", "probe of the fitted base", f"{PROBE_CHAINS} chains x {PROBE_STEPS} transitions from the broad "
            f"default base ({each}), and its pilot", PROBE_CHAINS * state_bytes * STATE_COPIES,
            PROBE_STEPS * step_seconds(PROBE_CHAINS) + pilot * step_seconds(PILOT_CHAINS), steps_independent=True,
        )  # fmt: skip
        stages.insert(len(stages) - 1, probe)  # between AIS and RAISE, as the run makes it
    return CostEstimate(stages, 0)


def estimate_energy_cost(
    model, test_data: Tensor, settings, kind: str, *, train_data: Optional[Tensor] = None, base=None
) -> CostEstimate:
    """The predicted wall time of `evaluate_energy(model, test_data, settings, train_data=..., base=...)` with its
    kernel `kind` (see the module docstring): a few transitions of the kernel timed per stage's batch, on this
    model, device, dtype and thread count."""
    begin = time.perf_counter()
    path = EnergyPath(model, fit_base(model, train_data) if train_data is not None else base)
    kernel = _timing_kernel(path, kind, settings.num_leapfrog)
    generator = torch.Generator(device=model.device).manual_seed(0)
    timed: dict[int, float] = {}

    def step_seconds(batch: int) -> float:
        size = min(batch, MAX_TIMED_BATCH)
        if size not in timed:
            timed[size] = _time_transition(path, kernel, size, generator)
        return timed[size] * batch / size

    sites = math.prod(model.event_shape)
    one = torch.empty((), dtype=torch.int64 if model.support.discrete else model.dtype).element_size() * sites
    estimate = energy_cost(int(test_data.shape[0]), settings, kind, one, step_seconds, fitted=train_data is not None)
    threads = torch.get_num_threads()
    batches = ", ".join(f"{b:,}" for b in sorted(timed))
    estimate.timing = (
        f"timed in {time.perf_counter() - begin:.2f} s: transitions of the {kind} kernel on this energy with "
        f"{batches} chains, {threads} thread{'s' if threads != 1 else ''}; memory: the chains' states, not the "
        "energy's own activations"
    )
    estimate.measured_in = time.perf_counter() - begin
    return estimate


def _timing_kernel(path: EnergyPath, kind: str, num_leapfrog: int):
    """The run's kernel of `kind` (HMC's and MALA's step size fixed: the pilot's tuned sizes do not change a
    transition's cost)."""
    if kind == "metropolis":
        return MetropolisScanKernel(path)
    if kind == "gibbs-with-gradients":
        return GibbsWithGradientsKernel(path)
    return EnergyHMCKernel(path, 0.1, 1 if kind == "mala" else num_leapfrog)


def _time_transition(path: EnergyPath, kernel, batch: int, generator: torch.Generator) -> float:
    """Seconds of one transition of `kernel` on `batch` chains drawn from the base."""
    state = path.sample_initial(batch, generator)
    device = state.x.device

    def run(state):
        state = kernel.step(state, TIMING_BETA, generator)[0]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return state

    state = run(state)  # warm-up: first-call allocations, lazy initialisation
    best = math.inf
    for _ in range(TIMED_TRANSITIONS):
        start = time.perf_counter()
        state = run(state)
        best = min(best, time.perf_counter() - start)
    return best
