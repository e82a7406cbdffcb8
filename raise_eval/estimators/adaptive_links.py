"""Adaptive links along a training trajectory: a pilot chooses the sub-steps of every link and where to re-anchor in
temperature; a fresh sequential Monte Carlo run follows what it chose.

The pilot (its own chains and generator: `raise_eval.seeds`, stage 'pilot') runs SMC along the trajectory path
(`TrajectoryPath`, points P_0 = the independent start, P_1 .. P_T). Inside each link it chooses the next parameter
point by bisection, as adaptive tempering chooses the next beta: the farthest point whose incremental weights
l(x) = log f_next(x) - log f_now(x) (float64, `path.weight_update`) keep the conditional effective sample size

    CESS = (sum_i W_i exp(l_i))^2 / sum_i W_i exp(2 l_i)    (W the chains' normalised weights)

at or above `target_cess` (a fraction of the chains), at most `max_link_steps` sub-steps per link. After each
sub-step the chains are resampled when their ESS falls below `resample_ess` and then moved by `sweeps` Gibbs sweeps.

Re-anchoring. Block-Gibbs chains that follow the parameters cannot reach a mode the model acquires far from where
they are: their weights cannot show it (no chain is there), so the trajectory's log Z falls behind by many nats
with a healthy-looking ESS. The temperature path from the independent start to the same checkpoint crosses no such
barrier at small beta. At every checkpoint the pilot therefore also anneals fresh pilot chains to it in temperature
(the link from P_0 straight to P_i, itself adaptive); when that estimate of log Z exceeds the trajectory's by more
than `anchor_margin` nats (both err low in expectation when modes are missed), the checkpoint becomes an anchor:
the pilot continues from the temperature chains, and the fresh run restarts there from the start through the
temperature link (a new segment of the run: TrajectoryPath([P_0, P_a, P_{a+1}, ...])).

Why a pilot: a schedule or an anchor chosen from the main chains' own weights depends on them, and AIS's weights
are unbiased only for a schedule fixed before the chains run. The fresh run (`adaptive_trajectory_pass`) uses the
plan as a fixed schedule, with its own generator, so each checkpoint's Z-hat is the unbiased SMC estimate of one
segment's run (`smc_ladder_pass`), its error the replicate groups' spread.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor
from tqdm.auto import tqdm

from raise_eval.estimators.smc import SMCLadderPass, smc_ladder_pass
from raise_eval.paths.trajectory import TrajectoryPath

BISECTION_ITERATIONS = 40  # halvings of a link's remaining width: far finer than any useful sub-step
# With more sweeps allowed than the least: sweep after a resampling until the chains' log f at the current point
# correlates with the resampled chains' (duplicates) below this, so that the copies have moved apart.
SWEEP_CORRELATION = 0.5


def _correlation(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of two (M,) float64 vectors; 0 where either does not vary."""
    a, b = a - a.mean(), b - b.mean()
    scale = float(a.norm() * b.norm())
    return float((a * b).sum()) / scale if scale > 0 else 0.0


