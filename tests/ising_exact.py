"""Exact log Z of the zero-field 2-D Ising model on an m x n torus (periodic in both directions), from Kaufman's
closed form (B. Kaufman, Phys. Rev. 76, 1232, 1949), and the model itself as a `FullyVisibleModel` of spin sites.

With coupling K between torus neighbours (f(s) = exp(K sum_<ij> s_i s_j), one term per bond),

    Z = 1/2 (2 sinh 2K)^(mn/2) (Z_1 + Z_2 + Z_3 + Z_4),
    Z_1 = prod_{r=0}^{n-1} 2 cosh(m g_{2r+1} / 2),   Z_2 = prod_{r=0}^{n-1} 2 sinh(m g_{2r+1} / 2),
    Z_3 = prod_{r=0}^{n-1} 2 cosh(m g_{2r} / 2),     Z_4 = prod_{r=0}^{n-1} 2 sinh(m g_{2r} / 2),

where cosh g_k = cosh(2K) coth(2K) - cos(pi k / n) with g_k > 0 for k > 0, and g_0 = 2K + log tanh K, whose sign
changes at the critical coupling (Z_4 is then negative below it). The four products are summed with their signs
in log space.
"""

from __future__ import annotations

import math

import torch
from raise_eval.models import FullyVisibleModel

CRITICAL_COUPLING = 0.5 * math.log(1 + math.sqrt(2))  # 0.44068679...


def _gamma(k: int, n: int, coupling: float) -> float:
    if k == 0:
        return 2 * coupling + math.log(math.tanh(coupling))
    c = math.cosh(2 * coupling) / math.tanh(2 * coupling) - math.cos(math.pi * k / n)
    return math.acosh(c)


def _log_abs_2cosh(x: float) -> float:
    return abs(x) + math.log1p(math.exp(-2 * abs(x)))


def _signed_log_2sinh(x: float) -> tuple[int, float]:
    if x == 0:
        return 0, -math.inf
    return (1 if x > 0 else -1), abs(x) + math.log(-math.expm1(-2 * abs(x)))


def kaufman_log_partition(m: int, n: int, coupling: float) -> float:
    """log Z of the zero-field Ising model on the m x n torus with coupling `coupling` > 0 per bond (float64)."""
    if m < 1 or n < 1 or coupling <= 0:
        raise ValueError(f"need m, n >= 1 and a positive coupling, got {m}, {n}, {coupling}")
    odd = [_gamma(2 * r + 1, n, coupling) for r in range(n)]
    even = [_gamma(2 * r, n, coupling) for r in range(n)]
    terms = []  # (sign, log |Z_i|)
    for gammas in (odd, even):
        terms.append((1, sum(_log_abs_2cosh(m * g / 2) for g in gammas)))
        sign, total = 1, 0.0
        for g in gammas:
            s, log_abs = _signed_log_2sinh(m * g / 2)
            sign, total = sign * s, total + log_abs
        terms.append((sign, total))
    top = max(log_abs for _, log_abs in terms)
    total = sum(sign * math.exp(log_abs - top) for sign, log_abs in terms)
    return math.log(0.5) + m * n / 2 * math.log(2 * math.sinh(2 * coupling)) + top + math.log(total)


def torus_ising(m: int, n: int, coupling: float, dtype=torch.float64) -> FullyVisibleModel:
    """The zero-field Ising model on the m x n torus as spin sites (site i * n + j at row i, column j), J = coupling
    per bond: on a torus 2 wide both bonds of a site in that direction join the same pair, whose coupling is then
    2 * coupling."""
    size = m * n
    couplings = torch.zeros(size, size, dtype=dtype)
    for i in range(m):
        for j in range(n):
            site = i * n + j
            for other in (((i + 1) % m) * n + j, i * n + (j + 1) % n):
                if other != site:  # a torus 1 wide: the bond joins a site to itself, a constant
                    couplings[site, other] += coupling
                    couplings[other, site] += coupling
    return FullyVisibleModel(torch.zeros(size, dtype=dtype), couplings, "spin")
