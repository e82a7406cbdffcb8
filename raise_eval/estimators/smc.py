"""Sequential Monte Carlo along an annealing path: AIS whose chains are resampled when their weights degenerate.

M chains run along the schedule as in `ladder_pass`, split into G independent replicate groups of m = M / G chains.
After every step's weight update (the last step's excepted), each group whose normalised weights have an effective
sample size below `resample_ess * m`

1. folds its mean weight into its log Z-hat (log-mean-exp of its chains' log-weights, in float64),
2. draws m chains from its own chains in proportion to their weights (systematic resampling: one uniform per group
   from the run's generator, all groups at once),
3. resets their log-weights to 0,

and then every chain is moved by `sweeps` transitions at the current beta (the path's kernel, which leaves that
distribution invariant, so the move is valid for any weighted chain). A group's Z-hat, the product of its folded
means and the mean weight since, is unbiased for Z at every step (the SMC estimate of a normalizing constant, Del
Moral 2004), with or without resampling. The groups never exchange chains, so their Z-hats are G independent
unbiased estimates: the reported log Z-hat is the log of their average, and its standard error comes from their
spread (the delta method over the G replicates). The chains inside one group are not independent once resampled,
so the delta method over chains would understate the error; it is not used.

`resample_ess = 0` never resamples: the pass is then `ladder_pass`'s, bit for bit, with the same generator.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

import torch
from torch import Tensor
from tqdm.auto import tqdm

from raise_eval.annealing import anneal, check_log_weights
from raise_eval.estimators.ais import AISResult
from raise_eval.estimators.ladder import LadderPass, schedule_rungs
from raise_eval.schedules import validate_schedule
from raise_eval.settings import check_count
from raise_eval.stats import WeightSummary, summarize_log_weights
from raise_eval.step_programs import refuse_rounded_paths


@dataclass
class SMCLadderPass(LadderPass):
    """What `smc_ladder_pass` kept: `LadderPass`'s fields, and

    log_weights: float64, shaped (R, M): chain i's weight at rung r times its group's folded mean weights (log Z_0
        included); each is unbiased for Z at the rung, but chains of one group are not independent.
    replicate_log_z: each group's log Z-hat at each rung, float64, shaped (R, G) (log Z_0 included): G independent
        estimates whose exp is unbiased for Z at the rung.
    ess: per rung, the effective sample size of the chains' weights since their group's last resampling, summed
        over the groups, shaped (R,) (at most M).
    resamplings: per rung, the resamplings (one group at one step) done before it, cumulative, shaped (R,).
    replicates: G; resample_ess: the threshold as a fraction of a group's chains; sweeps: the moves after one (the
        most of any sub-step).
    rung_states: the chains just after their transition at the rungs asked for (`states_at`), by rung position.
    """

    replicate_log_z: Tensor = field(default=None)
    ess: Tensor = field(default=None)
    resamplings: list[int] = field(default_factory=list)
    replicates: int = 1
    resample_ess: float = 0.0
    sweeps: int = 0
    rung_states: dict = field(default_factory=dict)

    def summary(self, rung: int) -> WeightSummary:
        """log Z-hat at rung `rung` (an index into `rungs`) as the average of the replicates' Z-hats, with their
        spread's standard error; `ess` is the chains' (`self.ess`), not the replicates'."""
        summary = summarize_log_weights(self.replicate_log_z[rung])
        summary.ess = self.ess[rung].clone()
        return summary

    def ais(self, rung: int = -1) -> AISResult:
        """The estimate at rung `rung` as an `AISResult` over the replicates (its log_weights are the G replicates'
        log Z-hats, its num_chains G)."""
        result = AISResult.from_log_weights(self.replicate_log_z[rung], self.rungs[rung], time.perf_counter())
        result.ess = self.ess[rung].clone()
        result.seconds = self.seconds
        return result