@dataclass
class LinkPlan:
    """What the pilot chose for a trajectory path of T links (points 0 .. T).

    fractions: per link i (from P_i to P_{i+1}), the positions u in (0, 1] of its sub-steps' ends, increasing, the
        last 1.0: its betas are knot_i + (knot_{i+1} - knot_i) u, on whichever path the link is part of.
    anchors: the points (>= 2, increasing) where the fresh run restarts from the start in temperature.
    anchor_fractions: per anchor a, the temperature link's positions (from P_0 straight to P_a).
    sweeps: Gibbs sweeps after a resampling (the least); link_sweeps: per link, those the pilot chose (sweeps when
        empty); anchor_sweeps: per anchor, its temperature link's.
    pilot_log_z: per point, the pilot's log Z-hat (after any anchoring there), shaped (T + 1,).
    probe_gain: per checkpoint point probed, the temperature probe's log Z-hat minus the trajectory's.
    pilot_chains, seconds: the pilot's chains and wall time; pilot_steps: its sub-steps, probes included.
    """

    fractions: list[list[float]]
    anchors: list[int] = field(default_factory=list)
    anchor_fractions: dict[int, list[float]] = field(default_factory=dict)
    sweeps: int = 1
    link_sweeps: list[int] = field(default_factory=list)
    anchor_sweeps: dict[int, int] = field(default_factory=dict)
    pilot_log_z: list[float] = field(default_factory=list)
    probe_gain: dict[int, float] = field(default_factory=dict)
    pilot_chains: int = 0
    seconds: float = 0.0
    pilot_steps: int = 0

    @property
    def num_links(self) -> int:
        return len(self.fractions)

    def segments(self) -> list[tuple[int, int]]:
        """The fresh run's segments as ranges [a, b) of the path's points: the first from point 0, then one from
        each anchor."""
        starts = [0, *self.anchors]
        ends = [*self.anchors, self.num_links + 1]
        return list(zip(starts, ends))

    def segment_fractions(self, a: int, b: int) -> list[list[float]]:
        """The per-link positions along segment [a, b)'s own path (its link 0 the temperature link when a > 0)."""
        if a == 0:
            return [list(f) for f in self.fractions[: b - 1]]
        return [list(self.anchor_fractions[a])] + [list(f) for f in self.fractions[a : b - 1]]

    def segment_sweeps(self, a: int, b: int) -> list[int]:
        """The sweeps after each sub-step along segment [a, b)'s own path (the links' counts, per sub-step)."""
        links = range(a, b - 1) if a == 0 else range(a - 1, b - 1)  # link a - 1 stands for the anchor's own
        counts = []
        for i, positions in zip(links, self.segment_fractions(a, b)):
            here = self.anchor_sweeps.get(a) if a > 0 and i == a - 1 else None
            if here is None:
                here = self.link_sweeps[i] if self.link_sweeps else self.sweeps
            counts += [here] * len(positions)
        return counts

    def num_steps(self) -> int:
        """The fresh run's sub-steps over all segments."""
        return sum(sum(len(f) for f in self.segment_fractions(a, b)) for a, b in self.segments())


def fraction_schedule(path: TrajectoryPath, fractions: list[list[float]]) -> Tensor:
    """The betas along `path` (T links) with link i's sub-steps ending at positions `fractions[i]` (the last 1.0),
    shaped (K + 1,), float64, every knot exact."""
    if len(fractions) != path.num_links:
        raise ValueError(f"fractions need {path.num_links} links' positions, got {len(fractions)}")
    betas = [0.0]
    for i, link in enumerate(fractions):
        lo, hi = path.knots[i], path.knots[i + 1]
        if not link or link[-1] != 1.0 or any(not 0.0 < u <= 1.0 for u in link):
            raise ValueError(f"link {i}'s positions must lie in (0, 1] and end at 1.0, got {link}")
        betas += [hi if u == 1.0 else lo + (hi - lo) * u for u in link]
    return torch.tensor(betas, dtype=torch.float64)


def segment_path(path: TrajectoryPath, a: int, b: int) -> TrajectoryPath:
    """Segment [a, b) of `path` as a path of its own: P_0 .. P_{b-1} for a = 0, else P_0 (the independent start),
    then P_a .. P_{b-1} (its first link the temperature path to P_a)."""
    points = path.points
    checkpoints = set(path.checkpoint_points)
    if a == 0:
        return TrajectoryPath(points[:b], checkpoint_points=[p for p in range(b) if p in checkpoints])
    return TrajectoryPath(
        [points[0], *points[a:b]], checkpoint_points=[k + 1 for k, p in enumerate(range(a, b)) if p in checkpoints]
    )


def conditional_ess(log_w: Tensor, increment: Tensor) -> float:
    """CESS of the increments `increment` (M,) for chains weighted `log_w` (M,), as a fraction of 1 (float64)."""
    log_p = log_w - torch.logsumexp(log_w, 0)
    value = 2 * torch.logsumexp(log_p + increment, 0) - torch.logsumexp(log_p + 2 * increment, 0)
    return float(torch.exp(value)) if bool(torch.isfinite(value)) else 0.0


