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

from collections.abc import Collection, Sequence
from typing import Optional

import torch
from torch import Tensor

from raise_eval.kernels.block_gibbs import BoltzmannState
from raise_eval.models.boltzmann.buffers import Buffers
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine
from raise_eval.models.sampling import sample_bernoulli_probs_


def collapse_mixed(
    model: MixedBoltzmannMachine,
    layers,
    out: Optional[BoltzmannState] = None,
    codes: Optional[dict] = None,
    sampled: bool = False,
) -> BoltzmannState:
    """The state for given even layers (odd entries ignored): odd layers summed out, their inputs cached (into
    `out`'s input tensors when given; `codes`, by layer, the categorical even layers' codes for the gather route;
    `sampled`: the even layers are the sampler's draws, see `MixedBoltzmannMachine.unscaled_input`)."""
    even = tuple(x if l % 2 == 0 else None for l, x in enumerate(layers))
    inputs = tuple(
        model.unscaled_input(even, l, out=None if out is None else out.odd_inputs[l], codes=codes, sampled=sampled)
        if l % 2 == 1
        else None
        for l in range(model.num_layers)
    )
    return BoltzmannState(even, inputs)


def mixed_gibbs_step(
    model: MixedBoltzmannMachine,
    state: BoltzmannState,
    generator: torch.Generator,
    clamped: Collection[int] = (),
    buffers: Optional[Buffers] = None,
    out: Optional[BoltzmannState] = None,
    odd_probs: Optional[Sequence[Optional[Tensor]]] = None,
) -> BoltzmannState:
    """One sweep odd | even, then even | odd, leaving `model` (at its own temperature) invariant on the even layers
    (with `clamped` even layers kept fixed: p(other even layers | clamped) invariant).

    Args:
        buffers: reusable temporaries for the odd layers' samples (which the step discards) and the samplers.
        out: a state (contiguous tensors of the right shapes, possibly `state` itself) to write the result into;
            without it the result's tensors are new.
        odd_probs: per layer, p(x_l = 1 | even layers) under `model` of a Bernoulli odd layer when already computed
            (the buffer is overwritten by the sample), else None.
    """
    layers = list(state.layers)
    codes: dict[int, Tensor] = {}
    for l in range(1, model.num_layers, 2):
        layer = model.layers[l]
        if odd_probs is not None and odd_probs[l] is not None:
            layers[l] = sample_bernoulli_probs_(odd_probs[l], generator)
            continue
        scope = None if buffers is None else buffers.scope(f"odd{l}")
        inp = state.odd_inputs[l]
        z = None if scope is None else scope.get("natural", inp.shape, inp.dtype, inp.device)
        z = model.natural_input(layers, l, out=z, unscaled_input=inp)
        layers[l], c = layer.sample_natural_(z, model.biases[l], generator, scope)
        if c is not None:
            codes[l] = c
    # Even layers depend only on the odd samples, so `out` may alias `state` from here on.
    for l in range(0, model.num_layers, 2):
        if l not in clamped:
            z = model.natural_input(layers, l, out=None if out is None else out.layers[l], codes=codes, sampled=True)
            scope = None if buffers is None else buffers.scope(f"even{l}")
            layers[l], c = model.layers[l].sample_natural_(z, model.biases[l], generator, scope)
            if c is not None:
                codes[l] = c
        elif out is not None and out.layers[l] is not state.layers[l]:
            layers[l] = out.layers[l].copy_(state.layers[l])
    return collapse_mixed(model, layers, out=out, codes=codes, sampled=True)
