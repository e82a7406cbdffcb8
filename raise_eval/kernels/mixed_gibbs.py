"""Block Gibbs sampling for a chain of typed layers (`MixedBoltzmannMachine`: Gaussian, categorical, spin,
Bernoulli), with the odd layers summed out: the kernel of `raise_eval.paths.mixed.MixedPath`.

The state (a `BoltzmannState`, as for binary machines) keeps the even layers and, for each odd layer, its unscaled
input from the even ones. One step samples every odd layer given the even ones, then every even layer given the odd
ones (each layer's units are independent given its neighbours, and `Layer.sample` draws them exactly), then sums
the odd layers out again:

    T(x_even' | x_even) = sum_{x_odd} p(x_odd | x_even) p(x_even' | x_odd)   (an integral for Gaussian layers)

the data-augmentation kernel, reversible with respect to p(x_even), so forward and reverse annealing use the same
step. Clamped even layers (the visible layer while heating a DBM's hidden layers) are left unchanged.
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from raise_eval.kernels.block_gibbs import BoltzmannState
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine


def collapse_mixed(model: MixedBoltzmannMachine, layers) -> BoltzmannState:
    """The state for given even layers (odd entries ignored): odd layers summed out, their inputs cached."""
    even = tuple(x if l % 2 == 0 else None for l, x in enumerate(layers))
    inputs = tuple(model.unscaled_input(even, l) if l % 2 == 1 else None for l in range(model.num_layers))
    return BoltzmannState(even, inputs)


def mixed_gibbs_step(
    model: MixedBoltzmannMachine,
    state: BoltzmannState,
    generator: torch.Generator,
    clamped: Collection[int] = (),
) -> BoltzmannState:
    """One sweep odd | even, then even | odd, leaving `model` (at its own temperature) invariant on the even layers
    (with `clamped` even layers kept fixed: p(other even layers | clamped) invariant). Returns a new state."""
    layers = list(state.layers)
    for l in range(1, model.num_layers, 2):
        layers[l] = model.sample_layer(layers, l, generator, unscaled_input=state.odd_inputs[l])
    for l in range(0, model.num_layers, 2):
        if l not in clamped:
            layers[l] = model.sample_layer(layers, l, generator)
    return collapse_mixed(model, layers)
