"""Signs that an energy model's numbers cannot be trusted for a reason a larger K cannot remove: an improper energy.

An energy whose exp(-E) does not integrate on an unbounded real support (E = x1^2 / 2 + 2 x0: Z is infinite) has
annealing distributions p_beta that are proper for beta < 1 (the base confines them) but move outward without bound
as beta approaches 1; AIS's chains follow them, so log Z-hat grows with K without settling and the generic warnings
(low ESS, a large gap), whose advice is a larger K, cannot help. `DriftWatch` records how far the AIS chains lie
from the base's mean (in the base's standard deviations) at a few points of the annealing, and `improper_warning`
names the drift when the chains end far beyond the test data and are still moving outward at the end.

The drift shows only once K is large enough for the chains to travel far (about K = 1,000 on E = 0.5 log(1 + |x|^2)
in two dimensions), and a certified run stops at the first K that closes. `tail_warning` therefore also probes the
energy itself before any estimate: exp(-E) integrates over d dimensions only if, along every direction, E
eventually grows faster than d log r; it evaluates E along random directions at two radii far beyond the base
(TAIL_RADII of its standard deviations) and names the energy improper where it grows more slowly there. A probe
cannot prove an energy proper (a direction it misses, growth that slows beyond its radii), so the drift watch stays.

Only unbounded real support is watched: a box bounds the chains, and a discrete support has a finite Z.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from raise_eval.diagnostics import LOW_ESS_FRACTION, Warning

# The chains end this many times farther from the base's mean than the test data lie (at least 1 standard deviation)
DRIFT_FACTOR = 10.0
# ... and their distance still grew by this factor over the last tenth of the annealing: they had not settled.
DRIFT_GROWTH = 2.0
# The fractions of the annealing's transitions at which the chains' distance is recorded (the last one: the end).
CHECKPOINTS = (0.5, 0.9, 1.0)
# The tail probe: directions drawn at random (in the base's standardized coordinates), and the two radii, in the
# base's standard deviations from its mean, between which E's growth per unit of log r is measured.
TAIL_DIRECTIONS = 64
TAIL_RADII = (100.0, 1000.0)
# ... and, up to this many coordinates, both directions along every coordinate axis as well: an energy that does not
# depend on some coordinate (flat along its axis) is improper, and random directions almost never lie along an axis.
TAIL_AXES_MAX = 1024
TAIL_CHUNK = 512  # energy evaluations per call
# A proper energy whose E grows by less than d + HEAVY_TAIL_EXCESS per unit of log r (exp(-E) falling like a power
# of r) keeps a share of its mass beyond radius R that falls about as slowly as R^-HEAVY_TAIL_EXCESS or more slowly:
# far beyond where chains from a Gaussian base go, so AIS and RAISE both miss it and can agree above the truth. On
# c log(1 + |x|^2) in two dimensions (E growing by 2c per unit of log r): c = 1.1 closed 0.4 to 0.8 nats above the
# truth at 4 of 4 seeds (a new user's runs), c = 1.5 to 1.75 closed with RAISE 0.06 to 0.12 above it (a reviewer's),
# c = 2 and 3 within about 0.03 of it.
HEAVY_TAIL_EXCESS = 2.0
# The probe of a fitted base (`base_probe_warning`): a short AIS from the broad default base, its K and chains
# (whatever the run's: a separated second mode holding half the mass, log 2 nats, is found at these in 8 of 8
# seeds), and the margin in nats (beside 3 combined standard errors) by which its log Z must exceed the run's.
PROBE_STEPS = 200
PROBE_CHAINS = 128
PROBE_MARGIN = 0.1


def standardized_distance(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Each chain's root-mean-square distance from `mean` in units of `std`: x (*B, *event_shape) -> (*B,)."""
    z = (x.double() - mean.to(x.device)) / std.to(x.device)
    return z.square().flatten(start_dim=x.dim() - mean.dim()).mean(-1).sqrt()


class DriftWatch:
    """Called with (transition number 1..num_steps, state) after each AIS transition; at `CHECKPOINTS` it keeps the
    median over chains of `standardized_distance` from the base (a device tensor: no host synchronisation until
    `distances` is read)."""

    def __init__(self, base, num_steps: int):
        self.mean, self.std = base.mean, base.std
        self.at = {max(1, round(f * num_steps)): f for f in CHECKPOINTS}
        self.recorded: dict[float, Tensor] = {}

    def __call__(self, step: int, state) -> None:
        if step in self.at:
            self.recorded[self.at[step]] = standardized_distance(state.x, self.mean, self.std).median()

    @property
    def distances(self) -> dict[float, float]:
        """{fraction of the annealing: the chains' median distance from the base's mean}."""
        return {f: float(d) for f, d in sorted(self.recorded.items())}


