"""Parallel tempering (replica exchange) along an annealing path, with log Z at every rung by BAR.

A ladder of rungs 0 = beta_0 < beta_1 < ... < beta_{R-1} = 1 on a path (the geometric path's temperatures, or a
training trajectory's checkpoints and points interpolated between them) holds M chains at every rung. One round:

1. every rung's chains make one transition at their own beta (the path's kernel, which leaves p_beta invariant);
2. every rung r records, for each of its chains x, d_r(x) = log f_{r+1}(x) - log f_r(x) (a forward log-ratio of link
   r) and -d_{r-1}(x) (a reverse log-ratio of link r - 1), in float64;
3. neighbouring rungs exchange states, chain j of rung r with chain j of rung r + 1, for the pairs (0, 1), (2, 3),
   ... in even rounds and (1, 2), (3, 4), ... in odd ones, each accepted with probability
   min(1, exp(d_r(x_r) - d_r(x_{r+1}))) (Metropolis on the joint density prod_r p_r(x_r), which the exchange leaves
   invariant), one uniform per pair and chain from the run's generator.

So chains at hard rungs (late checkpoints whose modes block-Gibbs chains cannot reach from where they are) are fed
states that were found at easier rungs. After `burn_in` rounds, the recorded log-ratios of the remaining rounds are
samples of each rung's own distribution (correlated in time), and the Bennett acceptance ratio of every link
(`raise_eval.estimators.bar.bennett`) gives log Z_{r+1} - log Z_r; log Z at every rung is log Z_0 of the path's
tractable start plus their cumulative sum.

Chain j of every rung forms one replica ladder; ladders never interact, so the chains are split into G replicate
groups of M / G ladders: each group's BAR chain gives an independent estimate of log Z at every rung, and the
standard error is their spread's (the samples inside a group are correlated in time and through swaps, so an error
over samples would understate it). The reported estimate is BAR over all groups' samples pooled.

BAR is consistent, not unbiased: it is right only when the chains have reached each rung's distribution, which
swaps make likelier but do not guarantee (a mode no chain at any rung finds stays missing, and the replicates' spread
cannot see it). This is an estimator for measurement, not a bound.

Prototype limits: the path's transition and log-density take one beta, so the rungs are looped over in Python (R
transitions and 2R log-density ratios per round, each batched over the M chains); the exchange needs states with
even `layers` that `path.state_from_layers` rebuilds (the layered paths': `TrajectoryPath`, the geometric path of a
Boltzmann machine).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from raise_eval.estimators.bar import bennett
from raise_eval.settings import check_count


@dataclass
class TemperingResult:
    """What `parallel_tempering` found.

    betas: the ladder, R floats from 0 to 1.
    log_z: log Z at every rung, float64, shaped (R,): log Z_0 plus the cumulative BAR estimates of the links from all
        groups' samples pooled.
    log_z_stderr: the standard error of log_z, float64, shaped (R,): the replicate groups' spread / sqrt(G) (0 at
        rung 0, whose log Z is exact).
    replicate_log_z: each group's log Z at every rung, float64, shaped (G, R).
    swap_acceptance: the fraction of proposed exchanges accepted per pair of neighbouring rungs (r, r + 1), over all
        rounds (burn-in included) and chains, float64, shaped (R - 1,).
    link_delta: BAR's log Z_{r+1} - log Z_r per link from the pooled samples, float64, shaped (R - 1,).
    chains, replicates, rounds, burn_in, record_every: the settings; seconds: wall time.
    """

    betas: list[float]
    log_z: Tensor
    log_z_stderr: Tensor
    replicate_log_z: Tensor
    swap_acceptance: Tensor
    link_delta: Tensor
    chains: int
    replicates: int
    rounds: int
    burn_in: int
    record_every: int
    seconds: float

    def at(self, beta: float) -> tuple[float, float]:
        """(log Z, standard error) at the rung whose beta is `beta` (ValueError when no rung is)."""
        try:
            r = self.betas.index(beta)
        except ValueError:
            raise ValueError(f"no rung at beta = {beta}") from None
        return float(self.log_z[r]), float(self.log_z_stderr[r])


def ladder_with_rungs_between(knots: Sequence[float], between: int) -> list[float]:
    """The knots (sorted floats, 0 to 1) with `between` evenly spaced rungs inserted inside every pair of neighbours;
    the knots themselves are kept bit for bit."""
    check_count("between", between, least=0)
    out: list[float] = []
    for a, b in zip(knots[:-1], knots[1:]):
        out.append(a)
        out.extend(a + (b - a) * (k / (between + 1)) for k in range(1, between + 1))
    out.append(knots[-1])
    return out


def _check_ladder(betas: Sequence[float]) -> list[float]:
    betas = [float(b) for b in betas]
    if len(betas) < 2:
        raise ValueError(f"a tempering ladder needs at least two rungs, got {len(betas)}")
    if betas[0] != 0.0 or betas[-1] != 1.0:
        raise ValueError(f"a tempering ladder runs from beta = 0 to 1, got {betas[0]} to {betas[-1]}")
    if any(not b > a for a, b in zip(betas[:-1], betas[1:])):
        raise ValueError("a tempering ladder's betas must increase strictly")
    return betas


def _exchange(path, accept: Tensor, lower, upper):
    """(lower', upper'): the states with chain j's layers swapped where accept[j] (a bool tensor shaped (M,))."""
    keep = [None if x is None else accept.view(-1, *([1] * (x.dim() - 1))) for x in lower.layers]
    new_lower = [None if x is None else torch.where(k, y, x) for x, y, k in zip(lower.layers, upper.layers, keep)]
    new_upper = [None if x is None else torch.where(k, y, x) for x, y, k in zip(upper.layers, lower.layers, keep)]
    return path.state_from_layers(new_lower), path.state_from_layers(new_upper)


