"""Knots of a piecewise-linear path: points P_0, ..., P_T at inverse temperatures beta_i = i / T, the schedules
that pass through every knot, and where a beta lies (link i and the fraction u of the way from P_i to P_{i+1}).
Shared by the trajectory paths of layered machines (`paths.trajectory`) and of fully visible models
(`paths.fully_visible_trajectory`); a subclass sets `num_links` and `knots`."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Optional, Union

import torch
from torch import Tensor


class Knots:
    """Schedules through the knots and the location of a beta in the links (`num_links` and `knots` set by the
    subclass: knots[i] = i / num_links)."""

    num_links: int
    knots: list[float]

    # ---------------------------------------------------------------- schedules
    def schedule(self, steps_per_link: Union[int, Sequence[int]], first_link_steps: Optional[int] = None) -> Tensor:
        """Inverse temperatures through every knot, linearly spaced inside each link, shaped (K + 1,) in float64.

        Args:
            steps_per_link: sub-steps K_i of each link (one count for all, or T counts).
            first_link_steps: sub-steps of link 0 instead (e.g. from a prepended base to the first checkpoint).
        """
        t = self.num_links
        counts = [int(steps_per_link)] * t if isinstance(steps_per_link, int) else [int(k) for k in steps_per_link]
        if len(counts) != t:
            raise ValueError(f"steps_per_link needs {t} counts (one per link), got {len(counts)}")
        if first_link_steps is not None:
            counts[0] = int(first_link_steps)
        if any(k < 1 for k in counts):
            raise ValueError(f"every link needs at least one step, got {counts}")
        betas = []
        for i, k in enumerate(counts):
            lo, hi = self.knots[i], self.knots[i + 1]
            betas += [lo + (hi - lo) * s / k for s in range(k)]
        betas.append(1.0)
        return torch.tensor(betas, dtype=torch.float64)

    def knot_indices(self, betas: Tensor) -> list[int]:
        """For each knot, the first index of `betas` where it is (ValueError when a schedule skips a knot)."""
        values = torch.as_tensor(betas, dtype=torch.float64).tolist()
        first: dict[float, int] = {}
        for j, b in enumerate(values):
            first.setdefault(b, j)
        missing = [i for i, k in enumerate(self.knots) if k not in first]
        if missing:
            raise ValueError(
                f"the schedule skips the knots of points {missing}: build it with path.schedule(...) so that it passes "
                "through every point"
            )
        return [first[k] for k in self.knots]

    # ---------------------------------------------------------------- parameters along the path
    def _locate(self, beta: float) -> tuple[int, float]:
        """(link i, u) with beta = (1 - u) beta_i + u beta_{i+1}."""
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {beta}")
        i = min(bisect.bisect_right(self.knots, beta) - 1, self.num_links - 1)
        return i, self._u(i, beta)

    def _u(self, link: int, beta: float) -> float:
        lo, hi = self.knots[link], self.knots[link + 1]
        if beta == lo:
            return 0.0
        if beta == hi:
            return 1.0
        return (beta - lo) / (hi - lo)