def watches_drift(model, base) -> bool:
    """Whether the chains can drift without bound: unbounded real support and a Gaussian base."""
    return not model.support.discrete and not model.support.bounded and getattr(base, "kind", None) == "gaussian"


def tail_warning(model, base, generator: torch.Generator) -> Optional[Warning]:
    """The 'improper-energy' warning where E grows too slowly for exp(-E) to integrate (see the module docstring):
    along some of TAIL_DIRECTIONS random directions u (unit vectors in the base's standardized coordinates, drawn
    from `generator`) and, for at most TAIL_AXES_MAX coordinates, the 2 d directions along the axes, with
    x(r) = mean + r std u, (E(x(r1)) - E(x(r0))) / log(r1 / r0) at TAIL_RADII (r0, r1) is at most d, the event's size
    (E = +inf counts as growth enough; a NaN energy leaves the direction out); else the 'heavy-tails' warning where
    it is below d + HEAVY_TAIL_EXCESS along some direction (proper, but with mass far beyond the chains' reach).
    None where the support is not unbounded real or the base not a Gaussian, or where every probed direction grows
    fast enough."""
    if not watches_drift(model, base):
        return None
    d = model.n_visible
    mean, std = base.mean.double(), base.std.double()
    u = torch.randn((TAIL_DIRECTIONS, d), generator=generator, dtype=torch.float64, device=mean.device)
    u = u / u.norm(dim=1, keepdim=True)
    if d <= TAIL_AXES_MAX:
        axes = torch.eye(d, dtype=torch.float64, device=mean.device)
        u = torch.cat([u, axes, -axes])
    u = u.reshape(-1, *mean.shape)
    count = u.shape[0]
    r0, r1 = TAIL_RADII
    points = torch.cat([mean + r * std * u for r in (r0, r1)]).to(model.device, model.dtype)
    energy = -torch.cat([model.log_unnormalized_state(chunk).cpu() for chunk in points.split(TAIL_CHUNK)])
    growth = (energy[count:] - energy[:count]) / math.log(r1 / r0)  # float64 (count,)
    growth = torch.where(energy[count:] == math.inf, math.inf, growth)
    measured = growth[~torch.isnan(growth)]
    slow = measured <= d
    probed = f"{TAIL_DIRECTIONS} random directions" + (f" and {2 * d} along the axes" if count > TAIL_DIRECTIONS
                                                         else "")  # fmt: skip
    if not bool(slow.any()):
        heavy = measured < d + HEAVY_TAIL_EXCESS
        if not bool(heavy.any()):
            return None
        least = float(measured.min())
        return Warning(
            "heavy-tails",
            f"the energy's tails are heavy: along {int(heavy.sum())} of the {count} directions probed ({probed}) "
            f"from the base's mean, E grows by as little as {least:.3g} per unit of log r between {r0:g} and {r1:g} "
            f"of the base's standard deviations, under {d} + {HEAVY_TAIL_EXCESS:g} for {d} dimensions: exp(-E) "
            "integrates, but the share of its mass beyond a radius R falls about as slowly as a power of R, far "
            "beyond where the chains from a Gaussian base go. AIS and RAISE then both miss that mass and can agree "
            "on a value above the truth; a larger K ({steps}) does not bring the chains there. Bound the support "
            "with a box (support=('real', low, high)), add a confining term to the energy (e.g. |x - m|^2 / "
            "(2 s^2), s a few times the data's spread), or pass a base whose tails are as heavy as the model's.",
        )
    least = float(measured.min())
    return Warning(
        "improper-energy",
        f"the energy grows too slowly for exp(-E) to integrate (Z is infinite or the estimates meaningless): along "
        f"{int(slow.sum())} of the {count} directions probed ({probed}) from the base's mean, E grows by as little as "
        f"{least:.3g} per unit of log r between {r0:g} and {r1:g} of the base's standard deviations, where exp(-E) "
        f"over {d} dimensions integrates only if E eventually grows faster than {d} per unit of log r (e.g. an "
        "energy that levels off, falls, or grows like log |x|). log Z-hat then grows with K without settling, so a "
        "larger K ({steps}) cannot help and the other warnings' advice to raise it does not apply. Bound the "
        "support with a box (support=('real', low, high)) or add a confining term to the energy (e.g. "
        "|x - m|^2 / (2 s^2), s a few times the data's spread).",
    )


