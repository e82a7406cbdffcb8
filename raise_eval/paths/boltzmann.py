"""The geometric path from an independent base distribution to a layered Boltzmann machine.

f_beta(x) = f_base(x)^(1 - beta) f(x)^beta with f_base(x) = exp(sum_l c_l . x_l): the chain with weights beta W
and biases (1 - beta) c + beta b. The state space is the even layers (odd layers summed out), so for an RBM it is
the visible vector, and the path's densities are the exact marginals f_beta(v) = sum_h f_beta(v, h).

Base distributions: `uniform_base` (c = 0) and `data_base_rates` (visible biases = logit of the clipped training-set
pixel means, every hidden unit uniform), the two initial distributions of the RAISE paper.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.kernels.block_gibbs import (
    BoltzmannState,
    Scratch,
    block_gibbs_step,
    clone_state,
    collapse_odd_layers,
)
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine


def uniform_base(model: LayeredBoltzmannMachine) -> list[Tensor]:
    """Base biases of the uniform distribution over every layer (all zeros)."""
    return [torch.zeros_like(b) for b in model.biases]


def data_base_rates(model: LayeredBoltzmannMachine, train_data: Tensor, eps: float = 1e-3) -> list[Tensor]:
    """Base biases of the data-base-rate distribution (Salakhutdinov & Murray, 2008).

    Visible biases are logit(clip(mean of train_data, eps, 1 - eps)); hidden layers are uniform.

    Args:
        train_data: binary training vectors shaped (N, n_visible).
        eps: clipping of the pixel means, so that pixels never on (or always on) get finite biases.
    """
    if train_data.dim() != 2 or train_data.shape[1] != model.n_visible:
        raise ValueError(f"base rates need training data shaped (N, {model.n_visible}), got {tuple(train_data.shape)}")
    if train_data.shape[0] == 0:
        raise ValueError("base rates need at least one training vector")
    if not 0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5), got {eps}")
    mean = train_data.double().mean(0).clamp(eps, 1 - eps)
    visible = torch.log(mean) - torch.log1p(-mean)
    return [visible.to(model.dtype).to(model.device)] + [torch.zeros_like(b) for b in model.biases[1:]]


class BoltzmannPath:
    """Geometric path from an independent base (beta = 0) to `model` (beta = 1) on the even layers.

    Args:
        model: the target Boltzmann machine.
        base_biases: one bias vector per layer for the independent base distribution; uniform when None.
        clamped: even layers the kernel leaves unchanged (e.g. (0,) to anneal p_beta(hidden | v) while heating a
            DBM's hidden layers); the densities are unchanged.
    """

    def __new__(cls, model, *args, **kwargs):
        # Hook for machines of typed layers (Gaussian, categorical, spin): their path is raise_eval.paths.mixed's,
        # so that BoltzmannPath(model) serves every Boltzmann machine. Binary machines are untouched.
        if model.typed_layers:
            from raise_eval.paths.mixed import MixedPath

            return MixedPath(model, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        model: LayeredBoltzmannMachine,
        base_biases: Optional[Sequence[Tensor]] = None,
        clamped: Collection[int] = (),
    ):
        base = uniform_base(model) if base_biases is None else list(base_biases)
        if len(base) != model.num_layers:
            raise ValueError(f"need {model.num_layers} base bias vectors, got {len(base)}")
        for l, (c, b) in enumerate(zip(base, model.biases)):
            if c.shape != b.shape:
                raise ValueError(f"base bias {l} has shape {tuple(c.shape)}, the model's has {tuple(b.shape)}")
            if not bool(torch.isfinite(c).all()):
                raise ValueError(f"base bias {l} has NaN or infinite entries")
        for l in clamped:
            if not (0 <= l < model.num_layers and l % 2 == 0):
                raise ValueError(f"only even layers (kept in the state) can be clamped; got layer {l}")
        self.model = model
        self.base_biases = [c.to(dtype=model.dtype, device=model.device) for c in base]
        self.clamped = tuple(sorted(clamped))
        self._scratch = Scratch()
        self._at_cache: dict[float, LayeredBoltzmannMachine] = {}
        # Names this path (model and base) in the probabilities a state carries: no other path takes them.
        self._token = object()
        # d(logit)/d(beta) of a summed-out unit is s u_j + b_j - c_j, with |u_j| <= sum of |weights| into unit j
        # (binary neighbours): a host-side bound on how far a step moves the logits, computed once.
        self._logit_speed = [None] * model.num_layers
        for l in range(1, model.num_layers, 2):
            fan_in = model.weights[l - 1].abs().sum(0)
            if l + 1 < model.num_layers:
                fan_in = fan_in + model.weights[l].abs().sum(1)
            speed = abs(model.weight_scale) * fan_in.max() + (model.biases[l] - self.base_biases[l]).abs().max()
            self._logit_speed[l] = float(speed)

    def at(self, beta: float) -> LayeredBoltzmannMachine:
        """The model at inverse temperature `beta` (shares the weight tensors)."""
        # The loop asks for each beta three times (transition, then both ends of two weight updates): keep two.
        cached = self._at_cache.get(beta)
        if cached is None:
            cached = self.model.annealed(beta, self.base_biases)
            if len(self._at_cache) >= 2:
                self._at_cache.pop(next(iter(self._at_cache)))
            self._at_cache[beta] = cached
        return cached

    def with_clamped(self, clamped: Collection[int]) -> BoltzmannPath:
        """The same path (model and base) whose kernel keeps the even layers `clamped` fixed. Clamping even layers
        leaves p(odd | even) alone, so the two paths share the odd-layer probabilities a state carries."""
        path = BoltzmannPath(self.model, self.base_biases, clamped=clamped)
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

    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the base: every unit independent, sum of softplus(c), in float64."""
        return float(sum(F.softplus(c.double()).sum() for c in self.base_biases))

    # ---------------------------------------------------------------- states
    def state_from_layers(self, layers: Sequence[Optional[Tensor]]) -> BoltzmannState:
        """The state for given even layers (odd entries are ignored)."""
        return collapse_odd_layers(self.model, list(layers))

    def sample_base_layer(self, l: int, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        """Exact samples of layer `l` under the base p_0 (its units are independent), shaped (*batch_shape, n_l)."""
        c = self.base_biases[l]
        u = torch.rand((*batch_shape, c.shape[0]), generator=generator, device=c.device, dtype=c.dtype)
        return (u < torch.sigmoid(c)).to(c.dtype)

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> BoltzmannState:
        """`num_chains` exact samples of the base distribution p_0, batch shape (num_chains,)."""
        layers = [
            self.sample_base_layer(l, (num_chains,), generator) if l % 2 == 0 else None
            for l in range(self.model.num_layers)
        ]
        return self.state_from_layers(layers)

    def log_base_prob(self, x: Tensor, l: int) -> Tensor:
        """log p_0(x_l) of layer `l` under the base (independent units), float64, shaped (*batch,)."""
        c = self.base_biases[l].double()
        return torch.mv(x.double().reshape(-1, c.shape[0]), c).reshape(x.shape[:-1]) - float(F.softplus(c).sum())

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

    def _log_ratio(self, state: BoltzmannState, beta_from: float, beta_to: float, keep_probs: Optional[str]):
        odd = [l for l, inp in enumerate(state.odd_inputs) if inp is not None]
        step = abs(beta_to - beta_from)
        bounds = [None if speed is None else step * speed for speed in self._logit_speed]
        small = [bound is not None and bound <= 2.0 for bound in bounds]
        keep = keep_probs is not None and all(small[l] for l in odd)
        buffers, probs = [], [None] * self.model.num_layers
        for l in odd:
            inp = state.odd_inputs[l]
            if keep and keep_probs == "own" and state.odd_probs is not None:
                probs[l] = state.odd_probs[l]
            elif keep:
                probs[l] = torch.empty_like(inp)
            else:
                probs[l] = self._scratch.get(f"ratio_to{l}", inp.shape, inp)
            buffers += [
                probs[l],
                self._scratch.get(f"ratio_from{l}", inp.shape, inp),
                self._scratch.get(f"ratio_float64_{l}", inp.shape, inp, dtype=torch.float64),
                self._scratch.get(f"ratio_series{l}", inp.shape, inp),
            ]
        ratio = self.at(beta_from).log_ratio_to(
            self.at(beta_to), state.layers, state.odd_inputs, buffers=buffers, small_steps=small, step_bounds=bounds
        )
        # With the small-step form the first buffer of each odd layer now holds p(x_l = 1 | x_even) at beta_to:
        # exactly what a transition at beta_to from this state samples first (the annealing loop's next step).
        if keep:
            return ratio, state._replace(odd_probs=tuple(probs), probs_key=self.probs_key(beta_to, state))
        return ratio, state._replace(probs_key=None)

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
        return block_gibbs_step(
            self.at(beta),
            state,
            generator,
            clamped=tuple(self.clamped) + tuple(clamped),
            scratch=self._scratch,
            odd_probs=probs,
        )

    def transition_(self, state: BoltzmannState, beta: float, generator: torch.Generator) -> BoltzmannState:
        """`transition` writing the new state into `state`'s own tensors (no allocation per step).

        For loops that own their state (`anneal` clones the start once with `clone_state`); `state` is
        overwritten, its probability buffers included (they then hold the odd samples: probs_key is None).
        """
        new = block_gibbs_step(
            self.at(beta),
            state,
            generator,
            clamped=self.clamped,
            scratch=self._scratch,
            out=state,
            odd_probs=self._probs_at(state, beta),
        )
        return new._replace(odd_probs=state.odd_probs, probs_key=None)

    def clone_state(self, state: BoltzmannState) -> BoltzmannState:
        """A copy of `state` with new contiguous tensors (what `transition_` may overwrite), with buffers for the
        odd-layer probabilities of `weight_update_` (copied when the state has them)."""
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


def _stamp(state: BoltzmannState) -> Optional[tuple]:
    """The identity and version counter of each of the state's tensors (None in inference mode, where tensors keep
    no version counter)."""
    try:
        return tuple((id(t), t._version) for t in (*state.layers, *state.odd_inputs) if t is not None)
    except RuntimeError:
        return None
