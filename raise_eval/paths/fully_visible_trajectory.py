"""The training trajectory of a fully visible pairwise model (`FullyVisibleModel`: DCA Potts, Ising) as an annealing
path: the fields and couplings of one run's checkpoints, interpolated linearly between neighbours.

Points P_0, ..., P_T (P_0 an independent-site model: couplings zero) sit at knots beta_i = i / T; inside link i,

    h(beta) = (1 - u) h_i + u h_{i+1},  J(beta) = (1 - u) J_i + u J_{i+1},  u = (beta - beta_i) / (beta_{i+1} - beta_i).

log f is linear in (h, J), so log f_beta(v) = (1 - u) log f_i(v) + u log f_{i+1}(v): a weight update inside a link is
(u' - u) (log f_{i+1}(v) - log f_i(v)), from the two points' log f alone. Every f_beta is a pairwise model, so the
palindromic single-site scan of `kernels.site_gibbs` at beta leaves it invariant and is reversible: AIS, RAISE (from
the test vector itself, as on the geometric path) and BAR run on this path through the same loop as on the layered
machines' trajectory (`paths.trajectory`). P_0 is sampled exactly and its log Z is closed form,
sum_i log sum_a exp(c[i, a]); `fully_visible_trajectory_path` prepends it (uniform, or `data_base_fields`) unless
the first checkpoint has no couplings. States are int64 site codes (*B, L), as on `FullyVisiblePath`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

from raise_eval.kernels.site_gibbs import CouplingTables, site_scan
from raise_eval.models.fully_visible import FullyVisibleModel, log_sum_exp_fields
from raise_eval.paths.fully_visible import base_fields_from_frequencies, chains_at_test_vectors, uniform_fields
from raise_eval.paths.knots import Knots


def check_fully_visible_points(models: Sequence, name) -> None:
    """Fully visible models of one kind of site, size, number of states, dtype and device (TypeError for another
    model, ValueError naming the first that differs, as `name(i)`)."""
    first = models[0]
    for i, m in enumerate(models):
        if not isinstance(m, FullyVisibleModel):
            kind = type(m).__name__
            raise TypeError(f"{name(i)} ({kind}) is not a fully visible model but {name(0)} is: not one run")
        if (m.sites, m.n_visible, m.num_states) != (first.sites, first.n_visible, first.num_states):
            raise ValueError(
                f"{name(i)} is {m.describe()} but {name(0)} is {first.describe()}: not one model's trajectory"
            )
        if m.dtype != first.dtype or m.device != first.device:
            raise ValueError(
                f"{name(i)} is {m.dtype} on {m.device} but {name(0)} is {first.dtype} on {first.device}; convert them "
                "to one dtype and device"
            )


class FullyVisibleTrajectoryPath(Knots):
    """The piecewise-linear path through the fields and couplings of `points` (P_0 at beta = 0, P_T at beta = 1).

    Args:
        points: T + 1 >= 2 `FullyVisibleModel`s of one kind of site, size, dtype and device, in order. Only a path
            whose P_0 has no couplings has a start to sample and a log Z_0.
        checkpoint_points: the indices of the points that are a run's checkpoints (all when None).
        method: the kernel's single-site update, 'gibbs' (default) or 'metropolis'.
    """

    clamped = ()

    def __init__(
        self, points: Sequence[FullyVisibleModel], checkpoint_points: Optional[Sequence[int]] = None,
        method: str = "gibbs",
    ):  # fmt: skip
        points = list(points)
        if len(points) < 2:
            raise ValueError(f"a trajectory path needs at least two points, got {len(points)}")
        check_fully_visible_points(points, lambda i: f"point {i}")
        if method not in ("gibbs", "metropolis"):
            raise ValueError(f"method must be one of gibbs, metropolis, got {method!r}")
        self._models = points
        self._fields = [m.categorical_parameters()[0] for m in points]  # (L, q) each
        self._couplings = [m.categorical_parameters()[1] for m in points]  # (L, q, L, q) each
        self.method = method
        self.num_links = len(points) - 1
        self.knots = [i / self.num_links for i in range(self.num_links + 1)]
        self.start_is_independent = not bool(self._couplings[0].any())
        self.checkpoint_points = list(range(len(points))) if checkpoint_points is None else list(checkpoint_points)
        self._tables: dict[float, tuple[Tensor, CouplingTables]] = {}

    # ---------------------------------------------------------------- structure
    @property
    def model(self) -> FullyVisibleModel:
        """The target, P_T (beta = 1)."""
        return self._models[-1]

    @property
    def points(self) -> list[FullyVisibleModel]:
        return list(self._models)

    @property
    def base_biases(self) -> list[Tensor]:
        """P_0's fields, in the model's convention."""
        return [self._models[0].fields]

    def truncated(self, point: int) -> FullyVisibleTrajectoryPath:
        """The path through P_0, ..., P_point (knots rescaled to [0, 1]): the annealing path of point `point`."""
        if not 1 <= point <= self.num_links:
            raise ValueError(f"point must be in [1, {self.num_links}], got {point}")
        kept = [p for p in self.checkpoint_points if p <= point]
        return FullyVisibleTrajectoryPath(self._models[: point + 1], kept, self.method)

    # ---------------------------------------------------------------- the start
    def _require_independent_start(self, what: str) -> None:
        if not self.start_is_independent:
            raise ValueError(
                f"{what} needs an independent start (P_0 without couplings); build the path with "
                "fully_visible_trajectory_path(checkpoints, base_fields), which prepends one"
            )

    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the independent start, float64: sum_i logsumexp_a c[i, a]."""
        self._require_independent_start("log Z_0")
        return log_sum_exp_fields(self._fields[0])

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> Tensor:
        """`num_chains` exact samples of the start, int64 codes shaped (num_chains, L)."""
        self._require_independent_start("sampling the start")
        probs = torch.softmax(self._fields[0].double(), dim=-1)  # (L, q)
        cdf = probs.cumsum(-1)
        u = torch.rand((num_chains, probs.shape[0]), generator=generator, device=probs.device, dtype=torch.float64)
        return (cdf[:, :-1] < (u * cdf[:, -1]).unsqueeze(-1)).sum(-1)

    # ---------------------------------------------------------------- states
    def test_vector_start(self, data: Tensor, num_chains: int, what: str = "test data") -> tuple[Tensor, Tensor]:
        """RAISE's start at the test vectors themselves: (codes with batch (N, num_chains), log f(v) (N,) float64
        under P_T). data: site states (N, L) in the model's convention."""
        self._require_independent_start("RAISE")
        return chains_at_test_vectors(self, self.model.codes(data, what), data, num_chains, what)

    def clone_state(self, state: Tensor) -> Tensor:
        return state.clone()

    def select_chains(self, state: Tensor, index: Tensor) -> Tensor:
        """The chains `index` (positions in the one batch dimension, (M',), repeats allowed)."""
        return state[index]

    # ---------------------------------------------------------------- densities and kernel
    def _point_log_f(self, i: int, state: Tensor) -> Tensor:
        return self._models[i].log_unnormalized_codes(state).double()

    def log_density(self, state: Tensor, beta: float) -> Tensor:
        """log f_beta(v) = (1 - u) log f_i(v) + u log f_{i+1}(v), float64 shaped (*B,)."""
        link, u = self._locate(beta)
        if u == 0.0:
            return self._point_log_f(link, state)
        if u == 1.0:
            return self._point_log_f(link + 1, state)
        return torch.lerp(self._point_log_f(link, state), self._point_log_f(link + 1, state), u)

    def log_density_ratio(self, state: Tensor, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(v) - log f_{beta_from}(v), float64 shaped (*B,): inside one link (u' - u) times the
        difference of its two points' log f, not the difference of two large sums."""
        if beta_from == beta_to:
            return torch.zeros(state.shape[:-1], dtype=torch.float64, device=state.device)
        lo, hi = min(beta_from, beta_to), max(beta_from, beta_to)
        link, _ = self._locate(lo)
        if hi > self.knots[link + 1]:  # a step across knots: each end from its own link
            return self.log_density(state, beta_to) - self.log_density(state, beta_from)
        step = self._u(link, beta_to) - self._u(link, beta_from)
        return step * (self._point_log_f(link + 1, state) - self._point_log_f(link, state))

    def _parameters(self, beta: float) -> tuple[Tensor, Tensor]:
        """(fields (L, q), couplings (L, q, L, q)) at `beta` in the categorical form: the points' own at the knots."""
        link, u = self._locate(beta)
        if u == 1.0:
            link, u = link + 1, 0.0
        if u == 0.0:
            return self._fields[link], self._couplings[link]
        fields = torch.lerp(self._fields[link], self._fields[link + 1], u)
        return fields, torch.lerp(self._couplings[link], self._couplings[link + 1], u)

    def at(self, beta: float) -> FullyVisibleModel:
        """The model at `beta` in the categorical form (q states; spin and 0/1 sites as their codes 0/1): the same
        distribution over the codes the chains hold."""
        return FullyVisibleModel(*self._parameters(beta), "categorical")

    def site_parameters(self, beta: float) -> tuple[Tensor, CouplingTables]:
        """(fields (L, q), couplings as `CouplingTables`) at `beta`, kept for the last few betas (a transition and
        the weight updates beside it ask for the same one)."""
        cached = self._tables.get(beta)
        if cached is None:
            fields, couplings = self._parameters(beta)
            if len(self._tables) >= 4:
                self._tables.pop(next(iter(self._tables)))
            cached = self._tables[beta] = (fields, CouplingTables(couplings))
        return cached

    def transition(self, state: Tensor, beta: float, generator: torch.Generator) -> Tensor:
        """One palindromic single-site scan at `beta` (reversible, leaves p_beta invariant); `state` is not
        modified."""
        fields, tables = self.site_parameters(beta)
        return site_scan(state, fields, tables, 1.0, generator, self.method)[0]


def fully_visible_trajectory_path(
    checkpoints: Sequence[FullyVisibleModel], base_fields=None, method: str = "gibbs"
) -> FullyVisibleTrajectoryPath:
    """The annealing path of a fully visible model's training run: an independent-site start, then the checkpoints
    in training order (the last the target at beta = 1).

    The start is the first checkpoint itself when it has no couplings and no `base_fields` are given; otherwise
    the independent-site model with `base_fields` (the model's convention, or a one-element sequence holding them;
    uniform when None, or `data_base_fields(model, train_data)`) is prepended. `path.checkpoint_points` lists the
    points that are checkpoints.
    """
    checkpoints = list(checkpoints)
    if not checkpoints:
        raise ValueError("a trajectory needs at least one checkpoint")
    check_fully_visible_points(checkpoints, lambda i: f"checkpoint {i}")
    first = checkpoints[0]
    if base_fields is None and not bool(first.couplings.any()) and len(checkpoints) > 1:
        return FullyVisibleTrajectoryPath(checkpoints, method=method)
    base = uniform_fields(first) if base_fields is None else base_fields
    if isinstance(base, (list, tuple)):
        if len(base) != 1:
            raise ValueError(f"a fully visible model's base has one field tensor, got {len(base)}")
        base = base[0]
    base = torch.as_tensor(base)
    if tuple(base.shape) != tuple(first.fields.shape):
        raise ValueError(f"base fields have shape {tuple(base.shape)}, the model's fields {tuple(first.fields.shape)}")
    if not bool(torch.isfinite(base).all()):
        raise ValueError("base fields have NaN or infinite entries")
    start = FullyVisibleModel(
        base.to(dtype=first.dtype, device=first.device), torch.zeros_like(first.couplings), first.sites, first.alphabet
    )
    return FullyVisibleTrajectoryPath([start, *checkpoints], range(1, len(checkpoints) + 1), method)


def fully_visible_base(model: FullyVisibleModel, init: str, frequencies) -> Optional[list[Tensor]]:
    """The base fields of a fully visible trajectory's start (a one-element list, the model's convention), or None
    for `init` 'uniform'. 'base-rates': fitted to the training data's site frequencies (L, q)
    (`paths.fully_visible.site_frequencies`) as an evaluation's base is (`base_fields_from_frequencies`); ValueError
    naming train_pixel_means when they are missing or not frequencies."""
    if init != "base-rates":
        return None
    if frequencies is None:
        raise ValueError(
            "init 'base-rates' of a fully visible trajectory needs the training data's site frequencies as "
            "train_pixel_means (raise_eval.visible_statistics(model, train_data)), or init 'uniform'"
        )
    try:
        return [base_fields_from_frequencies(model, frequencies).to(model.device)]
    except ValueError as e:
        raise ValueError(f"train_pixel_means of a fully visible trajectory: {e}") from None
