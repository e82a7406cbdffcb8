"""The training trajectory as an annealing path: f_beta through the parameters of one run's checkpoints.

Points P_0, P_1, ..., P_T (the weights and biases of layered Boltzmann machines of one architecture) sit at knots
beta_i = i / T. Between two knots the parameters are interpolated linearly,

    theta(beta) = (1 - u) theta_i + u theta_{i+1},   u = (beta - beta_i) / (beta_{i+1} - beta_i),

and f_beta is the machine with parameters theta(beta), its odd layers summed out as on the geometric path. Every
f_beta is a Boltzmann machine, so the block-Gibbs kernel at beta leaves it invariant and is reversible: AIS, RAISE
(heating for DBMs), reverse AIS and the control variate run on this path through the same loop (`anneal`) as on
the geometric one, unchanged.

P_0 must be tractable: an independent distribution (every weight zero), whose log Z is a sum of softplus terms and
whose layers are sampled exactly. `trajectory_path` prepends one (uniform, or the data base rates) unless the first
checkpoint already is one. The geometric path from a base c to a model (W, b) is the linear interpolation from
(0, c) to (W, b), so the prepended link is the temperature path to the first checkpoint.

AIS along the path gives Z at every knot from one pass: the log-weight accumulated up to a knot's step is unbiased
for Z at that knot (the chain stopped there is an AIS chain to that distribution).

The state keeps the even layers and, per odd layer, its unscaled input x_{l-1} W_{l-1} + x_{l+1} W_l^T under the
weights of the two points at the ends of one link: every input inside that link is their linear interpolation,
so a step costs the even layers' sampling products plus two input products, whatever beta is.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Sequence
from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

from raise_eval.models.contracts import BoltzmannModel, Model
from raise_eval.models.fully_visible import FullyVisibleModel
from raise_eval.paths.fully_visible_trajectory import (
    FullyVisibleTrajectoryPath,
    check_fully_visible_points,
    fully_visible_trajectory_path,
)
from raise_eval.paths.knots import Knots
from raise_eval.paths.trajectory_layers import layers_of


class TrajectoryState(NamedTuple):
    """State of chains on a `TrajectoryPath`.

    layers: per layer, the even layers' values (*batch, n_l); None for odd (summed-out) layers.
    ends: None, or (the path's token, link i, inputs under P_i, inputs under P_{i+1}), each inputs a tuple with,
        for odd layers, the unscaled input from the even layers (*batch, n_l) (None for even layers), computed from
        `layers` as they are: any state with other layers is built without them.
    """

    layers: tuple[Optional[Tensor], ...]
    ends: Optional[tuple] = None

    @property
    def visible(self) -> Tensor:
        return self.layers[0]


def _independent(model: BoltzmannModel) -> bool:
    return all(not bool(w.any()) for w in model.weights)


def _check_points(models: Sequence, what: str, names: Optional[Sequence[str]] = None) -> None:
    """Boltzmann machines (RBMs, DBMs; binary or typed layers) of one architecture, dtype and device (ValueError
    naming the first that differs)."""
    if len(models) == 0:
        raise ValueError(f"a trajectory needs at least one {what}")
    first = models[0]
    name = (lambda i: names[i]) if names is not None else (lambda i: f"{what} {i}")  # noqa: E731
    for i, m in enumerate(models):
        family = m.family if isinstance(m, Model) else None
        if family not in ("RBM", "DBM") or not isinstance(m, BoltzmannModel):
            kind = f"{_a(family)} model" if family is not None else _a(type(m).__name__)
            raise TypeError(
                f"a trajectory runs through RBMs and DBMs (Boltzmann machines of binary or typed layers); {name(i)} "
                f"is {kind}{FAMILY_ADVICE.get(family, '')}"
            )
        if m.layer_sizes != first.layer_sizes:
            sizes = "-".join(map(str, m.layer_sizes))
            raise ValueError(
                f"{name(i)} has layers {sizes} but {name(0)} has {'-'.join(map(str, first.layer_sizes))}: not one "
                "model's trajectory"
            )
        if m.typed_layers != first.typed_layers or not layers_of(first).same_units(first, m):
            raise ValueError(
                f"{name(i)} has layers {m.describe()} but {name(0)} has {first.describe()}: not one model's trajectory"
            )
        if m.dtype != first.dtype or m.device != first.device:
            raise ValueError(
                f"{name(i)} is {m.dtype} on {m.device} but {name(0)} is {first.dtype} on {first.device}; convert them "
                "to one dtype and device"
            )


def check_trajectory(models: Sequence, what: str = "checkpoint", names: Optional[Sequence[str]] = None) -> None:
    """Refuse models that are not one machine's trajectory: layered Boltzmann machines (RBMs, DBMs) of the same
    class (unit types), layer sizes, dtype and device, or fully visible models of one kind of site, size, dtype and
    device. ValueError (TypeError for other models) naming the first
    that differs, as `names[i]` when given, else as '{what} i'."""
    name = (lambda i: names[i]) if names is not None else (lambda i: f"{what} {i}")  # noqa: E731
    if models and isinstance(models[0], FullyVisibleModel):  # fields and couplings: their own path
        check_fully_visible_points(models, name)
        return
    for i, m in enumerate(models):
        if isinstance(m, BoltzmannModel) and type(m) is not type(models[0]):
            raise ValueError(
                f"{name(i)} is {_a(type(m).__name__)} but {name(0)} {_a(type(models[0]).__name__)}: not one model's "
                "trajectory"
            )
    _check_points(models, what, names)


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'AEIORU' else 'a'} {noun}"  # an RBM, a DBM


FAMILY_ADVICE = {
    "DBN": ": a DBN's directed layers have no trajectory path of this kind; evaluate its checkpoints one by one",
}


class TrajectoryPath(Knots):
    """The piecewise-linear path through the parameters of `points` (P_0 at beta = 0, P_T at beta = 1).

    Args:
        points: T + 1 >= 2 layered Boltzmann machines of one architecture, dtype and device, in order. Only a path
            whose P_0 is independent (every weight zero) has a start to sample and a log Z_0
            (`sample_initial`, `log_partition_initial`); others serve as pieces of a longer annealing run (e.g. the
            parameters since a monitor's last call), given the chains and their log-weights.
        clamped: even layers the kernel leaves unchanged (e.g. (0,) while heating a DBM's hidden layers); the
            densities are unchanged.
        checkpoint_points: the indices of the points that are a run's checkpoints (all when None); a prepended
            start is not one.
    """

    def __init__(
        self,
        points: Sequence[BoltzmannModel],
        clamped: Collection[int] = (),
        checkpoint_points: Optional[Sequence[int]] = None,
    ):
        points = list(points)
        if len(points) < 2:
            raise ValueError(f"a trajectory path needs at least two points, got {len(points)}")
        _check_points(points, "point")
        n_layers = points[0].num_layers
        for l in clamped:
            if not (0 <= l < n_layers and l % 2 == 0):
                raise ValueError(f"only even layers (kept in the state) can be clamped; got layer {l}")
        self._units = layers_of(points[0])  # what the layers' units are, as the machines declare (binary or typed)
        # The weight scale folded into the weights: every point is a plain machine.
        self._weights = [tuple(w if m.weight_scale == 1.0 else w * m.weight_scale for w in m.weights) for m in points]
        self._biases = [tuple(m.biases) for m in points]
        self._biases64 = [tuple(b.double() for b in bs) for bs in self._biases]
        self._models = points
        self.num_links = len(points) - 1
        t = self.num_links
        self.knots = [i / t for i in range(t + 1)]  # exact 0 and 1; i / t is the same float wherever it is computed
        self.clamped = tuple(sorted(clamped))
        self.start_is_independent = _independent(points[0])
        self.checkpoint_points = list(range(len(points))) if checkpoint_points is None else list(checkpoint_points)
        self._at_cache: dict[float, BoltzmannModel] = {}
        self._token = object()  # names this path's points in the inputs a state carries

    # ---------------------------------------------------------------- structure
    @property
    def model(self) -> BoltzmannModel:
        """The target, P_T (beta = 1)."""
        return self._models[-1]

    @property
    def points(self) -> list[BoltzmannModel]:
        """P_0, ..., P_T as given."""
        return list(self._models)

    @property
    def base_biases(self) -> list[Tensor]:
        """P_0's biases (the start's, when it is independent)."""
        return list(self._biases[0])

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        return self.model.layer_sizes

    def point_model(self, i: int) -> BoltzmannModel:
        """P_i as a plain machine (weight scale folded in)."""
        return self._units.machine(self._weights[i], self._biases[i])

    def truncated(self, point: int) -> TrajectoryPath:
        """The path through P_0, ..., P_point (knots rescaled to [0, 1]): the annealing path of point `point`."""
        if not 1 <= point <= self.num_links:
            raise ValueError(f"point must be in [1, {self.num_links}], got {point}")
        kept = [p for p in self.checkpoint_points if p <= point]
        return TrajectoryPath(self._models[: point + 1], clamped=self.clamped, checkpoint_points=kept)

    def with_clamped(self, clamped: Collection[int]) -> TrajectoryPath:
        """The same path whose kernel keeps the even layers `clamped` fixed (states carry over: the inputs a state
        keeps are the same for both)."""
        for l in clamped:
            if not (0 <= l < self.model.num_layers and l % 2 == 0):
                raise ValueError(f"only even layers (kept in the state) can be clamped; got layer {l}")
        path = copy.copy(self)
        path.clamped = tuple(sorted(clamped))
        return path

    # ---------------------------------------------------------------- parameters along the path
    def _in_link(self, link: int, beta: float) -> bool:
        return self.knots[link] <= beta <= self.knots[link + 1]

    def _link_for(self, state: TrajectoryState, beta: float) -> int:
        """A link containing beta: the one whose inputs the state keeps when it contains beta."""
        cached = self._cached_link(state)
        if cached is not None and self._in_link(cached, beta):
            return cached
        return self._locate(beta)[0]

    def _common_link(self, beta_a: float, beta_b: float) -> Optional[int]:
        lo, hi = min(beta_a, beta_b), max(beta_a, beta_b)
        i, _ = self._locate(lo)
        return i if hi <= self.knots[i + 1] else None

    def at(self, beta: float) -> BoltzmannModel:
        """The machine at `beta` (the points' own tensors at the knots, interpolated ones between them)."""
        cached = self._at_cache.get(beta)
        if cached is not None:
            return cached
        i, u = self._locate(beta)
        if u == 0.0 or u == 1.0:
            model = self.point_model(i if u == 0.0 else i + 1)
        else:
            # torch.lerp is exact at both ends, so the parameters are continuous across the knots.
            weights = [torch.lerp(a, b, u) for a, b in zip(self._weights[i], self._weights[i + 1])]
            biases = [torch.lerp(a, b, u) for a, b in zip(self._biases[i], self._biases[i + 1])]
            model = self._units.machine(weights, biases)
        if len(self._at_cache) >= 4:  # a transition and the weight updates on either side ask for the same betas
            self._at_cache.pop(next(iter(self._at_cache)))
        self._at_cache[beta] = model
        return model

    def _bias64(self, l: int, link: int, u: float) -> Tensor:
        """Layer l's bias at (link, u) in float64, shaped (n_l,)."""
        a, b = self._biases64[link][l], self._biases64[link + 1][l]
        return a if u == 0.0 else b if u == 1.0 else torch.lerp(a, b, u)

    # ---------------------------------------------------------------- states
    def state_from_layers(self, layers: Sequence[Optional[Tensor]]) -> TrajectoryState:
        """The state for given even layers (odd entries are ignored)."""
        n = self.model.num_layers
        if len(layers) != n:
            raise ValueError(f"expected {n} layers (None for odd ones), got {len(layers)}")
        return TrajectoryState(tuple(x if l % 2 == 0 else None for l, x in enumerate(layers)))

    def select_chains(self, state: TrajectoryState, index: Tensor) -> TrajectoryState:
        """The state of the chains `index` (an integer tensor of positions in the state's one batch dimension,
        shaped (M',), repeats allowed: resampled chains), with the link inputs the state keeps."""
        layers = tuple(None if x is None else x[index] for x in state.layers)
        ends = state.ends
        if ends is not None:
            token, link, lo, hi = ends
            pick = lambda inputs: tuple(None if x is None else x[index] for x in inputs)  # noqa: E731
            ends = (token, link, pick(lo), pick(hi))
        return TrajectoryState(layers, ends)

    def _cached_link(self, state: TrajectoryState) -> Optional[int]:
        ends = state.ends
        return ends[1] if ends is not None and ends[0] is self._token else None

    def _with_ends(self, state: TrajectoryState, link: int) -> TrajectoryState:
        """The state keeping the odd layers' inputs under P_link and P_{link+1} (computed unless it has them)."""
        if self._cached_link(state) == link:
            return state
        lo, hi = self.point_model(link), self.point_model(link + 1)
        odd = range(1, self.model.num_layers, 2)
        inputs_lo = tuple(lo.unscaled_input(state.layers, l) if l in odd else None for l in range(len(state.layers)))
        inputs_hi = tuple(hi.unscaled_input(state.layers, l) if l in odd else None for l in range(len(state.layers)))
        return state._replace(ends=(self._token, link, inputs_lo, inputs_hi))

    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the independent start: every unit independent, sum of softplus(c), in float64."""
        self._require_independent_start("log Z_0")
        return self._units.log_partition(self._biases64[0])

    def _require_independent_start(self, what: str) -> None:
        if not self.start_is_independent:
            raise ValueError(
                f"{what} needs an independent start (P_0 without weights); this path starts at a machine with "
                "weights: build it with trajectory_path(checkpoints, base_biases), which prepends one"
            )

    def sample_base_layer(self, l: int, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        """Exact samples of layer `l` under the independent start, shaped (*batch_shape, n_l)."""
        self._require_independent_start("sampling the start")
        return self._units.sample_independent(l, self._biases[0][l], tuple(batch_shape), generator)

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> TrajectoryState:
        """`num_chains` exact samples of the independent start, batch shape (num_chains,)."""
        layers = [
            self.sample_base_layer(l, (num_chains,), generator) if l % 2 == 0 else None
            for l in range(self.model.num_layers)
        ]
        return self.state_from_layers(layers)

    def log_base_prob(self, x: Tensor, l: int) -> Tensor:
        """log p_0(x_l) of layer `l` under the independent start, float64, shaped (*batch,)."""
        self._require_independent_start("log p_0")
        return self._units.log_independent(l, self._biases64[0][l], x)

    # ---------------------------------------------------------------- densities and kernel
    def _odd_inputs64(self, state: TrajectoryState, beta: float) -> tuple[TrajectoryState, list, int, float]:
        """(state, per-layer inputs in float64 at beta for odd layers, link, u), from the state's link ends when they
        cover beta, else computed directly at beta (the state is then returned unchanged)."""
        cached = self._cached_link(state)
        if cached is not None and self._in_link(cached, beta):
            u = self._u(cached, beta)
            _, _, lo, hi = state.ends
            inputs = [None if a is None else torch.lerp(a.double(), b.double(), u) for a, b in zip(lo, hi)]
            return state, inputs, cached, u
        link, u = self._locate(beta)
        model = self.at(beta)
        inputs = [
            model.unscaled_input(state.layers, l).double() if l % 2 == 1 else None for l in range(model.num_layers)
        ]
        return state, inputs, link, u

    def log_density(self, state: TrajectoryState, beta: float) -> Tensor:
        """log f_beta(x_even), odd layers summed out, float64, shaped (*batch,)."""
        _, inputs, link, u = self._odd_inputs64(state, beta)
        total = None
        for l, x in enumerate(state.layers):
            bias = self._bias64(l, link, u)
            if x is None:
                term = self._units.log_normalizer(l, bias, inputs[l])
            else:
                term = self._units.log_potential(l, bias, x)
            total = term if total is None else total + term
        return total

    def log_density_ratio(self, state: TrajectoryState, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(x) - log f_{beta_from}(x), float64, shaped (*batch,)."""
        return self.weight_update(state, beta_from, beta_to)[0]

    def weight_update(self, state: TrajectoryState, beta_from: float, beta_to: float) -> tuple[Tensor, TrajectoryState]:
        """(log_density_ratio, the state keeping the inputs of the link both betas lie in, for the transition at
        beta_to). Computed term by term in float64: the difference of each odd unit's softplus and of the even
        layers' bias terms, not of two large sums."""
        batch = state.layers[0].shape[:-1]
        if beta_from == beta_to:
            return torch.zeros(batch, dtype=torch.float64, device=state.layers[0].device), state
        link = self._common_link(beta_from, beta_to)
        if link is None:  # a step across knots: each end from its own link
            return self.log_density(state, beta_to) - self.log_density(state, beta_from), state
        state = self._with_ends(state, link)
        u0, u1 = self._u(link, beta_from), self._u(link, beta_to)
        _, _, lo, hi = state.ends
        total = torch.zeros(batch, dtype=torch.float64, device=state.layers[0].device)
        for l, x in enumerate(state.layers):
            b0, b1 = self._bias64(l, link, u0), self._bias64(l, link, u1)
            if x is None:
                total += self._units.log_normalizer_step(l, lo[l].double(), hi[l].double(), u0, u1, b0, b1)
            else:
                total += self._units.potential_step(l, b0, b1, x, batch)
        return total, state

    def transition(self, state: TrajectoryState, beta: float, generator: torch.Generator) -> TrajectoryState:
        """Block Gibbs step at `beta`: the odd layers given the even ones, then the even ones given the odd ones
        (reversible, leaves p_beta(x_even) invariant; clamped even layers are kept, and the step then samples p_beta
        of the others given them). `state` is not modified."""
        link = self._link_for(state, beta)
        state = self._with_ends(state, link)
        u = self._u(link, beta)
        model = self.at(beta)
        _, _, lo, hi = state.ends
        layers = list(state.layers)
        for l in range(1, model.num_layers, 2):
            layers[l] = self._units.sample_odd(model, l, torch.lerp(lo[l], hi[l], u), generator)
        for l in range(0, model.num_layers, 2):
            if l not in self.clamped:
                layers[l] = model.sample_layer(layers, l, generator)
        return TrajectoryState(tuple(x if l % 2 == 0 else None for l, x in enumerate(layers)))


def trajectory_path(
    checkpoints: Sequence[BoltzmannModel], base_biases: Optional[Sequence[Tensor]] = None
) -> Union[TrajectoryPath, FullyVisibleTrajectoryPath]:
    """The annealing path of a training run: an independent start, then the checkpoints theta_1, ..., theta_T in
    training order (the last one the target at beta = 1).

    The start is the first checkpoint itself when every one of its weights is zero and no `base_biases` are given;
    otherwise the independent distribution with `base_biases` (one vector per layer; uniform when None, or
    `data_base_rates(model, train_data)`, the distribution a training run's visible biases usually start from) is
    prepended. `path.checkpoint_points` lists the points that are checkpoints. Fully visible models get their own
    path through the fields and couplings (`fully_visible_trajectory_path`; `base_biases` their base's fields).
    """
    checkpoints = list(checkpoints)
    check_trajectory(checkpoints)
    if isinstance(checkpoints[0], FullyVisibleModel):
        return fully_visible_trajectory_path(checkpoints, base_biases)
    first = checkpoints[0]
    if base_biases is None and _independent(first) and len(checkpoints) > 1:
        return TrajectoryPath(checkpoints)
    units = layers_of(first)
    base = units.uniform_base(first) if base_biases is None else list(base_biases)
    if len(base) != first.num_layers:
        raise ValueError(f"need {first.num_layers} base bias vectors, got {len(base)}")
    for l, (c, b) in enumerate(zip(base, first.biases)):
        if c.shape != b.shape:
            raise ValueError(f"base bias {l} has shape {tuple(c.shape)}, the model's has {tuple(b.shape)}")
        if not bool(torch.isfinite(c).all()):
            raise ValueError(f"base bias {l} has NaN or infinite entries")
    start = units.machine(
        [torch.zeros_like(w) for w in first.weights], [c.to(dtype=first.dtype, device=first.device) for c in base]
    )
    return TrajectoryPath([start, *checkpoints], checkpoint_points=range(1, len(checkpoints) + 1))
