"""The Bennett acceptance ratio (Bennett, 1976) between neighbouring distributions, with bootstrap errors and a
health check of every link.

For two unnormalized densities f_a, f_b with samples x_1..x_n ~ p_a and y_1..y_m ~ p_b, the forward log-ratios
w_i = log f_b(x_i) - log f_a(x_i) and the reverse ones v_j = log f_a(y_j) - log f_b(y_j), Bennett's identity with
the optimal bridge alpha = 1 / (n p_a + m p_b) gives Delta = log(Z_b / Z_a) as the root of

    sum_i sigmoid(w_i - c - Delta) = sum_j sigmoid(v_j + c + Delta),   c = log(n / m)

(the left side decreases and the right side increases in Delta, so the root is unique: found by Newton's method
kept inside a bracket). Along a ladder of rungs (checkpoints of a trajectory, or temperatures of the geometric path)
the log Z of every rung is log Z_0 plus the sum of the links' Deltas.

Errors: the bootstrap over chains. Chain i gives one sample at every rung, so the links are correlated through the
chains; resampling chain indices (the same ones for every link) keeps that correlation in the error of the summed
log Z.

Health of a link: BAR is consistent only where the two distributions overlap and the samples are theirs. The
check flags a link (more intermediate distributions are needed there: more checkpoints or sub-steps, or more
sweeps) when

- the overlap O = (n + m) sum_k p_a(z_k) p_b(z_k) / (n p_a(z_k) + m p_b(z_k))^2 over the pooled samples z_k, the
  spectral gap 1 - lambda_2 of the two-state overlap matrix (Shirts & Chodera's MBAR overlap; for n = m it is
  twice the matrix's off-diagonal element O_ab, to which the 0.03 rule of thumb usually refers, so this check is
  half as strict as that rule), 1 for identical distributions and 0 for disjoint ones, is below OVERLAP_MIN;
- the one-sided exponential averages disagree beyond GAP_SIGMAS bootstrap errors. With samples of p_a and p_b,
  log mean exp(w) (forward) errs low and -log mean exp(v) (reverse) errs high, so their gap is a per-link sandwich:
  a gap well above zero says the link is too coarse for the samples to cover it, and one well below zero, which
  samples of p_a and p_b cannot give, says the samples are not theirs (the chains have not reached equilibrium
  at these rungs: BAR is then biased however many chains run).

BAR is not unbiased at finite samples (its bias is O(1/n) with equilibrium samples); it is a second estimate of
log Z from the same samples as AIS, not a bound and not independent of them: samples that lag behind the
parameters and all miss a mode bias both one-sided averages alike, so the gap condition cannot see it (a reviewer
found BAR 7 to 17 nats off on tiny trajectories with the last link flagged in only 3 of 7 runs). It never enters a
verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from raise_eval.settings import check_count
from raise_eval.stats import log_mean_exp

OVERLAP_MIN = 0.03  # below this the two-state overlap is too small for a trustworthy BAR estimate (pymbar's warning)
GAP_SIGMAS = 3.0  # a forward/reverse gap beyond this many bootstrap errors marks a link (either sign)
_BOOTSTRAP_ELEMENTS = 1 << 22  # float64 temporaries of one chunk of bootstrap replicas (32 MB)


def bennett(
    forward: Tensor,
    reverse: Tensor,
    *,
    start: Optional[Tensor] = None,
    tolerance: float = 1e-10,
    max_iterations: int = 200,
) -> Tensor:
    """BAR's Delta = log(Z_b / Z_a) from forward log-ratios (..., n) on samples of a and reverse ones (..., m) on
    samples of b, float64, shaped (...,): every leading index an independent problem. `start` (broadcast to the
    result's shape) is where Newton's method begins (default: the mean of the two exponential averages)."""
    w = forward.double()
    v = reverse.double()
    n, m = w.shape[-1], v.shape[-1]
    if n == 0 or m == 0:
        raise ValueError("BAR needs samples of both distributions")
    c = math.log(n / m)

    def g(delta: Tensor) -> tuple[Tensor, Tensor]:
        s_f = torch.sigmoid(w - c - delta.unsqueeze(-1))
        s_r = torch.sigmoid(v + c + delta.unsqueeze(-1))
        value = s_f.sum(-1) - s_r.sum(-1)
        slope = -(s_f * (1 - s_f)).sum(-1) - (s_r * (1 - s_r)).sum(-1)
        return value, slope

    # A bracket: below it every forward term is near 1 and every reverse term near 0 (g > 0), above it the opposite.
    margin = abs(c) + 1.0
    lo = torch.minimum(w.amin(-1), -v.amax(-1)) - c - margin
    hi = torch.maximum(w.amax(-1), -v.amin(-1)) - c + margin
    # Start from the mean of the two exponential averages, inside the bracket.
    if start is None:
        start = 0.5 * (log_mean_exp(w, -1) - log_mean_exp(v, -1))
    delta = torch.maximum(torch.minimum(start.double().expand_as(lo), hi), lo)
    for _ in range(max_iterations):
        value, slope = g(delta)
        lo = torch.where(value > 0, delta, lo)
        hi = torch.where(value < 0, delta, hi)
        newton = delta - value / slope.clamp_max(-1e-300)
        inside = (newton >= lo) & (newton <= hi) & torch.isfinite(newton)
        new = torch.where(inside, newton, 0.5 * (lo + hi))  # outside the bracket: bisect
        new = torch.where(value == 0, delta, new)
        if bool(((new - delta).abs() <= tolerance * (1 + delta.abs())).all()):
            return new
        delta = new
    return delta


def _overlap(forward: Tensor, reverse: Tensor, delta: Tensor) -> Tensor:
    """The two-state overlap (see the module docstring) at the solution `delta`, shaped like it."""
    n, m = forward.shape[-1], reverse.shape[-1]
    # log p_b/p_a (up to Delta) at each pooled sample: w on a's samples, -v on b's
    s = torch.cat([forward.double(), -reverse.double()], -1) - delta.unsqueeze(-1)
    log_n, log_m = math.log(n), math.log(m)
    log_term = s - 2 * torch.logaddexp(torch.full_like(s, log_n), log_m + s)
    return (n + m) * torch.exp(log_term).sum(-1)


@dataclass
class LinkHealth:
    """The check of one link (rungs r -> r + 1): `problems` lists what is wrong (empty: healthy)."""

    link: int
    overlap: float
    gap: float
    gap_stderr: float
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems


@dataclass
class BARResult:
    """BAR along a ladder of R rungs (R - 1 links).

    deltas, stderr: each link's Delta = log Z_{r+1} - log Z_r and its bootstrap standard error, float64 (R - 1,).
    log_partition, log_partition_stderr: log Z at every rung (log Z_0 + the summed Deltas) and its bootstrap
        standard error, float64 (R,) (the first is log Z_0, exact, with error 0).
    forward_exp, reverse_exp: the one-sided estimates log mean exp(forward) (errs low) and -log mean exp(reverse)
        (errs high) of each link, (R - 1,); gap_stderr the bootstrap error of their difference.
    overlap: each link's two-state overlap in [0, 1], (R - 1,).
    """

    deltas: Tensor
    stderr: Tensor
    log_partition: Tensor
    log_partition_stderr: Tensor
    forward_exp: Tensor
    reverse_exp: Tensor
    gap_stderr: Tensor
    overlap: Tensor
    num_samples: int
    num_bootstrap: int

    def health(self) -> list[LinkHealth]:
        """Every link's check (see the module docstring for the two conditions)."""
        out = []
        for r in range(self.deltas.shape[0]):
            overlap = float(self.overlap[r])
            gap = float(self.reverse_exp[r] - self.forward_exp[r])
            gap_se = float(self.gap_stderr[r])
            problems = []
            if not overlap >= OVERLAP_MIN:
                problems.append(f"overlap {overlap:.3f} is below {OVERLAP_MIN:g}: the link is too coarse")
            if gap > GAP_SIGMAS * gap_se:
                problems.append(
                    f"the reverse estimate is {gap:.3f} nats (± {gap_se:.3f}) above the forward one: the link is too "
                    "coarse for its samples"
                )
            elif -gap > GAP_SIGMAS * gap_se:
                problems.append(
                    f"the reverse estimate is {-gap:.3f} nats (± {gap_se:.3f}) below the forward one, which samples "
                    "of the two distributions cannot give: the chains are not at equilibrium here"
                )
            out.append(LinkHealth(r, overlap, gap, gap_se, problems))
        return out

    def worst_link(self) -> Optional[LinkHealth]:
        """The link with the smallest overlap (None without links)."""
        links = self.health()
        return min(links, key=lambda h: (h.overlap, -h.gap)) if links else None

    def to_dict(self) -> dict:
        return {
            "deltas": self.deltas,
            "stderr": self.stderr,
            "log_partition": self.log_partition,
            "log_partition_stderr": self.log_partition_stderr,
            "forward_exp": self.forward_exp,
            "reverse_exp": self.reverse_exp,
            "overlap": self.overlap,
            "num_samples": self.num_samples,
            "num_bootstrap": self.num_bootstrap,
        }


def bar_ladder(
    forward: Tensor,
    reverse: Tensor,
    *,
    log_partition_initial: float = 0.0,
    bootstrap: int = 200,
    generator: Optional[torch.Generator] = None,
) -> BARResult:
    """BAR on every link of a ladder and log Z at every rung, with bootstrap errors over chains.

    Args:
        forward: (L, M) log f_{r+1}(x) - log f_r(x) on the samples of rung r (chain i in column i).
        reverse: (L, M) log f_r(y) - log f_{r+1}(y) on the samples of rung r + 1 (the same chains' columns).
        log_partition_initial: log Z of rung 0.
        bootstrap: replicas of the chain resampling (at least 2).
        generator: the bootstrap's randomness (CPU); required when bootstrap > 0.
    """
    if forward.dim() != 2 or forward.shape != reverse.shape:
        raise ValueError(
            f"forward and reverse must both be shaped (links, chains); got {tuple(forward.shape)} and "
            f"{tuple(reverse.shape)}"
        )
    check_count("bootstrap", bootstrap, least=2)
    if generator is None:
        raise ValueError("the bootstrap needs a torch.Generator")
    w, v = forward.double().cpu(), reverse.double().cpu()
    links, chains = w.shape
    deltas = bennett(w, v) if links else torch.zeros(0, dtype=torch.float64)
    forward_exp = log_mean_exp(w, -1)
    reverse_exp = -log_mean_exp(v, -1)
    overlap = _overlap(w, v, deltas)
    boot_deltas, boot_gaps = [], []
    per_chunk = max(1, _BOOTSTRAP_ELEMENTS // max(1, links * chains))
    done = 0
    while done < bootstrap:
        b = min(per_chunk, bootstrap - done)
        index = torch.randint(0, chains, (b, chains), generator=generator)
        wb, vb = w[:, index], v[:, index]  # (L, b, M)
        boot_deltas.append(bennett(wb, vb, start=deltas.unsqueeze(-1)))
        boot_gaps.append(-log_mean_exp(vb, -1) - log_mean_exp(wb, -1))
        done += b
    replicas = torch.cat(boot_deltas, 1) if links else torch.zeros(0, bootstrap, dtype=torch.float64)  # (L, B)
    gaps = torch.cat(boot_gaps, 1) if links else replicas
    cumulative = torch.cat([torch.zeros(1, bootstrap, dtype=torch.float64), replicas.cumsum(0)])  # (R, B)
    log_z = log_partition_initial + torch.cat([torch.zeros(1, dtype=torch.float64), deltas.cumsum(0)])
    return BARResult(
        deltas=deltas,
        stderr=replicas.std(1),
        log_partition=log_z,
        log_partition_stderr=cumulative.std(1),
        forward_exp=forward_exp,
        reverse_exp=reverse_exp,
        gap_stderr=gaps.std(1),
        overlap=overlap,
        num_samples=chains,
        num_bootstrap=bootstrap,
    )
