"""Block Gibbs sampling for a chain of binary layers, with the odd layers summed out.

The state keeps the even layers (x_0 = visible, x_2, ...) and, for each odd layer, its input from the even
layers. One step samples every odd layer given the even ones, then every even layer given the odd ones, then
sums the odd layers out again:

    T(x_even' | x_even) = sum_{x_odd} p(x_odd | x_even) p(x_even' | x_odd)

This is reversible with respect to the marginal p(x_even) (it is the data-augmentation kernel), so forward and
reverse annealing use the same step. Clamped even layers (e.g. the visible layer while heating a DBM's hidden
layers) are left unchanged; the step then samples p(x_even \\ clamped | clamped).

For an RBM the state is v with the cached product v W: a step costs exactly two matrix products.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from raise_eval.models.boltzmann.buffers import Buffers
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.models.sampling import sample_bernoulli_probs_


class BoltzmannState(NamedTuple):
    """State of a chain of binary layers with the odd layers summed out.

    layers: per layer, the even layers' values (*batch, n_l); None for odd (summed-out) layers.
    odd_inputs: per layer, for odd layers the unscaled input from the even neighbours (*batch, n_l)
        (x_{l-1} W_{l-1} + x_{l+1} W_l^T, temperature-free so it serves every beta); None for even layers.
    odd_probs: per layer, for odd layers p(x_l = 1 | even layers) (*batch, n_l) under the path and inverse
        temperature named by `probs_key`, which the weight update computed on its way
        (`BoltzmannPath.weight_update`) and the next transition there samples from instead of recomputing them;
        None for even layers, or None altogether.
    probs_key: (the path's token, beta, the state's tensors and their version counters) of `odd_probs`
        (`BoltzmannPath.probs_key`), so that another path, another beta or a state changed since never takes
        them; None when they hold nothing valid (the annealing loop keeps them as buffers of its own state between
        steps). A copy (`clone_state`) drops the key: `BoltzmannPath.clone_state` re-keys a valid one.
    """

    layers: tuple[Optional[Tensor], ...]
    odd_inputs: tuple[Optional[Tensor], ...]
    odd_probs: Optional[tuple[Optional[Tensor], ...]] = None
    probs_key: Optional[tuple] = None

    @property
    def visible(self) -> Tensor:
        return self.layers[0]


def collapse_odd_layers(
    model: LayeredBoltzmannMachine,
    even_layers: list,
    out: Optional[BoltzmannState] = None,
    sampled: Collection[int] = (),
) -> BoltzmannState:
    """The state for given even layers (odd entries ignored): odd layers summed out, their inputs cached
    (written into `out`'s input tensors when given). `sampled`: even layers known to hold samples (0. and 1.
    only), which lets an odd layer whose neighbours all are take the table route for its products."""
    layers = tuple(x if l % 2 == 0 else None for l, x in enumerate(even_layers))
    inputs = tuple(
        model.unscaled_input(
            layers,
            l,
            out=None if out is None else out.odd_inputs[l],
            sampled=all(n in sampled for n in (l - 1, l + 1) if 0 <= n < model.num_layers),
        )
        if l % 2 == 1
        else None
        for l in range(model.num_layers)
    )
    return BoltzmannState(layers, inputs)


def block_gibbs_step(
    model: LayeredBoltzmannMachine,
    state: BoltzmannState,
    generator: torch.Generator,
    clamped: Collection[int] = (),
    scratch: Optional[Buffers] = None,
    out: Optional[BoltzmannState] = None,
    odd_probs: Optional[Sequence[Optional[Tensor]]] = None,
) -> BoltzmannState:
    """One sweep odd | even, then even | odd, leaving `model` (at its own temperature) invariant on the even layers.

    Args:
        model: the model at the step's temperature (e.g. `base_model.annealed(beta, base_biases)`).
        state: current even layers and cached odd-layer inputs.
        generator: source of randomness.
        clamped: indices of even layers to keep fixed.
        scratch: buffers for the odd-layer samples, which the step discards.
        out: a state (contiguous tensors of the right shapes, possibly `state` itself) to write the result into;
            without it the result's tensors are new.
        odd_probs: per layer, p(x_l = 1 | even layers) under `model` for odd layers when already computed (the
            buffer is overwritten by the sample), else None.
    Returns:
        the new state (odd layers summed out again, inputs recomputed).
    """
    layers = list(state.layers)
    for l in range(1, model.num_layers, 2):
        if odd_probs is not None and odd_probs[l] is not None:
            layers[l] = sample_bernoulli_probs_(odd_probs[l], generator)
            continue
        inp = state.odd_inputs[l]
        buf = None if scratch is None else scratch.like(f"odd{l}", inp.shape, inp)
        layers[l] = model.sample_layer(layers, l, generator, unscaled_input=inp, out=buf)
    # Even layers depend only on the odd samples, so `out` may alias `state` from here on.
    # The odd layers are samples now (0. and 1.), which admits the table route for the even layers' products.
    sampled = [l for l in range(0, model.num_layers, 2) if l not in clamped]
    for l in range(0, model.num_layers, 2):
        if l not in clamped:
            out_l = None if out is None else out.layers[l]
            layers[l] = model.sample_layer(layers, l, generator, out=out_l, sampled=True)
        elif out is not None and out.layers[l] is not state.layers[l]:
            layers[l] = out.layers[l].copy_(state.layers[l])
    return collapse_odd_layers(model, layers, out=out, sampled=sampled)


def clone_state(state: BoltzmannState) -> BoltzmannState:
    """A copy with new contiguous tensors (the odd-layer probabilities too, when the state has them)."""

    def copy(x):
        return None if x is None else x.clone(memory_format=torch.contiguous_format)

    probs = None if state.odd_probs is None else tuple(copy(x) for x in state.odd_probs)
    return BoltzmannState(tuple(copy(x) for x in state.layers), tuple(copy(x) for x in state.odd_inputs), probs, None)