def smc_ladder_pass(
    path,
    betas: Tensor,
    num_chains: int,
    *,
    rungs: Sequence[int],
    generator: torch.Generator,
    resample_ess: float,
    replicates: int,
    sweeps: Union[int, Sequence[int]] = 1,
    progress: bool = False,
    desc: str = "SMC ladder",
    states_at: Collection[int] = (),
) -> SMCLadderPass:
    """`ladder_pass` with resampling: `num_chains` chains from exact samples of the path's start through `betas`, in
    `replicates` groups, each resampled within itself when its ESS falls below `resample_ess` of its chains (see
    the module docstring), read at `rungs`.

    Args:
        path: an annealing path with `sample_initial`, `log_partition_initial`, `log_density_ratio`, `transition`
            and `select_chains(state, index)` (the state of the chains `index`, a (M,) index tensor): the
            `TrajectoryPath`.
        betas: the schedule from 0 to 1, shaped (K + 1,).
        rungs: indices into `betas` where the pass is read; 0 and K are added when missing.
        generator: the only source of randomness (the transitions' and the resampling's).
        resample_ess: in [0, 1]; 0 never resamples (plain AIS, `ladder_pass`'s numbers bit for bit).
        replicates: G >= 1 groups; `num_chains` must be a multiple of G with at least two chains per group.
        sweeps: transitions at the current beta after a step that resampled (besides the one the next step makes):
            one count, or one per sub-step (K counts, the j-th after sub-step j + 1).
        states_at: rung positions (indices into the sorted rungs) whose chains, just after their transition at the
            rung's beta, are kept in `rung_states` (e.g. to compare them with another run's at a neighbouring rung).
    """
    betas = validate_schedule(betas)
    check_count("num_chains", num_chains)
    check_count("replicates", replicates)
    refuse_rounded_paths("the SMC ladder")
    if not 0.0 <= float(resample_ess) <= 1.0:
        raise ValueError(f"resample_ess must be a fraction of the chains in [0, 1], got {resample_ess}")
    per_step = [sweeps] if isinstance(sweeps, int) else list(sweeps)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in per_step):
        raise ValueError(f"sweeps must be an integer of at least 0 (or one per sub-step), got {sweeps!r}")
    if len(per_step) not in (1, betas.numel() - 1):
        raise ValueError(f"sweeps needs one count or {betas.numel() - 1} (one per sub-step), got {len(per_step)}")
    if num_chains % replicates or num_chains // replicates < 2:
        raise ValueError(
            f"num_chains ({num_chains}) must be a multiple of replicates ({replicates}) with at least two chains per "
            "replicate: change either"
        )
    num_steps, rungs, rung_betas = schedule_rungs(betas, rungs)
    start = time.perf_counter()
    state = path.sample_initial(num_chains, generator)
    device = path.model.device  # the target's: a layered state's or a fully visible one's (site codes)
    groups = ReplicateGroups(replicates, num_chains // replicates, float(resample_ess), device)
    count = len(rungs)
    log_weights = torch.zeros(count, num_chains, dtype=torch.float64)
    replicate_log_z = torch.zeros(count, replicates, dtype=torch.float64)
    ess = torch.zeros(count, dtype=torch.float64)
    ess[0] = num_chains  # exact samples of the start, equal weights
    resamplings = [0] * count
    forward = torch.zeros(max(count - 1, 0), num_chains, dtype=torch.float64)
    reverse = torch.zeros_like(forward)
    weights_at = {index: r for r, index in enumerate(rungs)}
    samples_at = {index + 1: r for r, index in enumerate(rungs)}
    log_w = torch.zeros(num_chains, dtype=torch.float64, device=device)
    rung_states: dict = {}
    # One more transition at beta = 1, as in `ladder_pass`: the last rung's samples.
    beta_list = torch.cat([betas, betas[-1:]]).tolist()
    bar = tqdm(total=num_steps + 1, desc=desc, disable=not progress, leave=False, mininterval=0.5)
    try:
        for j in range(num_steps + 1):
            step = torch.tensor(beta_list[j : j + 2], dtype=torch.float64)
            state, log_w = anneal(path, state, step, generator=generator, log_weights=log_w, desc=desc)
            done = j + 1
            r = weights_at.get(done)
            if r is not None:
                log_weights[r] = groups.chain_log_weights(log_w).to("cpu")
                replicate_log_z[r] = groups.log_z(log_w).to("cpu")
                ess[r] = groups.ess(log_w).sum().to("cpu")
                resamplings[r] = groups.resamplings
            r = samples_at.get(done)
            if r is not None:
                if r in states_at:
                    rung_states[r] = state
                beta = rung_betas[r]
                if r + 1 < count:
                    forward[r] = path.log_density_ratio(state, beta, rung_betas[r + 1]).to("cpu", torch.float64)
                if r > 0:
                    reverse[r - 1] = path.log_density_ratio(state, beta, rung_betas[r - 1]).to("cpu", torch.float64)
            if done < num_steps and groups.threshold > 0:
                index, log_w = groups.resample(log_w, generator)
                if index is not None:
                    state = path.select_chains(state, index)
                    moves = per_step[0] if len(per_step) == 1 else per_step[done - 1]
                    if moves:
                        here = torch.full((moves + 1,), beta_list[done], dtype=torch.float64)
                        state, log_w = anneal(path, state, here, generator=generator, log_weights=log_w, desc=desc)
            bar.update(1)
    finally:
        bar.close()
    log_weights += path.log_partition_initial
    replicate_log_z += path.log_partition_initial
    check_log_weights(log_weights, desc, chains_dim=-1)
    for name, ratios in (("forward", forward), ("reverse", reverse)):
        check_log_weights(ratios, f"{desc}: BAR's {name} log-density ratios")
    return SMCLadderPass(
        betas=betas, rungs=rungs, log_weights=log_weights, forward=forward, reverse=reverse, num_steps=num_steps,
        num_chains=num_chains, seconds=time.perf_counter() - start, final_state=state,
        replicate_log_z=replicate_log_z, ess=ess, resamplings=resamplings, replicates=replicates,
        resample_ess=float(resample_ess), sweeps=max(per_step), rung_states=rung_states,
    )  # fmt: skip


class ReplicateGroups:
    """The replicate groups' bookkeeping: G groups of m chains (chain i in group i // m), each group's folded log
    mean weights (G,), and the resamplings so far."""

    def __init__(self, count: int, size: int, threshold: float, device):
        self.count, self.size, self.threshold = count, size, threshold
        self.folded = torch.zeros(count, dtype=torch.float64, device=device)
        self.offsets = torch.arange(count, device=device).unsqueeze(1) * size  # (G, 1): a group's first chain
        self.positions = torch.arange(size, device=device)  # (m,)
        self.resamplings = 0

    def _log_mean(self, log_w: Tensor) -> Tensor:
        return torch.logsumexp(log_w.view(self.count, self.size), dim=1) - math.log(self.size)

    def log_z(self, log_w: Tensor) -> Tensor:
        """Each group's log Z-hat (log Z_0 not included), shaped (G,)."""
        return self.folded + self._log_mean(log_w)

    def chain_log_weights(self, log_w: Tensor) -> Tensor:
        """Each chain's log-weight times its group's folded means, shaped (M,) (log_w itself where none is folded,
        so that a pass that never resamples keeps `ladder_pass`'s numbers)."""
        if self.resamplings == 0:
            return log_w.clone()
        return log_w + self.folded.repeat_interleave(self.size)

    def ess(self, log_w: Tensor) -> Tensor:
        """Each group's effective sample size of its chains' weights, shaped (G,) (NaN where every weight is 0)."""
        grouped = log_w.view(self.count, self.size)
        p = torch.softmax(grouped, dim=1)
        return 1.0 / (p * p).sum(dim=1)

    def resample(self, log_w: Tensor, generator: torch.Generator) -> tuple[Optional[Tensor], Tensor]:
        """(the chains to keep, shaped (M,), and their log-weights), or (None, log_w) when no group is due; the due
        groups' mean weights are folded in and their chains' log-weights reset to 0."""
        due = self.ess(log_w) < self.threshold * self.size  # NaN (no weight left) is never due
        if not bool(due.any()):
            return None, log_w
        grouped = log_w.view(self.count, self.size)
        self.folded = torch.where(due, self.folded + self._log_mean(log_w), self.folded)
        cdf = torch.cumsum(torch.softmax(grouped, dim=1), dim=1)
        cdf[:, -1] = 1.0  # rounding must not leave the last points beyond the total
        u = torch.rand(self.count, 1, generator=generator, dtype=torch.float64, device=log_w.device)
        points = (u + self.positions) / self.size  # systematic: one uniform per group, (G, m)
        ancestors = torch.searchsorted(cdf, points, right=True).clamp_(max=self.size - 1)
        ancestors = torch.where(due.unsqueeze(1), ancestors, self.positions)
        self.resamplings += int(due.sum())
        log_w = torch.where(due.unsqueeze(1), torch.zeros_like(grouped), grouped).reshape(-1)
        return (ancestors + self.offsets).reshape(-1), log_w