def parallel_tempering(
    path,
    betas: Sequence[float],
    chains: int,
    rounds: int,
    generator: torch.Generator,
    *,
    burn_in: int = 0,
    replicates: int = 10,
    record_every: int = 1,
    swap_sign: float = 1.0,
    progress: bool = False,
) -> TemperingResult:
    """Parallel tempering on `path` over the ladder `betas`, and log Z at every rung by BAR (module docstring).

    Args:
        path: an annealing path with a tractable start (`sample_initial(n, generator)`, `log_partition_initial`),
            `transition(state, beta, generator)`, `log_density_ratio(state, beta_from, beta_to)` (float64, shaped
            (M,)) and `state_from_layers` (the exchange rebuilds states from their even layers).
        betas: R >= 2 strictly increasing floats from 0 to 1 (e.g. `ladder_with_rungs_between(path.knots, k)`).
        chains: M chains per rung, a multiple of `replicates` with at least two per group.
        rounds: rounds of (one transition at every rung, then the exchanges of even or odd pairs, alternately).
        generator: the run's random stream (the initial states, the transitions and the exchanges' uniforms).
        burn_in: rounds before any log-ratio is recorded (the states start at the path's start at every rung).
        replicates: G independent groups of ladders for the standard error.
        record_every: record the log-ratios every this many rounds after the burn-in (memory: 2 (R - 1) M float64
            per record).
        swap_sign: 1 for the Metropolis exchange; -1 flips the sign of its log acceptance ratio (a wrong rule, for
            the tests that must catch it). Nothing else.
        progress: a tqdm bar over the rounds.
    """
    betas = _check_ladder(betas)
    check_count("chains", chains, least=2)
    check_count("rounds", rounds, least=1)
    check_count("replicates", replicates, least=1)
    check_count("record_every", record_every, least=1)
    if not 0 <= burn_in < rounds:
        raise ValueError(f"burn_in must be in [0, rounds), got {burn_in} with rounds={rounds}")
    if chains % replicates or chains // replicates < 2:
        raise ValueError(f"chains ({chains}) must be a multiple of replicates ({replicates}), at least two each")
    start = time.perf_counter()
    num_rungs = len(betas)
    states = [path.sample_initial(chains, generator) for _ in range(num_rungs)]
    accepted = None  # (R - 1,) on the chains' device: accepted exchanges per link, summed without a host read
    forward_records: list[Tensor] = []  # each (R - 1, M): d_r(x_r) for link r
    reverse_records: list[Tensor] = []  # each (R - 1, M): -d_r(x_{r+1}) for link r
    rounds_iter = range(rounds)
    if progress:
        from tqdm.auto import tqdm

        rounds_iter = tqdm(rounds_iter, desc="parallel tempering", unit="round")
    for t in rounds_iter:
        states = [path.transition(s, b, generator) for s, b in zip(states, betas)]
        forward = torch.stack(
            [path.log_density_ratio(states[r], betas[r], betas[r + 1]) for r in range(num_rungs - 1)]
        )  # (R - 1, M)
        reverse = torch.stack(
            [path.log_density_ratio(states[r + 1], betas[r + 1], betas[r]) for r in range(num_rungs - 1)]
        )  # (R - 1, M)
        if t >= burn_in and (t - burn_in) % record_every == 0:
            forward_records.append(forward)
            reverse_records.append(reverse)
        # exchange: log alpha = d_r(x_r) - d_r(x_{r+1}) = forward[r] + reverse[r]
        pairs = range(t % 2, num_rungs - 1, 2)
        if len(pairs) == 0:
            continue
        uniforms = torch.rand(len(pairs), chains, generator=generator, dtype=torch.float64, device=forward.device)
        if accepted is None:
            accepted = torch.zeros(num_rungs - 1, dtype=torch.float64, device=forward.device)
        for k, r in enumerate(pairs):
            accept = torch.log(uniforms[k]) < swap_sign * (forward[r] + reverse[r])
            accepted[r] += accept.sum()
            states[r], states[r + 1] = _exchange(path, accept, states[r], states[r + 1])
    forward_all = torch.stack(forward_records, -1).cpu()  # (R - 1, M, S)
    reverse_all = torch.stack(reverse_records, -1).cpu()
    log_z0 = float(path.log_partition_initial)
    links, per_group = num_rungs - 1, chains // replicates
    pooled = bennett(forward_all.reshape(links, -1), reverse_all.reshape(links, -1))  # (R - 1,)
    grouped = bennett(
        forward_all.reshape(links, replicates, -1), reverse_all.reshape(links, replicates, -1)
    )  # (R - 1, G): chains are grouped as consecutive blocks of per_group
    assert grouped.shape == (links, replicates) and per_group * replicates == chains
    zero = torch.zeros(1, dtype=torch.float64)
    log_z = log_z0 + torch.cat([zero, pooled.cumsum(0)])
    replicate_log_z = log_z0 + torch.cat([torch.zeros(replicates, 1, dtype=torch.float64), grouped.T.cumsum(1)], 1)
    if replicates > 1:
        stderr = replicate_log_z.std(0) / math.sqrt(replicates)
    else:
        stderr = torch.full((num_rungs,), math.nan, dtype=torch.float64)
        stderr[0] = 0.0
    # link r is proposed in the rounds t with t = r (mod 2), to every chain
    proposed = torch.tensor([chains * len(range(r % 2, rounds, 2)) for r in range(num_rungs - 1)], dtype=torch.float64)
    accepted = torch.zeros(num_rungs - 1, dtype=torch.float64) if accepted is None else accepted.cpu()
    acceptance = torch.where(proposed > 0, accepted / proposed.clamp_min(1), torch.full_like(proposed, math.nan))
    return TemperingResult(
        betas=betas, log_z=log_z, log_z_stderr=stderr, replicate_log_z=replicate_log_z,
        swap_acceptance=acceptance, link_delta=pooled, chains=chains, replicates=replicates, rounds=rounds,
        burn_in=burn_in, record_every=record_every, seconds=time.perf_counter() - start,
    )  # fmt: skip


def knot_rungs(betas: Sequence[float], knots: Sequence[float]) -> list[int]:
    """The positions of `knots` in the ladder `betas` (ValueError naming a knot the ladder lacks)."""
    where = {float(b): i for i, b in enumerate(betas)}
    missing: Optional[float] = next((k for k in knots if float(k) not in where), None)
    if missing is not None:
        raise ValueError(f"the ladder has no rung at the knot beta = {missing}")
    return [where[float(k)] for k in knots]
