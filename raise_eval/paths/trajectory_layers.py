"""What a trajectory path asks of a machine's layers, for binary layers and for typed ones.

`TrajectoryPath` interpolates the parameters of its points; what a layer's units are (their log-normalizer given an
input, their potential, their exact sampler, the independent start) it asks of one of these two, chosen by what the
machines declare (`typed_layers`, `models.contracts.BoltzmannModel`):

- `BinaryLayers`: 0/1 vectors (`LayeredBoltzmannMachine`: RBMs and DBMs): softplus log-normalizers, Bernoulli
  samplers, the path's binary arithmetic of before, unchanged;
- `TypedLayers`: typed `Layer`s (`MixedBoltzmannMachine`: Bernoulli, spin, categorical (Potts), Gaussian units in
  any pairing), through each layer's declared log-normalizer, potential, increments and sampler.

Parameters (biases) are given per layer as the machine holds them (a Gaussian layer's (2, n) (eta, lam)); inputs are
the unscaled products from the even layers, (*batch, width).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.models.sampling import sample_bernoulli_logits_


class BinaryLayers:
    """Binary layers (the machines' biases are (n_l,) vectors)."""

    def __init__(self, model):
        self.num_layers = model.num_layers

    @staticmethod
    def same_units(a, b) -> bool:
        return a.layer_sizes == b.layer_sizes

    @staticmethod
    def machine(weights: Sequence[Tensor], biases: Sequence[Tensor]):
        return LayeredBoltzmannMachine._trusted(weights, biases, 1.0)

    @staticmethod
    def uniform_base(model) -> list[Tensor]:
        return [torch.zeros_like(b) for b in model.biases]

    def log_partition(self, biases64: Sequence[Tensor]) -> float:
        """log Z of the independent machine with these parameters (float64)."""
        return float(sum(F.softplus(c).sum() for c in biases64))

    @staticmethod
    def sample_independent(l: int, c: Tensor, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        u = torch.rand((*batch_shape, c.shape[0]), generator=generator, device=c.device, dtype=c.dtype)
        return (u < torch.sigmoid(c)).to(c.dtype)

    @staticmethod
    def log_independent(l: int, c64: Tensor, x: Tensor) -> Tensor:
        return torch.mv(x.double().reshape(-1, c64.shape[0]), c64).reshape(x.shape[:-1]) - float(F.softplus(c64).sum())

    @staticmethod
    def log_normalizer(l: int, bias64: Tensor, inputs64: Tensor) -> Tensor:
        return F.softplus(inputs64 + bias64).sum(-1)

    @staticmethod
    def log_potential(l: int, bias64: Tensor, x: Tensor) -> Tensor:
        return torch.mv(x.double().reshape(-1, x.shape[-1]), bias64).reshape(x.shape[:-1])

    @staticmethod
    def log_normalizer_step(l: int, a: Tensor, b: Tensor, u0: float, u1: float, b0: Tensor, b1: Tensor) -> Tensor:
        """Layer l's log-normalizer at (bias b1, input lerp(a, b, u1)) minus at (b0, lerp(a, b, u0)), from the
        float64 inputs a, b under the link's two ends, shaped (*batch,)."""
        z0 = torch.lerp(a, b, u0).add_(b0)
        z1 = torch.lerp(a, b, u1).add_(b1)
        return (F.softplus(z1) - F.softplus(z0)).sum(-1)

    @staticmethod
    def potential_step(l: int, b0: Tensor, b1: Tensor, x: Tensor, batch) -> Tensor:
        d = b1 - b0
        return torch.mv(x.double().reshape(-1, x.shape[-1]), d).reshape(batch)

    @staticmethod
    def sample_odd(model, l: int, inputs: Tensor, generator: torch.Generator) -> Tensor:
        """Layer l given its unscaled input (a fresh tensor it may overwrite), under `model` (weight scale 1)."""
        return sample_bernoulli_logits_(inputs.add_(model.biases[l]), generator)


class TypedLayers:
    """Typed layers, through each `Layer`'s declared members."""

    def __init__(self, model):
        self.layers = tuple(model.layers)
        self._cls = type(model)
        self.num_layers = model.num_layers

    @staticmethod
    def same_units(a, b) -> bool:
        return tuple(a.layers) == tuple(b.layers)

    def machine(self, weights: Sequence[Tensor], biases: Sequence[Tensor]):
        return self._cls._trusted(self.layers, weights, biases, 1.0)

    def uniform_base(self, model) -> list[Tensor]:
        return [layer.uniform_params(b) for layer, b in zip(self.layers, model.biases)]

    def log_partition(self, biases64: Sequence[Tensor]) -> float:
        return float(sum(layer.log_normalizer(c) for layer, c in zip(self.layers, biases64)))

    def sample_independent(self, l: int, c: Tensor, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        return self.layers[l].sample(c, None, generator, batch_shape=tuple(batch_shape))

    def log_independent(self, l: int, c64: Tensor, x: Tensor) -> Tensor:
        layer = self.layers[l]
        return layer.log_potential(c64, x.double()) - layer.log_normalizer(c64)

    def log_normalizer(self, l: int, bias64: Tensor, inputs64: Tensor) -> Tensor:
        return self.layers[l].log_normalizer(bias64, inputs64).double()

    def log_potential(self, l: int, bias64: Tensor, x: Tensor) -> Tensor:
        return self.layers[l].log_potential(bias64, x.double()).double()

    def log_normalizer_step(self, l: int, a: Tensor, b: Tensor, u0: float, u1: float, b0: Tensor, b1: Tensor) -> Tensor:
        # the layer's accurate increment from the start and the step (no difference of two large sums)
        step = (b - a).mul_(u1 - u0)
        return self.layers[l].log_normalizer_increment(b0, torch.lerp(a, b, u0), b1 - b0, step).double()

    def potential_step(self, l: int, b0: Tensor, b1: Tensor, x: Tensor, batch) -> Tensor:
        return self.layers[l].potential_increment(b0, b1 - b0, x.double()).double().reshape(batch)

    def sample_odd(self, model, l: int, inputs: Tensor, generator: torch.Generator) -> Tensor:
        return self.layers[l].sample(model.biases[l], inputs, generator)


def layers_of(model):
    """The layer operations for `model`'s kind of layers, as it declares them (`typed_layers`)."""
    return TypedLayers(model) if model.typed_layers else BinaryLayers(model)
