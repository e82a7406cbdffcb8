"""The layer contract of a Boltzmann machine of typed layers: `Layer`, the base of every unit type in `units`.

A layer type declares its `support` (what a unit's values are: `supports`), its parameters' shape, its
log-normalizer given an input from the neighbours, its exact sampler, a base fitted to data and, when discrete, its
enumeration; see `units` for the four types and the formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from raise_eval.models.boltzmann.buffers import Buffers
from raise_eval.models.boltzmann.supports import Support
from torch import Tensor


@dataclass(frozen=True)
class Layer:
    """A layer's type and size (no parameters: they live in the machine, so that annealing can interpolate them).

    size: units (sites for a categorical layer). Subclasses set `kind` (the type's name in files and messages) and
    declare `support` (the values of a unit, `supports.Support`), from which `discrete` follows, and
    `normal_conditional` where p(x | u) is normal with a precision that does not depend on u (what the exact code
    integrates in closed form or by quadrature; a continuous layer without it is refused there).
    """

    size: int

    kind = "layer"
    normal_conditional = False

    @property
    def support(self) -> Support:
        raise NotImplementedError(f"{type(self).__name__} must declare its support (models/boltzmann/supports.py)")

    @property
    def discrete(self) -> bool:
        """Whether the layer's units have finitely many states (from its support)."""
        return self.support.discrete

    def __post_init__(self):
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"a layer needs a positive whole number of units, got {self.size!r}")

    # ------------------------------------------------------------------ shapes
    @property
    def width(self) -> int:
        """Entries of the layer's state vector."""
        return self.size

    @property
    def param_shape(self) -> tuple[int, ...]:
        return (self.width,)

    def describe(self) -> str:
        return f"{self.kind}({self.size})"

    def to_config(self) -> dict:
        """What a checkpoint stores to rebuild this layer type (`layer_from_config`)."""
        return {"type": self.kind, "size": self.size}

    # ------------------------------------------------------------------ parameters
    def check_params(self, params: Tensor, name: str) -> None:
        """ValueError naming `name` when `params` do not fit this layer."""
        if tuple(params.shape) != self.param_shape:
            raise ValueError(
                f"{name} has shape {tuple(params.shape)}; a {self.describe()} layer needs {self.param_shape}"
            )

    def uniform_params(self, params: Tensor) -> Tensor:
        """Parameters of the layer's start distribution for init='uniform' (zeros: the uniform distribution)."""
        return torch.zeros_like(params)

    def log_potential(self, params: Tensor, x: Tensor) -> Tensor:
        """phi(x), shaped (*batch,), in x's dtype."""
        return torch.mv(x.reshape(-1, self.width), params).reshape(x.shape[:-1])

    # ------------------------------------------------------------------ to be provided
    def log_normalizer(self, params: Tensor, u: Optional[Tensor] = None) -> Tensor:
        raise NotImplementedError

    def log_normalizer_increment(self, params: Tensor, u: Tensor, dparams: Tensor, du: Tensor) -> Tensor:
        """log_normalizer(params + dparams, u + du) - log_normalizer(params, u) in float64, shaped (*batch,).

        The steps dparams and du are given rather than the end point, so that a small annealing step is not the
        difference of two nearly equal numbers (the caller computes them as (beta' - beta) times a direction)."""
        p, d = params.double(), dparams.double()
        return self.log_normalizer(p + d, u.double() + du.double()) - self.log_normalizer(p, u.double())

    def potential_increment(
        self, params: Tensor, dparams: Tensor, x: Tensor, buffers: Optional[Buffers] = None
    ) -> Tensor:
        """phi(x; params + dparams) - phi(x; params) in float64, shaped (*batch,): linear in the parameters for
        these layers, so one product with the step (no cancellation)."""
        return torch.mv(x.reshape(-1, self.width), dparams.to(x.dtype)).reshape(x.shape[:-1]).double()

    def field(self, params: Tensor) -> Tensor:
        """The part of the parameters the input adds to (width,): the natural parameters z = field + u that
        `sample_natural_` draws from (a Gaussian layer's eta; a discrete layer's parameters)."""
        return params

    def sample_natural_(
        self, z: Tensor, params: Tensor, generator: torch.Generator, buffers: Optional[Buffers] = None
    ) -> tuple[Tensor, Optional[Tensor]]:
        """In place: replace z = field + u (contiguous, (*batch, width)) by an exact sample of p(x | u). Returns (the
        sample, the categorical codes (*batch, size) when the layer has them, else None)."""
        return z.copy_(self.sample(params, z - self.field(params), generator)), None

    def sample(
        self,
        params: Tensor,
        u: Optional[Tensor],
        generator: torch.Generator,
        *,
        batch_shape=(),
        out: Optional[Tensor] = None,
    ) -> Tensor:
        raise NotImplementedError

    def mean(self, params: Tensor, u: Optional[Tensor] = None) -> Tensor:
        raise NotImplementedError

    def statistics(self, data: Tensor) -> Tensor:
        """Means over the rows of `data` (N, width), states of this layer, of its sufficient statistics: what
        `base_params` fits a base to (float64, shaped like the parameters)."""
        return data.double().mean(0)

    def base_params(self, statistics: Tensor, params: Tensor) -> Tensor:
        raise NotImplementedError

    def check_statistics(self, statistics: Tensor, what: str) -> Tensor:
        """`statistics` as float64 parameters-shaped, or ValueError naming `what`."""
        s = torch.as_tensor(statistics, dtype=torch.float64).reshape(-1)
        expected = math.prod(self.param_shape)
        if s.numel() != expected or not bool(torch.isfinite(s).all()):
            raise ValueError(
                f"{what} must be {expected} finite numbers (the training data's means of this "
                f"{self.describe()} layer's sufficient statistics); got {s.numel()}"
            )
        return s.reshape(self.param_shape)

    def prepare(self, data: Tensor, what: str = "data") -> Tensor:
        """The layer's states from data in the forms users keep them (see the subclasses), float (N, width)."""
        return self.check_states(data, what)

    def check_states(self, x: Tensor, what: str = "data") -> Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ enumeration (discrete layers)
    @property
    def num_configurations(self) -> int:
        raise self._not_enumerable()

    def configurations(self, start: int, stop: int, *, dtype=torch.float64, device=None) -> Tensor:
        raise self._not_enumerable()

    def configuration_index(self, x: Tensor) -> Tensor:
        raise self._not_enumerable()

    def _not_enumerable(self) -> ValueError:
        return ValueError(
            f"a {self.kind} layer (support {self.support.describe()}) has a continuum of states: "
            "it cannot be enumerated"
        )

    def _add(self, params: Tensor, u: Optional[Tensor]) -> Tensor:
        return params if u is None else params + u
