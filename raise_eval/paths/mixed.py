"""The geometric path from an independent base distribution to a Boltzmann machine of typed layers
(`MixedBoltzmannMachine`: Gaussian, categorical, spin and Bernoulli layers in any pairing).

f_beta(x) = f_base(x)^(1 - beta) f(x)^beta, f_base independent units with parameters c_l: the chain with weights
beta W and parameters (1 - beta) c + beta theta (`MixedBoltzmannMachine.annealed`). The state space is the even
layers with the odd ones summed out (for an RBM, the visible vector), as for binary machines (`BoltzmannPath`), and
the path offers the same methods, so that AIS, RAISE (exact posterior for RBMs, heating for DBMs), the adaptive
pilot, sharding and resume files run on it unchanged.

Bases: `mixed_uniform_base` (uniform discrete layers; a Gaussian layer's own N(mu, sigma^2), the weights off) and
`mixed_data_base` (the visible layer fitted to the training data's sufficient statistics, `visible_statistics`:
frequencies of 0/1, ±1 or each state, a Gaussian's mean and variance; hidden layers as in the uniform base).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Optional

import torch
from torch import Tensor

from raise_eval.kernels.block_gibbs import BoltzmannState
from raise_eval.kernels.mixed_gibbs import collapse_mixed, mixed_gibbs_step
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine


def is_mixed(model) -> bool:
    """Whether `model` is a machine of typed layers (not the binary `LayeredBoltzmannMachine`)."""
    return isinstance(model, MixedBoltzmannMachine)


def mixed_uniform_base(model: MixedBoltzmannMachine) -> list[Tensor]:
    """Base parameters of init='uniform': `Layer.uniform_params` of every layer."""
    return [layer.uniform_params(b) for layer, b in zip(model.layers, model.biases)]


def visible_statistics(model: MixedBoltzmannMachine, train_data: Tensor) -> Tensor:
    """Means over the training vectors (in any form `prepare_visible` reads) of the visible layer's sufficient
    statistics, float64 shaped like its parameters: what `mixed_data_base` fits the base to (an evaluation's
    `train_pixel_means` for such a model)."""
    x = model.prepare_visible(train_data, "training data")
    return model.layers[0].statistics(x)


def mixed_data_base(model: MixedBoltzmannMachine, statistics: Tensor) -> list[Tensor]:
    """Base parameters fitted to the training data: the visible layer's from `statistics` (`visible_statistics`),
    the others as in `mixed_uniform_base`."""
    layer = model.layers[0]
    stats = layer.check_statistics(statistics, "the training statistics (train_pixel_means)")
    visible = layer.base_params(stats.to(model.device), model.biases[0])
    return [visible] + mixed_uniform_base(model)[1:]


class MixedPath:
    """Geometric path from an independent base (beta = 0) to `model` (beta = 1) on the even layers.

    Args:
        model: the target machine.
        base_biases: the base's parameters per layer (`mixed_uniform_base` when None).
        clamped: even layers the kernel leaves unchanged (e.g. (0,) while heating a DBM's hidden layers).
    """

    def __init__(
        self,
        model: MixedBoltzmannMachine,
        base_biases: Optional[Sequence[Tensor]] = None,
        clamped: Collection[int] = (),
    ):
        base = mixed_uniform_base(model) if base_biases is None else list(base_biases)
        if len(base) != model.num_layers:
            raise ValueError(f"need {model.num_layers} base parameter tensors, got {len(base)}")
        for l, (layer, c) in enumerate(zip(model.layers, base)):
            c = torch.as_tensor(c)
            layer.check_params(c.to(model.dtype), f"base parameters {l}")
            if not bool(torch.isfinite(c).all()):
                raise ValueError(f"base parameters {l} have NaN or infinite entries")
        for l in clamped:
            if not (0 <= l < model.num_layers and l % 2 == 0):
                raise ValueError(f"only even layers (kept in the state) can be clamped; got layer {l}")
        self.model = model
        self.base_biases = [torch.as_tensor(c).to(dtype=model.dtype, device=model.device) for c in base]
        self.clamped = tuple(sorted(clamped))
        # The parameters move along (target - base) at unit speed in beta: steps are taken as (beta' - beta) times
        # this direction, never as a difference of two nearly equal interpolated values.
        self._direction = [b - c for b, c in zip(model.biases, self.base_biases)]
        self._at_cache: dict[float, MixedBoltzmannMachine] = {}

    def at(self, beta: float) -> MixedBoltzmannMachine:
        """The model at inverse temperature `beta` (shares the weight tensors)."""
        cached = self._at_cache.get(beta)
        if cached is None:
            cached = self.model.annealed(beta, self.base_biases)
            if len(self._at_cache) >= 2:
                self._at_cache.pop(next(iter(self._at_cache)))
            self._at_cache[beta] = cached
        return cached

    def with_clamped(self, clamped: Collection[int]) -> MixedPath:
        """The same path whose kernel keeps the even layers `clamped` fixed."""
        return MixedPath(self.model, self.base_biases, clamped=clamped)

    def probs_key(self, beta: float, state: BoltzmannState) -> None:
        """States of this path carry no precomputed probabilities (`BoltzmannPath.probs_key`'s protocol)."""
        return None

    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the base (independent units: a sum of the layers' log-normalizers), in float64."""
        return float(sum(layer.log_normalizer(c.double()) for layer, c in zip(self.model.layers, self.base_biases)))

    # ---------------------------------------------------------------- states
    def state_from_layers(self, layers: Sequence[Optional[Tensor]]) -> BoltzmannState:
        """The state for given even layers (odd entries are ignored)."""
        return collapse_mixed(self.model, list(layers))

    def sample_base_layer(self, l: int, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        """Exact samples of layer `l` under the base, shaped (*batch_shape, width_l)."""
        return self.model.layers[l].sample(self.base_biases[l], None, generator, batch_shape=tuple(batch_shape))

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> BoltzmannState:
        """`num_chains` exact samples of the base distribution p_0, batch shape (num_chains,)."""
        layers = [
            self.sample_base_layer(l, (num_chains,), generator) if l % 2 == 0 else None
            for l in range(self.model.num_layers)
        ]
        return self.state_from_layers(layers)

    def log_base_prob(self, x: Tensor, l: int) -> Tensor:
        """log p_0(x_l) of layer `l` under the base, float64, shaped (*batch,)."""
        layer, c = self.model.layers[l], self.base_biases[l].double()
        return layer.log_potential(c, x.double()) - layer.log_normalizer(c)

    # ---------------------------------------------------------------- densities and kernel
    def log_density(self, state: BoltzmannState, beta: float) -> Tensor:
        """log f_beta(x_even), odd layers summed out, float64, shaped (*batch,)."""
        return self.at(beta).log_unnormalized_marginal(state.layers, state.odd_inputs)

    def log_density_ratio(self, state: BoltzmannState, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(x) - log f_{beta_from}(x), float64, shaped (*batch,), term by term: each even layer's
        potential changes linearly in beta, each odd layer's log-normalizer by `Layer.log_normalizer_increment`
        with the steps (beta_to - beta_from) (theta - c) and (beta_to - beta_from) s u."""
        model, at = self.model, self.at(beta_from)
        step = beta_to - beta_from
        total = None
        for l, x in enumerate(state.layers):
            layer = model.layers[l]
            if x is not None:
                term = layer.potential_increment(at.biases[l], step * self._direction[l], x)
            else:
                u = state.odd_inputs[l]
                scale = model.weight_scale
                term = layer.log_normalizer_increment(
                    at.biases[l], (beta_from * scale) * u, step * self._direction[l], (step * scale) * u
                )
            total = term if total is None else total + term
        return total

    def transition(
        self, state: BoltzmannState, beta: float, generator: torch.Generator, clamped: Collection[int] = ()
    ) -> BoltzmannState:
        """Block Gibbs step at `beta` (reversible, leaves p_beta(x_even) invariant). `state` is not modified."""
        return mixed_gibbs_step(self.at(beta), state, generator, clamped=tuple(self.clamped) + tuple(clamped))


def make_path(model, base_biases: Optional[Sequence[Tensor]] = None, clamped: Collection[int] = ()):
    """The geometric path of a Boltzmann machine: `MixedPath` for typed layers, `BoltzmannPath` for binary ones."""
    if is_mixed(model):
        return MixedPath(model, base_biases, clamped)
    from raise_eval.paths.boltzmann import BoltzmannPath

    return BoltzmannPath(model, base_biases, clamped)
