"""Supports: the set each unit of a layer takes its values in, declared by the layer type (as torch.distributions
declares a distribution's `support`), so that code asks a layer what it is rather than what it is called.

- `REAL`: the real line (a density, not a probability, over the unit's values).
- `NONNEGATIVE`: [0, inf) (e.g. a rectified or truncated-Gaussian unit).
- `BINARY`: {0, 1}.
- `SPIN`: {-1, +1}.
- `one_hot(q)`: a site of q states held as a one-hot vector of q entries.

What follows from a support: whether the layer is discrete (its configurations can be enumerated, and p(v) is a
probability) or continuous (p(v) is a density in the data's units), and how many states a unit (a site) has.
Exact answers (`raise_eval.exact`) enumerate discrete layers and integrate only the continuous layers whose
conditional they know in closed form (`Layer.normal_conditional`); any other layer is refused there by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Support:
    """The values one unit (one site of a one-hot layer) takes.

    name: 'real', 'nonnegative', 'binary', 'spin' or 'one_hot'.
    values: the unit's values for binary and spin units; None otherwise.
    q: the states of a one-hot site; None otherwise.
    """

    name: str
    values: Optional[tuple[float, ...]] = None
    q: Optional[int] = None

    @property
    def discrete(self) -> bool:
        """Whether a unit has finitely many states (enumerable; p(v) a probability)."""
        return self.values is not None or self.q is not None

    @property
    def states_per_unit(self) -> int:
        """States of one unit (one site); ValueError for a continuum."""
        if self.values is not None:
            return len(self.values)
        if self.q is not None:
            return self.q
        raise ValueError(f"a unit with {self.describe()} support has a continuum of states")

    @property
    def measure(self) -> str:
        """'probability' for discrete units, 'density' for continuous ones: what log p(v) is."""
        return "probability" if self.discrete else "density"

    def describe(self) -> str:
        """The support in words: '{0, 1}', '{-1, 1}', 'one-hot(21)', 'real', 'nonnegative'."""
        if self.values is not None:
            return "{" + ", ".join(f"{v:g}" for v in self.values) + "}"
        if self.q is not None:
            return f"one-hot({self.q})"
        return self.name


REAL = Support("real")
NONNEGATIVE = Support("nonnegative")
BINARY = Support("binary", values=(0.0, 1.0))
SPIN = Support("spin", values=(-1.0, 1.0))


def one_hot(q: int) -> Support:
    """The support of a site of q states held one-hot."""
    if isinstance(q, bool) or not isinstance(q, int) or q < 2:
        raise ValueError(f"a one-hot site needs q >= 2 states, got {q!r}")
    return Support("one_hot", q=q)
