"""The contracts between models, paths, chain states and kernels, declared (`typing.Protocol`s), each with a
conformance test over every model family (tests/test_contracts.py). A new model family is added by implementing
them (docs/architecture.md, "Where to add a model family"); the estimators and the protocol packages ask only for
these members, never for a class by name.

- `Model` (raise_eval.models.contracts): what every model declares: its `family`, sizes, dtype and device.
- `AnnealingPath`: a family of unnormalized densities f_beta over chain states; what `anneal` needs.
- `GeometricPath`: the path of a Boltzmann machine (binary or typed layers) from an independent base, with every
  member the estimators, evaluation, resume and the adaptive schedules use.
- `ChainState`: what a resume file saves of a Boltzmann chain and rebuilds (`runtime.resume`).
- `StepProgram`: a path's step with the betas as device tensors, which `anneal` runs many steps per CUDA graph
  (`step_programs`); `GeometricPath.step_program` offers one, or None.
- `TransitionKernel`: (state, beta, generator) -> state, p_beta-invariant and reversible; an `InfoKernel` also
  reports per-step diagnostics (acceptance rates and the like) in a `KernelInfo`, as BlackJAX's step returns
  (state, info): the info travels beside the state, never inside it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Optional, Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor

from raise_eval.models.contracts import BoltzmannModel, Model  # noqa: F401 (the model side, re-exported)

S = TypeVar("S")


@runtime_checkable
class ChainState(Protocol):
    """A Boltzmann chain's state as a resume file keeps it (batch dimensions B on every tensor): the states of
    AIS, RAISE and a DBM's heating (`BoltzmannState`) and of a DBN's heating (`DBNPosteriorState`). (The per-vector
    log f(v) estimates are saved by chunk, so their states need not be one.)

    layers: per layer, the sampled layers' values (*B, n_l), None for summed-out (or clamped-out) layers.
    odd_inputs: per layer, the summed-out layers' unscaled inputs (*B, n_l), None elsewhere (empty where the
        state is rebuilt from `layers` alone, as a DBN posterior's is).
    odd_probs: the summed-out layers' probabilities at the beta named by `probs_key`, or None.
    probs_key: the key of `odd_probs` (`GeometricPath.probs_key`), or None when they hold nothing valid.
    """

    @property
    def layers(self) -> tuple[Optional[Tensor], ...]: ...

    @property
    def odd_inputs(self) -> tuple[Optional[Tensor], ...]: ...

    @property
    def odd_probs(self) -> Optional[tuple[Optional[Tensor], ...]]: ...

    @property
    def probs_key(self) -> Optional[tuple]: ...


@runtime_checkable
class AnnealingPath(Protocol[S]):
    """A family of unnormalized densities f_beta, beta in [0, 1], over states with batch dimensions."""

    def log_density_ratio(self, state: S, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(x) - log f_{beta_from}(x), shaped like the state's batch dimensions."""
        ...

    def transition(self, state: S, beta: float, generator: torch.Generator) -> S:
        """The path's default kernel at `beta`."""
        ...


@runtime_checkable
class GeometricPath(AnnealingPath[S], Protocol[S]):
    """f_beta = f_base^(1 - beta) f^beta from an independent base to a Boltzmann machine, on its even layers.

    Every member below is used by the estimators (AIS, RAISE, the ladder), evaluation (cost model, report), resume
    files and the adaptive schedules: a path offering them serves all of them unchanged.
    """

    model: Any  # a `BoltzmannModel`
    base_biases: Sequence[Tensor]
    clamped: tuple[int, ...]

    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the base, float64."""
        ...

    def at(self, beta: float) -> Any:
        """The model at inverse temperature `beta`."""
        ...

    def with_clamped(self, clamped: Collection[int]) -> GeometricPath[S]:
        """The same path (and probability key) whose kernel keeps the even layers `clamped` fixed."""
        ...

    def probs_key(self, beta: float, state: S) -> Optional[tuple]:
        """The key of odd-layer probabilities computed by this path at `beta` from `state` as it is now."""
        ...

    def state_from_layers(self, layers: Sequence[Optional[Tensor]]) -> S:
        """The state for given even layers (odd entries ignored)."""
        ...

    def sample_base_layer(self, l: int, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        """Exact samples of layer `l` under the base, shaped (*batch_shape, width_l)."""
        ...

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> S:
        """`num_chains` exact samples of the base, batch shape (num_chains,)."""
        ...

    def log_base_prob(self, x: Tensor, l: int) -> Tensor:
        """log p_0(x_l) of layer `l` under the base, float64, shaped (*batch,)."""
        ...

    def log_density(self, state: S, beta: float) -> Tensor:
        """log f_beta(state), odd layers summed out, shaped (*batch,)."""
        ...

    def weight_update(self, state: S, beta_from: float, beta_to: float) -> tuple[Tensor, S]:
        """(log_density_ratio, the state carrying what the update computed for the next transition at beta_to)."""
        ...

    def weight_update_(self, state: S, beta_from: float, beta_to: float) -> tuple[Tensor, S]:
        """`weight_update` writing into the state's own buffers (loops that own their state)."""
        ...

    def transition_(self, state: S, beta: float, generator: torch.Generator) -> S:
        """`transition` writing the new state into `state`'s own tensors."""
        ...

    def clone_state(self, state: S) -> S:
        """A copy of `state` in new tensors that `transition_` and `weight_update_` may overwrite."""
        ...

    def step_program(self, options: Any) -> Optional[StepProgram]:
        """The path's transition and weight update as a `StepProgram` where `options`
        (`step_programs.LoopOptions`) run one on the model's device, else None (the eager loop serves)."""
        ...


