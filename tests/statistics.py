"""Statistical checks used by the estimator tests.

Unbiasedness is checked in probability space, as in TensorFlow Probability's AIS tests: for weights w_i with E[w] =
truth, r_i = exp(log w_i - log truth) has mean 1, and the test asserts |mean(r) - 1| < 4 SE with SE = sd(r) /
sqrt(n). For a correct estimator and a CLT-sized sample this fails with probability about 6e-5 (two-sided normal
tail at 4 sigma) per z-score, so about k * 6e-5 for an assertion over k test vectors (heavy right tails of r, e.g.
skewed importance weights, make the lower tail somewhat likelier); seeds are fixed, so each run is deterministic. To
keep the test from passing vacuously, it also asserts that SE is small enough to detect a bias of `max_se` * 4.
"""

from __future__ import annotations

import math

import torch


def unbiasedness_z(
    log_w: torch.Tensor, log_truth: torch.Tensor | float, dim: int = -1
) -> tuple[torch.Tensor, torch.Tensor]:
    """(z-scores of mean(r) - 1, standard errors) along `dim`, r = exp(log_w - log_truth)."""
    r = torch.exp(log_w.double() - torch.as_tensor(log_truth, dtype=torch.float64).unsqueeze(-1))
    n = r.shape[dim]
    se = r.std(dim=dim) / math.sqrt(n)
    return (r.mean(dim=dim) - 1) / se, se


def assert_unbiased(log_w: torch.Tensor, log_truth, *, max_se: float = 0.05, sigmas: float = 4.0) -> None:
    """Assert E[exp(log_w)] = exp(log_truth) along the last dimension (see the module docstring)."""
    z, se = unbiasedness_z(log_w, log_truth)
    assert bool((se < max_se).all()), f"standard errors {se.tolist()} too large for a meaningful test"
    assert bool((z.abs() < sigmas).all()), (
        f"mean of exp(log w - log truth) is off by z = {z.tolist()} (se {se.tolist()})"
    )


def chi_square_threshold(df: int, z: float = 3.719) -> float:
    """Upper quantile of the chi-square distribution by Wilson-Hilferty (z = 3.719: tail probability 1e-4)."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def assert_counts_match(counts: torch.Tensor, probs: torch.Tensor, *, min_expected: float = 5.0) -> None:
    """Pearson chi-square goodness of fit of integer `counts` to `probs` (cells with expected count below
    `min_expected` are pooled). False-alarm probability about 1e-4 for a correct sampler."""
    n = counts.sum().item()
    expected = probs.double() * n
    big = expected >= min_expected
    obs = torch.cat([counts.double()[big], counts.double()[~big].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    keep = exp > 0
    assert bool((obs[~keep] == 0).all()), "samples fell where the exact probability is zero"
    stat = (((obs - exp) ** 2)[keep] / exp[keep]).sum().item()
    df = int(keep.sum()) - 1
    assert stat < chi_square_threshold(df), f"chi-square {stat:.1f} on {df} degrees of freedom"
