"""What a model declares (`typing.Protocol`s, checked over every family by tests/test_contracts.py).

- `Model`: every model: its `family` (declared by its class, never derived by the caller), a description.
- `DirectedModel`: p(z) p(x | z) (VAEs, sigmoid belief nets, a user's decoder): everything BDMC, AIDE and the
  directed path ask of it (`models.directed.base.DirectedLatentModel` gives the optional members their defaults).
- `BoltzmannModel`: an undirected machine on a chain of layers (binary: `LayeredBoltzmannMachine`, `RBM`, `DBM`;
  typed: `MixedBoltzmannMachine`), everything its geometric path, exact answers, evaluation and resume files ask of
  it. `typed_layers` says whether its layers are typed `Layer`s (with declared supports) or binary vectors.

Families: 'RBM' and 'DBM' (undirected chains of two, and of three or more, layers), 'DBN' (a top RBM under directed
layers), 'directed' (p(z) p(x | z): VAEs, sigmoid belief nets, a user's decoder), 'fully-visible' (pairwise models with
no hidden units, `FullyVisibleModel`: DCA Potts and Ising models), 'energy' (the user's own energy E(x) in PyTorch,
`EnergyModel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

FAMILIES = ("RBM", "DBM", "DBN", "directed", "fully-visible", "energy")


@runtime_checkable
class Model(Protocol):
    """Every model."""

    @property
    def family(self) -> str:
        """One of FAMILIES."""
        ...

    def describe(self) -> str:
        """The model in a few words, e.g. 'RBM 784-500' or 'categorical(53x21) - bernoulli(20)'."""
        ...


@runtime_checkable
class BoltzmannModel(Model, Protocol):
    """An undirected machine on a chain of layers x_0 (visible), ..., x_L."""

    weights: Sequence[Tensor]
    biases: Sequence[Tensor]
    weight_scale: float

    @property
    def typed_layers(self) -> bool:
        """Whether the layers are typed `Layer`s (declared supports) rather than binary vectors."""
        ...

    @property
    def layer_sizes(self) -> tuple[int, ...]: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def n_visible(self) -> int: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    def to(self, device=None, dtype=None) -> BoltzmannModel: ...

    def digest_parts(self) -> tuple[list[Tensor], float]:
        """The tensors and weight scale that identify the parameters (a resume file's model digest)."""
        ...

    def annealed(self, beta: float, base_biases: Sequence[Tensor]) -> BoltzmannModel:
        """The point at `beta` of the geometric path from the independent base `base_biases`."""
        ...

    def log_unnormalized_marginal(
        self, layers: Sequence[Optional[Tensor]], odd_inputs: Optional[Sequence[Optional[Tensor]]] = None
    ) -> Tensor:
        """log f of the given layers with the None ones summed out, shaped (*batch,)."""
        ...


@runtime_checkable
class DirectedModel(Model, Protocol):
    """p(z) p(x | z); z shaped (*batch, latent_dim), x (*batch, data_dim), broadcasting against each other."""

    latent_dim: int
    data_dim: int
    latent_type: str  # 'continuous' (HMC) or 'binary' (Gibbs)
    data_support: str  # 'binary': 0/1 vectors (checked by the caller); 'declared': `check_data` checks them

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    def log_prior(self, z: Tensor) -> Tensor: ...

    def log_likelihood(self, x: Tensor, z: Tensor) -> Tensor: ...

    def log_joint(self, x: Tensor, z: Tensor) -> Tensor: ...

    def sample_joint(self, num: int, generator: torch.Generator) -> tuple[Tensor, Tensor]: ...

    def check_data(self, x: Tensor, what: str = "data") -> Tensor:
        """x, or ValueError naming `what` when it is outside the likelihood's support (declared supports only)."""
        ...

    def posterior_approximation(self) -> Optional[object]:
        """The model's encoder q(z | x) (`models.directed.base.PosteriorApproximation`), or None."""
        ...

    def data_logits(self, z: Tensor) -> Optional[Tensor]:
        """The Bernoulli logits of x given binary z where the model has them in closed form, else None."""
        ...


def declared_family(model) -> Optional[str]:
    """The family `model` declares (`Model.family`), or None for an object that declares none."""
    return model.family if isinstance(model, Model) and isinstance(model.family, str) else None


def has_typed_layers(model) -> bool:
    """Whether `model` is a Boltzmann machine of typed layers (`BoltzmannModel.typed_layers`)."""
    return isinstance(model, BoltzmannModel) and bool(model.typed_layers)


def undirected_family(num_layers: int) -> str:
    """The family of an undirected chain of `num_layers` layers: an RBM has two, a DBM more."""
    return "RBM" if num_layers == 2 else "DBM"
