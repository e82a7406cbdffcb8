"""Log Z along training, online: persistent AIS chains that follow the model as it trains.

At the first call the chains start from exact samples of the independent start and anneal to the model in
`start_steps` sub-steps; at every later call they anneal through the parameters since the last call (linear
interpolation, `steps` sub-steps), their log-weights carried along. The calls' pieces together are one AIS run along
the trajectory path through every model seen (`trajectory_path(models, base)` with the schedule `start_steps`,
`steps`, `steps`, ...): the piece that ends at a call's model leaves weights unbiased for that model's Z, so every
call gives log Z at a fraction of a fresh AIS's cost. The parameters of every call are kept (cloned), so that RAISE
can run back along the same path: the conservative side, and a verdict, on demand.
"""

from __future__ import annotations

import time
from typing import Optional

import torch
from torch import Tensor

from raise_eval import exact as exact_mod
from raise_eval.annealing import anneal
from raise_eval.estimators.adaptive_links import PilotChains
from raise_eval.estimators.raise_ import raise_log_likelihood
from raise_eval.estimators.smc import ReplicateGroups
from raise_eval.estimators.unnormalized import log_unnormalized_estimate
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.paths.trajectory import TrajectoryPath, check_trajectory, trajectory_path
from raise_eval.schedules import linear_schedule
from raise_eval.seeds import TRAJECTORY_OFFSETS
from raise_eval.stats import summarize_log_weights
from raise_eval.trajectory.settings import TrackSettings

PILOT_TARGET_CESS = 0.9  # the pilot's sub-steps keep this conditional ESS (a fraction of its chains)