class PilotChains:
    """One population of pilot chains on a path: state, log-weights since the last resampling (float64, (M,)) and
    the log Z folded in at resamplings (log Z_0 included)."""

    def __init__(self, path: TrajectoryPath, chains: int, generator: torch.Generator):
        self.path = path
        self.state = path.sample_initial(chains, generator)
        self.log_w = torch.zeros(chains, dtype=torch.float64, device=self.state.layers[0].device)
        self.folded = float(path.log_partition_initial)
        self.steps = 0
        self.link_sweeps = 0  # the most sweeps after a resampling in the current link

    def moved_to(self, path: TrajectoryPath) -> PilotChains:
        """The same chains on `path` (e.g. the next link of a run that goes on), their weights kept."""
        self.path = path
        self.state = path.state_from_layers(list(self.state.layers))
        return self

    def log_z(self) -> float:
        return self.folded + float(torch.logsumexp(self.log_w, 0)) - math.log(self.log_w.numel())

    def advance_link(self, link: int, options: dict, generator: torch.Generator) -> list[float]:
        """Cross link `link` of the path by CESS bisection; the positions of the sub-steps' ends."""
        path = self.path
        lo, hi = path.knots[link], path.knots[link + 1]
        least = (hi - lo) / options["max_link_steps"]
        target = options["target_cess"]
        beta, positions = lo, []
        self.link_sweeps = options["sweeps"]
        while beta < hi:
            increment, state = path.weight_update(self.state, beta, hi)
            if hi - beta <= least or conditional_ess(self.log_w, increment) >= target:
                nxt = hi
            else:
                good, bad = beta, hi
                for _ in range(BISECTION_ITERATIONS):
                    mid = 0.5 * (good + bad)
                    if conditional_ess(self.log_w, path.weight_update(state, beta, mid)[0]) >= target:
                        good = mid
                    else:
                        bad = mid
                    if bad - good < 0.25 * least:
                        break
                nxt = min(max(good, beta + least), hi)
                if hi - nxt < 0.25 * least:  # no sliver of a step before the knot
                    nxt = hi
                increment, state = path.weight_update(state, beta, nxt)
            self.log_w = self.log_w + increment
            self.state = path.transition(state, nxt, generator)
            positions.append(1.0 if nxt == hi else (nxt - lo) / (hi - lo))
            beta = nxt
            self.steps += 1
            self._resample(beta, options, generator)
        return positions

    def _resample(self, beta: float, options: dict, generator: torch.Generator) -> None:
        p = torch.softmax(self.log_w, 0)
        if float(1.0 / (p * p).sum()) >= options["resample_ess"] * self.log_w.numel():
            return
        self.folded += float(torch.logsumexp(self.log_w, 0)) - math.log(self.log_w.numel())
        m = self.log_w.numel()
        cdf = torch.cumsum(p, 0)
        cdf[-1] = 1.0
        u = torch.rand(1, generator=generator, dtype=torch.float64, device=p.device)
        index = torch.searchsorted(cdf, (u + torch.arange(m, device=p.device)) / m, right=True).clamp_(max=m - 1)
        self.state = self.path.select_chains(self.state, index)
        self.log_w = torch.zeros_like(self.log_w)
        least, most = options["sweeps"], options.get("max_sweeps", options["sweeps"])
        before = self.path.log_density(self.state, beta) if most > least else None
        done = 0
        while done < most:
            if done >= least and _correlation(before, self.path.log_density(self.state, beta)) < SWEEP_CORRELATION:
                break
            self.state = self.path.transition(self.state, beta, generator)
            done += 1
        self.link_sweeps = max(self.link_sweeps, done)


def plan_links(
    path: TrajectoryPath,
    *,
    pilot_chains: int,
    generator: torch.Generator,
    target_cess: float,
    resample_ess: float,
    sweeps: int,
    max_link_steps: int,
    anchor_margin: Optional[float],
    max_sweeps: Optional[int] = None,
    progress: bool = False,
) -> LinkPlan:
    """The pilot (module docstring): the sub-steps of every link, and the anchors (none when `anchor_margin` is
    None). `path` must start at an independent P_0."""
    if not 0.0 < target_cess < 1.0:
        raise ValueError(f"target_cess must be a fraction in (0, 1), got {target_cess}")
    options = dict(target_cess=target_cess, resample_ess=resample_ess, sweeps=sweeps, max_link_steps=max_link_steps,
                   max_sweeps=max(sweeps, sweeps if max_sweeps is None else max_sweeps))  # fmt: skip
    start = time.perf_counter()
    chains = PilotChains(path, pilot_chains, generator)
    plan = LinkPlan(fractions=[], sweeps=sweeps, pilot_chains=pilot_chains)
    plan.pilot_log_z.append(chains.log_z())
    checkpoints = set(path.checkpoint_points)
    bar = tqdm(total=path.num_links, desc="pilot of the links", disable=not progress, leave=False, mininterval=0.5)
    try:
        for link in range(path.num_links):
            plan.fractions.append(chains.advance_link(link, options, generator))
            plan.link_sweeps.append(chains.link_sweeps)
            point = link + 1
            if anchor_margin is not None and point >= 2 and point in checkpoints:
                probe = PilotChains(TrajectoryPath([path.points[0], path.points[point]]), pilot_chains, generator)
                positions = probe.advance_link(0, options, generator)
                plan.pilot_steps += probe.steps
                gain = probe.log_z() - chains.log_z()
                plan.probe_gain[point] = gain
                if gain > anchor_margin:
                    plan.anchors.append(point)
                    plan.anchor_fractions[point] = positions
                    plan.anchor_sweeps[point] = probe.link_sweeps
                    chains.state = path.state_from_layers(list(probe.state.layers))
                    chains.log_w, chains.folded = probe.log_w, probe.folded
            plan.pilot_log_z.append(chains.log_z())
            bar.update(1)
    finally:
        bar.close()
    plan.pilot_steps += chains.steps
    plan.seconds = time.perf_counter() - start
    return plan


