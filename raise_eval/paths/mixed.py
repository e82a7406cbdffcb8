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
import torch.nn.functional as F
from torch import Tensor

from raise_eval.kernels.block_gibbs import BoltzmannState
from raise_eval.kernels.mixed_gibbs import collapse_mixed, mixed_gibbs_step
from raise_eval.models.boltzmann.buffers import Buffers
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine
from raise_eval.models.boltzmann.supports import BINARY
from raise_eval.models.numerics import expm1_
from raise_eval.paths.fully_visible import site_frequencies
from raise_eval.paths.geometric import GeometricBoltzmannPath


def mixed_uniform_base(model: MixedBoltzmannMachine) -> list[Tensor]:
    """Base parameters of init='uniform': `Layer.uniform_params` of every layer."""
    return [layer.uniform_params(b) for layer, b in zip(model.layers, model.biases)]


def visible_statistics(model: MixedBoltzmannMachine, train_data: Tensor) -> Tensor:
    """Means over the training vectors (in any form `prepare_visible` reads) of the visible layer's sufficient
    statistics, float64 shaped like its parameters: what `mixed_data_base` fits the base to (an evaluation's
    `train_pixel_means` for such a model). For a fully visible model (its declared family), each site's state
    frequencies (L, q) (`paths.fully_visible.site_frequencies`)."""
    if model.family == "fully-visible":
        return site_frequencies(model, train_data)
    x = model.prepare_visible(train_data, "training data")
    return model.layers[0].statistics(x)


def mixed_data_base(model: MixedBoltzmannMachine, statistics: Tensor) -> list[Tensor]:
    """Base parameters fitted to the training data: the visible layer's from `statistics` (`visible_statistics`),
    the others as in `mixed_uniform_base`."""
    layer = model.layers[0]
    stats = layer.check_statistics(statistics, "the training statistics (train_pixel_means)")
    visible = layer.base_params(stats.to(model.device), model.biases[0])
    return [visible] + mixed_uniform_base(model)[1:]


class MixedPath(GeometricBoltzmannPath):
    """Geometric path from an independent base (beta = 0) to `model` (beta = 1) on the even layers, for typed layers
    (`paths.geometric` has what every Boltzmann path shares; this class the typed base and weight update). The
    weight update is float64 and term by term: each even layer's potential changes linearly in beta, each odd
    layer's log-normalizer by `Layer.log_normalizer_increment` with the steps (beta_to - beta_from) (theta - c) and
    (beta_to - beta_from) s u.

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
        super().__init__(model, base_biases, clamped)

    @staticmethod
    def _default_base(model) -> list[Tensor]:
        return mixed_uniform_base(model)

    def _check_base(self, model, base: list) -> None:
        if len(base) != model.num_layers:
            raise ValueError(f"need {model.num_layers} base parameter tensors, got {len(base)}")
        for l, (layer, c) in enumerate(zip(model.layers, base)):
            c = torch.as_tensor(c)
            layer.check_params(c.to(model.dtype), f"base parameters {l}")
            if not bool(torch.isfinite(c).all()):
                raise ValueError(f"base parameters {l} have NaN or infinite entries")

    def _prepare(self) -> None:
        # The parameters move along (target - base) at unit speed in beta: steps are taken as (beta' - beta) times
        # this direction, never as a difference of two nearly equal interpolated values.
        self._direction = [b - c for b, c in zip(self.model.biases, self.base_biases)]

    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the base (independent units: a sum of the layers' log-normalizers), in float64."""
        return float(sum(layer.log_normalizer(c.double()) for layer, c in zip(self.model.layers, self.base_biases)))

    def _collapse(self, layers: list) -> BoltzmannState:
        return collapse_mixed(self.model, layers)

    def sample_base_layer(self, l: int, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        """Exact samples of layer `l` under the base, shaped (*batch_shape, width_l)."""
        return self.model.layers[l].sample(self.base_biases[l], None, generator, batch_shape=tuple(batch_shape))

    def log_base_prob(self, x: Tensor, l: int) -> Tensor:
        """log p_0(x_l) of layer `l` under the base, float64, shaped (*batch,)."""
        layer, c = self.model.layers[l], self.base_biases[l].double()
        return layer.log_potential(c, x.double()) - layer.log_normalizer(c)

    def _log_ratio(self, state: BoltzmannState, beta_from: float, beta_to: float, keep: Optional[str]):
        model, at, at_to = self.model, self.at(beta_from), self.at(beta_to)
        step = beta_to - beta_from
        total, probs = None, [None] * model.num_layers
        for l, x in enumerate(state.layers):
            layer = model.layers[l]
            scope = self._buffers.scope(f"ratio{l}")
            if x is not None:
                term = layer.potential_increment(at.biases[l], step * self._direction[l], x, buffers=scope)
            elif layer.support == BINARY:  # log-normalizer a sum of softplus
                term, p = self._bernoulli_increment(state, l, at_to, step, keep, scope)
                probs[l] = p
            else:
                u = state.odd_inputs[l]
                term = layer.log_normalizer_increment(
                    at.biases[l], at.weight_scale * u, step * self._direction[l], (step * model.weight_scale) * u
                )
            total = term if total is None else total + term
        odd = [l for l, inp in enumerate(state.odd_inputs) if inp is not None]
        if keep is not None and odd and all(probs[l] is not None for l in odd):
            return total, state._replace(odd_probs=tuple(probs), probs_key=self.probs_key(beta_to, state))
        return total, state._replace(probs_key=None)

    def _bernoulli_increment(self, state, l: int, at_to, step: float, keep: Optional[str], scope: Buffers):
        """The log-normalizer increment of a Bernoulli odd layer, and p(x_l = 1 | even) at beta_to when kept.

        softplus(z') - softplus(z) = -log1p(sigmoid(z') expm1(-d)) with z' the natural parameters at beta_to (the
        very numbers the sampler computes there) and -d = (beta_from - beta_to) (theta - c + s u) taken directly:
        no difference of nearly equal numbers while |d| <= 2; beyond, the float64 difference of softplus."""
        u = state.odd_inputs[l]
        if keep == "own" and state.odd_probs is not None and state.odd_probs[l] is not None:
            target = state.odd_probs[l]
        elif keep is not None:
            target = torch.empty_like(u)
        else:
            target = scope.get("natural", u.shape, u.dtype, u.device)
        z_to = torch.add(at_to.biases[l], u, alpha=at_to.weight_scale, out=target)
        neg_d = torch.add(-step * self._direction[l], u, alpha=-step * self.model.weight_scale,
                          out=scope.get("neg_step", u.shape, u.dtype, u.device))  # fmt: skip
        lo, hi = torch.aminmax(neg_d)
        if float(lo) >= -2.0 and float(hi) <= 2.0:
            series = scope.get("series", u.shape, u.dtype, u.device)
            neg_d = expm1_(neg_d, scratch=series, largest=max(-float(lo), float(hi)))
            term = neg_d.mul_(z_to.sigmoid_()).log1p_().sum(-1, dtype=torch.float64).neg_()
            return term, (z_to if keep is not None else None)
        z64 = z_to.double()
        return (F.softplus(z64) - F.softplus(z64 + neg_d.double())).sum(-1), None

    def _gibbs(self, at, state, generator, clamped, out, odd_probs) -> BoltzmannState:
        # the buffers serve the in-place step only: a new state must not share the path's temporaries
        buffers = None if out is None else self._buffers
        return mixed_gibbs_step(at, state, generator, clamped=clamped, buffers=buffers, out=out, odd_probs=odd_probs)