@runtime_checkable
class StepProgram(Protocol):
    """A path's annealing step written with the inverse temperatures as 0-d float64 tensors on the device, holding the
    chains' state in tensors of its own, so that `step_programs.run_program` can capture many steps in one CUDA graph.
    `anneal` runs it in place of `transition_` and `weight_update_`: the same chain and weights."""

    device: torch.device
    log_weights: Tensor  # float64, the state's batch shape: accumulated in place

    def begin(
        self, state: Any, log_weights: Optional[Tensor], beta: float, steps: int = 0, start_step: int = 0
    ) -> None:
        """Load `state` (not modified) and the log-weights to add to, at `beta`, for a run of `steps` steps in all,
        `start_step` of them done already (a continued run)."""
        ...

    def finish(self, beta: float) -> Tensor:
        """The log-weights the run was given (or made), holding the run's sums, the run having ended at `beta`."""
        ...

    def step(self, beta_from: Tensor, beta_to: Tensor, generator: torch.Generator) -> None:
        """One transition at beta_from and the weight update to beta_to, in place, every draw from `generator`."""
        ...

    def state(self, beta: float) -> Any:
        """The chains' state as the path's state type (at `beta`, the last step's end)."""
        ...


@runtime_checkable
class TransitionKernel(Protocol[S]):
    """A transition (state, beta, generator) -> state that leaves p_beta invariant and satisfies detailed balance
    (so that the reversed schedule is the exact reversal of the forward chain: RAISE, reverse AIS)."""

    def __call__(self, state: S, beta: float, generator: torch.Generator) -> S: ...


class KernelInfo(Mapping[str, Tensor]):
    """Per-step diagnostics of a kernel by name (e.g. 'acceptance': per-chain acceptance probabilities shaped like
    the state's batch dimensions): read-only, built fresh at each step."""

    def __init__(self, **values: Tensor):
        self._values = dict(values)

    def __getitem__(self, name: str) -> Tensor:
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"KernelInfo({', '.join(self._values)})"


@runtime_checkable
class InfoKernel(TransitionKernel[S], Protocol[S]):
    """A kernel that also reports what each step did: `step(state, beta, generator) -> (state, KernelInfo)`;
    calling it is `step(...)[0]`. `anneal(..., on_info=f)` hands every step's info to f."""

    def step(self, state: S, beta: float, generator: torch.Generator) -> tuple[S, KernelInfo]: ...


# What `anneal` may use of a path (or a kernel) beyond `AnnealingPath`, each declared by implementing it.
@runtime_checkable
class OffersStepProgram(Protocol):
    """A path or kernel that can run its steps as a `StepProgram` (None where it has none for these options)."""

    def step_program(self, options: Any) -> Optional[StepProgram]: ...


@runtime_checkable
class InPlaceTransitions(Protocol[S]):
    """A path whose transition can write into a state the loop owns (`clone_state` makes it)."""

    def clone_state(self, state: S) -> S: ...

    def transition_(self, state: S, beta: float, generator: torch.Generator) -> S: ...


@runtime_checkable
class WeightUpdates(Protocol[S]):
    """A path whose weight update also hands the state on (with what it computed for the next transition)."""

    def weight_update(self, state: S, beta_from: float, beta_to: float) -> tuple[Tensor, S]: ...


@runtime_checkable
class InPlaceWeightUpdates(Protocol[S]):
    """`WeightUpdates` writing into the loop's own state."""

    def weight_update_(self, state: S, beta_from: float, beta_to: float) -> tuple[Tensor, S]: ...


@runtime_checkable
class StartsAtTestVector(Protocol[S]):
    """A path with no hidden units (a fully visible model, a user's energy): RAISE's reverse pass starts at the test
    vector itself, `test_vector_start(data, num_chains, what) -> (state with batch (N, C), log f(v) shaped (N,))`."""

    def test_vector_start(self, data: Tensor, num_chains: int, what: str = "test data") -> tuple[S, Tensor]: ...


@runtime_checkable
class ResumableState(Protocol[S]):
    """A path whose chains a resume file can keep: the file saves a `ChainState`'s record (its layers, odd inputs,
    odd probabilities and the beta they were valid at) and the path rebuilds its state from it,
    `state_from_record({"layers", "odd_inputs", "odd_probs", "probs_beta"}) -> state` (tensors on the run's device).
    A DBN's posterior path returns the saved layers, from which the heating rebuilds the state with v."""

    def state_from_record(self, record: dict) -> Any: ...