class TrajectoryTracker:
    """Persistent AIS chains following one training run (see the module docstring).

    Args:
        settings: the `TrackSettings` (chains, sub-steps per call, the first call's sub-steps).
        base_biases: the independent start's biases, one vector per layer (uniform when None).
        seed: seeds the tracker's own generator (on the model's device, made at the first call).
    """

    def __init__(self, settings: TrackSettings, base_biases: Optional[list[Tensor]] = None, seed: int = 0):
        self.settings = settings
        self.base_biases = base_biases
        self.seed = seed
        self.models: list[LayeredBoltzmannMachine] = []  # the parameters of every call, cloned
        # The independent start the first call annealed from: kept, so that RAISE follows the same path even when the
        # first model has no weights (trajectory_path would then take that model as the start and drop a link).
        self.start: Optional[LayeredBoltzmannMachine] = None
        self.link_steps: list[int] = []  # sub-steps of each piece
        self.state = None
        self.log_weights: Optional[Tensor] = None
        self.generator: Optional[torch.Generator] = None
        self.groups: Optional[ReplicateGroups] = None  # with resample_ess above 0
        self.segment_start = 0  # the index (in models) of the model the chains last annealed to from the start
        self.anchors: list[int] = []  # the calls (indices in models) re-anchored in temperature
        self.pilot: Optional[PilotChains] = None  # with anchor_margin: the pilot's chains and stream
        self.pilot_generator: Optional[torch.Generator] = None
        self.probe_gain: list[float] = []  # per later call, the pilot's probe log Z minus its trajectory's

    @property
    def num_steps(self) -> int:
        """Annealing steps so far (every piece's sub-steps)."""
        return sum(self.link_steps)

    def advance(self, model: LayeredBoltzmannMachine) -> float:
        """Anneal the chains to `model` (from the start at the first call or after a re-anchoring, else from the last
        call's model); returns the seconds it took. `model` is copied: later changes to its tensors do not reach the
        tracker."""
        start = time.perf_counter()
        model = _copy(model)
        if self.models:
            check_trajectory([self.models[-1], model], names=["the model of the last call", "this call's model"])
        if self.generator is None:
            self.generator = torch.Generator(device=model.device).manual_seed(self.seed)
        if not self.models:
            self.start_pilot(model)
        anchor = not self.models or self._pilot_says_anchor(model)
        if anchor:
            path = trajectory_path([model], self.base_biases)  # one checkpoint: the start is always prepended
            self.start = path.points[0]
            self.segment_start = len(self.models)
            steps = self.settings.start_steps
            state = path.sample_initial(self.settings.chains, self.generator)
            log_weights = torch.full(
                (self.settings.chains,), path.log_partition_initial, dtype=torch.float64, device=model.device
            )
            if self.groups is not None:
                self.groups = self._new_groups(model.device)
        else:
            path = TrajectoryPath([self.models[-1], model])
            steps = self.settings.steps
            state = path.state_from_layers(list(self.state.layers))
            log_weights = self.log_weights
        if self.settings.resample_ess == 0:
            self.state, self.log_weights = anneal(
                path, state, linear_schedule(steps), generator=self.generator, log_weights=log_weights
            )
        else:
            self.state, self.log_weights = self._smc(path, state, log_weights, steps, model.device)
        self.models.append(model)
        self.link_steps.append(steps)
        if anchor and self.models[:-1]:
            self.anchors.append(len(self.models) - 1)
        return time.perf_counter() - start

    def _new_groups(self, device) -> ReplicateGroups:
        s = self.settings
        return ReplicateGroups(s.replicates, s.chains // s.replicates, float(s.resample_ess), device)

    def _smc(self, path, state, log_weights: Tensor, steps: int, device):
        """`steps` sub-steps along `path` with the replicate groups resampled (and the chains moved by
        `rejuvenation_sweeps` sweeps) after every sub-step whose ESS falls below the threshold."""
        if self.groups is None:
            self.groups = self._new_groups(device)
        betas = linear_schedule(steps).tolist()
        for j in range(steps):
            step = torch.tensor(betas[j : j + 2], dtype=torch.float64)
            state, log_weights = anneal(path, state, step, generator=self.generator, log_weights=log_weights)
            index, log_weights = self.groups.resample(log_weights, self.generator)
            if index is not None:
                state = path.select_chains(state, index)
                for _ in range(self.settings.rejuvenation_sweeps):
                    state = path.transition(state, betas[j + 1], self.generator)
        return state, log_weights

    def _pilot_says_anchor(self, model) -> bool:
        """With `anchor_margin`: advance the pilot along the trajectory to `model`, probe `model` in temperature (both
        on the pilot's own stream, so that the choice does not depend on the main chains) and say whether the probe's
        log Z is higher by more than the margin (the pilot then continues from the probe's chains)."""
        margin = self.settings.anchor_margin
        if margin is None:
            return False
        s = self.settings
        options = dict(target_cess=PILOT_TARGET_CESS, resample_ess=0.5, sweeps=s.rejuvenation_sweeps)
        link = TrajectoryPath([self.models[-1], model])
        self.pilot.moved_to(link).advance_link(0, {**options, "max_link_steps": s.steps}, self.pilot_generator)
        probe = PilotChains(trajectory_path([model], self.base_biases), s.pilot_chains, self.pilot_generator)
        probe.advance_link(0, {**options, "max_link_steps": s.start_steps}, self.pilot_generator)
        self.probe_gain.append(probe.log_z() - self.pilot.log_z())
        if self.probe_gain[-1] > margin:
            self.pilot = probe
            return True
        return False

    def start_pilot(self, model) -> None:
        """The pilot's chains annealed to the first model (with `anchor_margin`)."""
        if self.settings.anchor_margin is None:
            return
        self.pilot_generator = torch.Generator(device=model.device).manual_seed(self.seed + TRAJECTORY_OFFSETS["pilot"])
        self.pilot = PilotChains(trajectory_path([model], self.base_biases), self.settings.pilot_chains,
                                 self.pilot_generator)  # fmt: skip
        options = dict(target_cess=PILOT_TARGET_CESS, resample_ess=0.5, sweeps=self.settings.rejuvenation_sweeps,
                       max_link_steps=self.settings.start_steps)  # fmt: skip
        self.pilot.advance_link(0, options, self.pilot_generator)

    def log_z(self):
        """The chains' summary (`raise_eval.stats.WeightSummary`): log Z-hat of the last call's model, its standard
        error, ESS and ±3σ interval; with resampling, over the replicate groups' Z-hats (ESS the chains')."""
        if self.log_weights is None:
            raise ValueError("the tracker has seen no model yet")
        if self.groups is None:
            return summarize_log_weights(self.log_weights)
        summary = summarize_log_weights(self.groups.log_z(self.log_weights).cpu())
        summary.ess = self.groups.ess(self.log_weights).sum().cpu()
        return summary

    def path(self) -> TrajectoryPath:
        """The trajectory path the chains have followed (the start, then every call's model) and its schedule's
        sub-steps per link, for RAISE."""
        if self.start is None:
            raise ValueError("the tracker has seen no model yet")
        models = self.models[self.segment_start :]  # since the last re-anchoring: the path the chains followed
        return TrajectoryPath([self.start, *models], checkpoint_points=range(1, len(models) + 1))

    def raise_(self, test: Tensor, num_chains: int, generator: torch.Generator):
        """RAISE along the whole trajectory so far, for the test vectors `test` (N, n_visible): the conservative side
        of the last call's model (`raise_log_likelihood`'s result)."""
        path = self.path()
        betas = path.schedule(self.link_steps[self.segment_start :])
        return raise_log_likelihood(path, test, betas, num_chains, generator=generator)


def _copy(model: LayeredBoltzmannMachine) -> LayeredBoltzmannMachine:
    """The model with its own detached copies of the parameters, weight scale folded in, in the same class."""
    weights = [w.detach().clone() * model.weight_scale if model.weight_scale != 1.0 else w.detach().clone()
               for w in model.weights]  # fmt: skip
    biases = [b.detach().clone() for b in model.biases]
    return type(model)._trusted(weights, biases, 1.0)


def exact_log_f(model, test: Tensor, max_units: int) -> Optional[Tensor]:
    """log f(v) of the test vectors (float64) when it is exact and cheap: an RBM's closed form, or a DBM's enumeration
    over at most 2^max_units states; None otherwise."""
    cost = exact_mod.exact_cost(model, 1)
    if not cost.enumerable:
        return None
    units = exact_mod.log_f_units(model)
    if units > max_units:
        return None
    return exact_mod.log_unnormalized_visible(model, test, max_units=max(units, 1)).double()


def exact_log_z(model, max_units: int) -> Optional[float]:
    cost = exact_mod.exact_cost(model, 1)
    units = cost.log_z_units
    return None if not cost.enumerable or units > max_units else float(exact_mod.log_partition(model, max_units=units))


def estimated_log_f(model, test: Tensor, num_samples: int, generator: torch.Generator) -> Tensor:
    """log f(v) of a DBM's test vectors by importance sampling (mean-field proposal), float64."""
    return log_unnormalized_estimate(
        model, test, method="importance", num_samples=num_samples, generator=generator
    ).log_unnormalized.double()