def adaptive_trajectory_pass(
    path: TrajectoryPath,
    plan: LinkPlan,
    num_chains: int,
    *,
    generator: torch.Generator,
    resample_ess: float,
    replicates: int,
    progress: bool = False,
) -> SMCLadderPass:
    """The fresh run along `plan`: one `smc_ladder_pass` per segment (from P_0, then from each anchor through its
    temperature link), stitched into one `SMCLadderPass` read at every point of `path` (rungs 0 .. T; `betas` the
    first segment's schedule). BAR's log-ratios across a segment boundary come from the chains of the two
    segments at the two points (samples of each, as everywhere)."""
    if plan.num_links != path.num_links:
        raise ValueError(f"the plan has {plan.num_links} links, the path {path.num_links}")
    start = time.perf_counter()
    count = path.num_links + 1
    log_weights = torch.zeros(count, num_chains, dtype=torch.float64)
    replicate_log_z = torch.zeros(count, replicates, dtype=torch.float64)
    ess = torch.zeros(count, dtype=torch.float64)
    forward = torch.zeros(count - 1, num_chains, dtype=torch.float64)
    reverse = torch.zeros_like(forward)
    resamplings = [0] * count
    done_resamplings = 0
    previous_final = None  # the last segment's chains at its last point
    first_betas = None
    for a, b in plan.segments():
        piece = segment_path(path, a, b)
        betas = fraction_schedule(piece, plan.segment_fractions(a, b))
        knots = piece.knot_indices(betas)
        run = smc_ladder_pass(
            piece, betas, num_chains, rungs=knots, generator=generator, resample_ess=resample_ess,
            replicates=replicates, sweeps=plan.segment_sweeps(a, b), progress=progress,
            desc=f"SMC along points {a}-{b - 1}", states_at=(1,) if a > 0 else (),
        )  # fmt: skip
        first_betas = betas if first_betas is None else first_betas
        local = list(range(b)) if a == 0 else [None, *range(a, b)]  # segment rung -> path point
        for r, point in enumerate(local):
            if point is None:
                continue
            log_weights[point] = run.log_weights[r]
            replicate_log_z[point] = run.replicate_log_z[r]
            ess[point] = run.ess[r]
            resamplings[point] = done_resamplings + run.resamplings[r]
            if r + 1 < len(local):
                forward[point] = run.forward[r]
                reverse[point] = run.reverse[r]
        if a > 0:  # the link from the last segment's end to this anchor
            here = path.state_from_layers(list(run.rung_states[1].layers))
            forward[a - 1] = path.log_density_ratio(previous_final, path.knots[a - 1], path.knots[a]).to("cpu")
            reverse[a - 1] = path.log_density_ratio(here, path.knots[a], path.knots[a - 1]).to("cpu")
        previous_final = path.state_from_layers(list(run.final_state.layers))
        done_resamplings += run.resamplings[-1]
    return SMCLadderPass(
        betas=first_betas, rungs=list(range(count)), log_weights=log_weights, forward=forward, reverse=reverse,
        num_steps=plan.num_steps(), num_chains=num_chains, seconds=time.perf_counter() - start,
        final_state=previous_final, replicate_log_z=replicate_log_z, ess=ess, resamplings=resamplings,
        replicates=replicates, resample_ess=float(resample_ess), sweeps=plan.sweeps,
    )  # fmt: skip


def plan_piece(path: TrajectoryPath, plan: LinkPlan, point: int) -> tuple[TrajectoryPath, Tensor]:
    """(the path the fresh run reached point `point` (>= 1) along: its segment truncated there, and that path's
    betas under the plan), for RAISE, which runs the same schedule reversed."""
    if not 1 <= point <= path.num_links:
        raise ValueError(f"point must be in [1, {path.num_links}], got {point}")
    a, b = next((a, b) for a, b in plan.segments() if a <= point < b)
    local = point if a == 0 else point - a + 1
    piece = segment_path(path, a, b).truncated(local)
    return piece, fraction_schedule(piece, plan.segment_fractions(a, b)[:local])