def improper_warning(distances: dict[float, float], test_distance: float) -> Optional[Warning]:
    """The 'improper-energy' warning when the AIS chains ended more than DRIFT_FACTOR times farther from the base
    than the test data (`test_distance`: the test vectors' median `standardized_distance`) and their distance grew
    by more than DRIFT_GROWTH over the last tenth of the annealing; else None. `distances`: `DriftWatch.distances`."""
    end, late = distances.get(1.0), distances.get(0.9)
    if end is None or late is None or not end > DRIFT_FACTOR * max(test_distance, 1.0):
        return None
    if not end > DRIFT_GROWTH * late:
        return None
    half = distances.get(0.5, float("nan"))
    return Warning(
        "improper-energy",
        f"the AIS chains moved away from the data without settling: their median distance from the base's mean, in "
        f"the base's standard deviations, grew from {half:.3g} half-way and {late:.3g} at nine tenths of the "
        f"annealing to {end:.3g} at its end, against {test_distance:.3g} for the test data. The energy looks "
        "improper (exp(-E) does not integrate: Z is infinite, e.g. a term linear in x or an energy that falls "
        "without bound) or nearly so: log Z-hat then grows with K without settling, so a larger K ({steps}) cannot "
        "help and the other warnings' advice to raise it does not apply. Bound the support with a box (support="
        "('real', low, high)) or add a confining term to the energy (e.g. |x - m|^2 / (2 s^2), s a few times the "
        "data's spread).",
    )


def non_finite_warning(shares: dict[str, float]) -> Optional[Warning]:
    """The 'non-finite-proposals' warning where a stage's kernel rejected proposals for a NaN or +inf log acceptance
    (`shares`: stage name -> the mean share of its proposals; the warning where any is above 0), else None."""
    seen = {stage: share for stage, share in shares.items() if share > 0}
    if not seen:
        return None
    listed = ", ".join(f"{stage} {share:.3g}" for stage, share in seen.items())
    return Warning(
        "non-finite-proposals",
        f"some proposals had a log acceptance probability that is not a number or +inf, and were rejected (share of "
        f"the proposals: {listed}). Two causes give this. A leapfrog trajectory that diverged (its positions "
        "overflowing where the energy is steep, e.g. the tails of a quartic term, with step sizes tuned where it is "
        "flatter) would have been rejected anyway: the estimates stand. An energy that returns NaN (or -inf) at "
        "some points: rejecting them treats those points as having zero density, so the estimates are those of the "
        "energy with them removed; find where (e.g. a log or square root of a negative number, a division by zero) "
        "and guard it. An energy finite at every point you can evaluate is the first case.",
    )


def base_probe_warning(log_z: float, stderr: float, probe_log_z: float, probe_stderr: float, probe_ess: float,
                       default_words: str, support) -> Optional[Warning]:
    """The 'base-misses-mass' warning where a short AIS from the broad default base (`default_words` describes it)
    found log Z above this run's, from a base fitted to the training data, by more than PROBE_MARGIN nats and 3 of
    their combined standard errors, with the probe's ESS at least LOW_ESS_FRACTION of its chains. Each log Z-hat is
    unbiased for Z and errs low where its chains miss mass, so the probe's higher one means this run's log Z is low:
    it missed mass (a part of the model away from the training data, a second or spurious mode, which RAISE from test
    vectors in the covered part does not see either) or has not converged. The ESS floor guards the delta-method
    standard error, which understates the noise of heavy-tailed weights (a reviewer's simulation: false alarms up to
    4e-2 without it, none with it). None otherwise: a probe that finds less, or whose weights rest on a few chains,
    says nothing (a broad base is harder to anneal from). `support`: the model's, for the advice."""
    noise = math.hypot(stderr, probe_stderr)
    excess = probe_log_z - log_z
    if not (math.isfinite(excess) and excess > PROBE_MARGIN + 3 * noise) or probe_ess < LOW_ESS_FRACTION * PROBE_CHAINS:
        return None
    if support.discrete:
        covering = "a SiteBase that gives every state of every site its share"
    elif support.bounded:
        covering = f"a GaussianBase(mean, std, {support.low:g}, {support.high:g}) wide enough for the whole box"
    else:
        covering = "a GaussianBase(mean, std) wide enough for the whole model"
    return Warning(
        "base-misses-mass",
        f"a short AIS from the broad default base ({default_words}) found log Z {probe_log_z:.3f} +- "
        f"{probe_stderr:.3f}, {excess:.3f} nats above this run's {log_z:.3f} +- {stderr:.3f} from the base fitted to "
        "the training data ({train_data}): log Z-hat errs low where chains miss mass, so this run's log Z is low. "
        "Either it missed mass the broad one found, a part of the model away from the training data (a second mode, "
        "or a spurious one), which RAISE, run from test vectors in the covered part, misses too, so that AIS and "
        "RAISE can agree on a wrong number; or it has not converged (a larger K). Evaluate without {train_data} (the "
        f"broad default base), or give the model a base that covers it (EnergyModel(..., base=...): {covering}).",
    )


def data_distance(base, data: Tensor) -> float:
    """Vectors' (N, *event_shape) median `standardized_distance` from the base's mean."""
    return float(standardized_distance(data, base.mean, base.std).median())
