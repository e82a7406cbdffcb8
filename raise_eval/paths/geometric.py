"""The geometric path of a Boltzmann machine, written once for binary and typed layers.

f_beta(x) = f_base(x)^(1 - beta) f(x)^beta from an independent base (parameters `base_biases`, one per layer) to
the model: the chain at `model.annealed(beta, base_biases)`. The state space is the even layers with the odd ones
summed out (for an RBM, the visible vector), so the path's densities are the exact marginals f_beta(x_even).

`GeometricBoltzmannPath` holds everything the two layer forms share: the cache of annealed models, clamping, the key
of the odd-layer probabilities a weight update hands to the next transition, the state's copies, the weight update
and transitions around the hooks below. `BoltzmannPath` (binary layers: products and C kernels of the binary fast
routes, `kernels.block_gibbs`) and `MixedPath` (typed layers, `kernels.mixed_gibbs`) supply the hooks:

- `_check_base(model, base)`: refuse base parameters that do not fit the model (their count too), naming them.
- `_prepare()`: per-path constants computed once (after model, base and clamping are set).
- `log_partition_initial`, `sample_base_layer`, `log_base_prob`: the independent base.
- `_collapse(layers)`: the state of given even layers (odd inputs computed).
- `_log_ratio(state, beta_from, beta_to, keep)`: (log f_to - log f_from, the state), keeping p(odd | even) at beta_to
  when `keep` is 'new' (new tensors) or 'own' (the state's buffers) and the update computed them.
- `_gibbs(model_at_beta, state, generator, clamped, out, odd_probs)`: one block Gibbs step (into `out` when given).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.kernels.block_gibbs import BoltzmannState, clone_state
from raise_eval.models.boltzmann.buffers import Buffers


class GeometricBoltzmannPath:
    """Geometric path from an independent base (beta = 0) to `model` (beta = 1) on the even layers.

    Args:
        model: the target Boltzmann machine (`models.contracts.BoltzmannModel`).
        base_biases: the base's parameters, one tensor per layer (the uniform base of the subclass when None).
        clamped: even layers the kernel leaves unchanged (e.g. (0,) to anneal p_beta(hidden | v) while heating a
            DBM's hidden layers); the densities are unchanged.
    """

    def __init__(self, model, base_biases: Optional[Sequence[Tensor]] = None, clamped: Collection[int] = ()):
        base = self._default_base(model) if base_biases is None else list(base_biases)
        self._check_base(model, base)
        for l in clamped:
            if not (0 <= l < model.num_layers and l % 2 == 0):
                raise ValueError(f"only even layers (kept in the state) can be clamped; got layer {l}")
        self.model = model
        self.base_biases = [torch.as_tensor(c).to(dtype=model.dtype, device=model.device) for c in base]
        self.clamped = tuple(sorted(clamped))
        self._buffers = Buffers()
        self._at_cache: dict[float, Any] = {}
        # Names this path (model and base) in the probabilities a state carries: no other path takes them.
        self._token = object()
        self._prepare()

    # ---------------------------------------------------------------- hooks (see the module docstring)
    @staticmethod
    def _default_base(model) -> list[Tensor]:
        raise NotImplementedError

    def _check_base(self, model, base: list) -> None:
        raise NotImplementedError

    def _prepare(self) -> None:
        pass

    def _collapse(self, layers: list) -> BoltzmannState:
        raise NotImplementedError

    def _log_ratio(self, state: BoltzmannState, beta_from: float, beta_to: float, keep: Optional[str]):
        raise NotImplementedError

    def _gibbs(self, at, state, generator, clamped, out, odd_probs) -> BoltzmannState:
        raise NotImplementedError

    def step_program(self, options):
        """This path's annealing step as a step program (`contracts.StepProgram`) where `options`
        (`step_programs.LoopOptions`) run one on the model's device, else None (the eager loop)."""
        return None

    # ---------------------------------------------------------------- the path
    def at(self, beta: float):
        """The model at inverse temperature `beta` (shares the weight tensors)."""
        # The loop asks for each beta three times (transition, then both ends of two weight updates): keep two.
        cached = self._at_cache.get(beta)
        if cached is None:
            cached = self.model.annealed(beta, self.base_biases)
            if len(self._at_cache) >= 2:
                self._at_cache.pop(next(iter(self._at_cache)))
            self._at_cache[beta] = cached
        return cached

    def with_clamped(self, clamped: Collection[int]):
        """The same path (model and base) whose kernel keeps the even layers `clamped` fixed. Clamping even layers
        leaves p(odd | even) alone, so the two paths share the odd-layer probabilities a state carries."""
        path = type(self)(self.model, self.base_biases, clamped=clamped)
        path._token = self._token
        return path

    def probs_key(self, beta: float, state: BoltzmannState) -> Optional[tuple]:
        """The key (`BoltzmannState.probs_key`) of odd-layer probabilities computed by this path at `beta` from
        `state` as it is now: (the path's token, beta, the identity and version counter of each of the state's
        tensors), so that a state changed in place, or a new state built around the old probabilities, never
        passes for the one they were computed from. None where tensors keep no version counter (inference
        mode): the probabilities are then recomputed, with the same bits."""
        stamp = _stamp(state)
        return None if stamp is None else (self._token, float(beta), stamp)

    # ---------------------------------------------------------------- states
    def state_from_layers(self, layers: Sequence[Optional[Tensor]]) -> BoltzmannState:
        """The state for given even layers (odd entries are ignored)."""
        return self._collapse(list(layers))

    def state_from_record(self, record: dict) -> BoltzmannState:
        """The state a resume file saved (`contracts.ResumableState`): its layers, odd inputs and, where they were
        valid when saved, the odd layers' probabilities at the saved beta (keyed again for this path)."""
        state = BoltzmannState(record["layers"], record["odd_inputs"], record["odd_probs"])
        if record["probs_beta"] is not None:  # the probabilities were valid for this state when it was saved
            state = state._replace(probs_key=self.probs_key(record["probs_beta"], state))
        return state

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> BoltzmannState:
        """`num_chains` exact samples of the base distribution p_0, batch shape (num_chains,)."""
        layers = [
            self.sample_base_layer(l, (num_chains,), generator) if l % 2 == 0 else None
            for l in range(self.model.num_layers)
        ]
        return self.state_from_layers(layers)

    def clone_state(self, state: BoltzmannState) -> BoltzmannState:
        """A copy of `state` with new contiguous tensors (what `transition_` may overwrite), with buffers for the
        odd-layer probabilities of `weight_update_` (copied, and still valid, when the state has them)."""
        key, source = state.probs_key, state
        state = clone_state(state)
        if key is not None and key[2] == _stamp(source):  # valid for the source: valid for its copy
            state = state._replace(probs_key=(*key[:2], _stamp(state)))
        else:
            state = state._replace(probs_key=None)
        if state.odd_probs is None:
            buffers = tuple(None if inp is None else torch.empty_like(inp) for inp in state.odd_inputs)
            state = state._replace(odd_probs=buffers, probs_key=None)
        return state

    # ---------------------------------------------------------------- densities and kernel
    def log_density(self, state: BoltzmannState, beta: float) -> Tensor:
        """log f_beta(x_even), odd layers summed out, shaped (*batch,)."""
        return self.at(beta).log_unnormalized_marginal(state.layers, state.odd_inputs)

    def log_density_ratio(self, state: BoltzmannState, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(x) - log f_{beta_from}(x), shaped (*batch,)."""
        return self._log_ratio(state, beta_from, beta_to, None)[0]

    def weight_update(self, state: BoltzmannState, beta_from: float, beta_to: float) -> tuple[Tensor, BoltzmannState]:
        """(log_density_ratio, the state carrying p(odd | even) at beta_to in new tensors when the weight update
        computed them on its way): a transition at beta_to from the returned state samples from them instead of
        recomputing them, with the same bits. `state` is not modified."""
        return self._log_ratio(state, beta_from, beta_to, "new")

    def weight_update_(self, state: BoltzmannState, beta_from: float, beta_to: float) -> tuple[Tensor, BoltzmannState]:
        """`weight_update` writing the probabilities into the state's own `odd_probs` buffers (see `clone_state`),
        for loops that own their state (`anneal`)."""
        return self._log_ratio(state, beta_from, beta_to, "own")

    def _probs_at(self, state: BoltzmannState, beta: float):
        """The state's odd-layer probabilities if this path computed them at `beta`, else None."""
        if state.odd_probs is None or state.probs_key is None or state.probs_key != self.probs_key(beta, state):
            return None
        return state.odd_probs

    def transition(
        self, state: BoltzmannState, beta: float, generator: torch.Generator, clamped: Collection[int] = ()
    ) -> BoltzmannState:
        """Block Gibbs step at `beta` (reversible, leaves p_beta(x_even) invariant; with clamped layers, p_beta of
        the other even layers given them). `state` is not modified."""
        probs = self._probs_at(state, beta)
        if probs is not None:  # the sampler overwrites the probabilities it is given: hand it copies
            probs = [None if p is None else p.clone() for p in probs]
        return self._gibbs(self.at(beta), state, generator, tuple(self.clamped) + tuple(clamped), None, probs)

    def transition_(self, state: BoltzmannState, beta: float, generator: torch.Generator) -> BoltzmannState:
        """`transition` writing the new state into `state`'s own tensors (no allocation per step).

        For loops that own their state (`anneal` clones the start once with `clone_state`); `state` is
        overwritten, its probability buffers included (they then hold the odd samples: probs_key is None).
        """
        new = self._gibbs(self.at(beta), state, generator, self.clamped, state, self._probs_at(state, beta))
        return new._replace(odd_probs=state.odd_probs, probs_key=None)


def _stamp(state: BoltzmannState) -> Optional[tuple]:
    """The identity and version counter of each of the state's tensors (None in inference mode, where tensors keep
    no version counter)."""
    try:
        return tuple((id(t), t._version) for t in (*state.layers, *state.odd_inputs) if t is not None)
    except RuntimeError:
        return None
