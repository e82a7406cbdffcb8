"""scripts/measure_data_proposals.py's four estimators are unbiased for Z on a tiny RBM whose Z is enumerated: the
average of many independent Z-hats over the exact Z lies within 4 of its standard errors of 1 (fixed seeds; a
false failure about once in 16,000 runs per check), at K = 1, 2, 3 sub-steps where the annealed ones have them.
The two kernels leave their distributions invariant: exact samples stay exact after one transition (a chi-square
test over the enumerated states). A jump that accepted by the ratio without q's densities (an independence proposal
treated as symmetric) is caught; so were, by hand, weights taken after the move at the new beta, a Metropolis step on
n that accepted too often, and a Gibbs step on h with (1 - beta)^2 for (1 - beta)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from tests.scripts.test_reproduce_raise_tables import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("measure_data_proposals")


def rbm(seed: int, visible: int = 6, hidden: int = 4, scale: float = 1.5):
    g = torch.Generator().manual_seed(seed)
    W = scale * torch.randn(visible, hidden, generator=g, dtype=torch.float64)
    b = torch.randn(visible, generator=g, dtype=torch.float64)
    c = torch.randn(hidden, generator=g, dtype=torch.float64)
    return W, b, c


def exact_log_z(script, W, b, c) -> float:
    H = W.shape[1]
    h = ((torch.arange(2**H)[:, None] >> torch.arange(H)) & 1).double()
    return float(torch.logsumexp(script.log_f_hidden(W, b, c, h), 0))


def components(seed: int, n: int = 5, visible: int = 6):
    return (torch.rand(n, visible, generator=torch.Generator().manual_seed(seed)) < 0.5).double()


def assert_unbiased(estimate: dict, log_z: float) -> None:
    ratio = math.exp(estimate["log_z"] - log_z)
    assert abs(ratio - 1) < 4 * estimate["stderr"], (ratio, estimate["stderr"])


def test_importance_is_unbiased(script):
    W, b, c = rbm(0)
    truth = exact_log_z(script, W, b, c)
    g = torch.Generator().manual_seed(1)
    z = torch.tensor([math.exp(script.importance(W, b, c, components(2), 1, g)["log_z"] - truth) for _ in range(4000)])
    assert abs(float(z.mean()) - 1) < 4 * float(z.std()) / math.sqrt(z.numel())


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_mixture_ais_is_unbiased(script, steps):
    W, b, c = rbm(1, scale=3.0)  # sharp, distinct components: a wrong move on n shows (7 s.e. at K = 2, 3)
    g = torch.Generator().manual_seed(steps)
    estimate = script.mixture_ais(W, b, c, components(4, n=3), 20000, steps, 20000, g)
    assert_unbiased(estimate, exact_log_z(script, W, b, c))


def base_of(W, b):
    return torch.zeros_like(W), 0.3 * b, torch.zeros(W.shape[1], dtype=W.dtype)


@pytest.mark.parametrize("steps", [1, 2, 3])
@pytest.mark.parametrize("resample", [0.0, 0.5])
def test_jumps_along_a_trajectory_are_unbiased_at_every_checkpoint(script, steps, resample):
    first, second = rbm(5), rbm(6)
    base = base_of(*first[:2])
    groups = 4000 if resample == 0 else 400
    smc = script.JumpSMC(base, components(7), 4000, groups, resample, torch.Generator().manual_seed(10 + steps))
    for a, z in [(base, first), (first, second)]:
        smc.anneal(a, z, steps)
        assert_unbiased(smc.estimate(), exact_log_z(script, *z))
    assert 0 < sum(smc.accepted) / len(smc.accepted) < 1  # the jumps move some chains, not all


def test_a_jump_that_ignores_the_proposal_density_is_caught(script, monkeypatch):
    """The check above can fail: treating q as symmetric (accepting by f(h') / f(h) alone) biases Z-hat."""
    first = rbm(5)
    base = base_of(*first[:2])
    monkeypatch.setattr(script.Mixture, "log_density", lambda self, h: torch.zeros(h.shape[0], dtype=torch.float64))
    smc = script.JumpSMC(base, components(7), 4000, 4000, 0.0, torch.Generator().manual_seed(11))
    smc.anneal(base, first, 2)
    with pytest.raises(AssertionError):
        assert_unbiased(smc.estimate(), exact_log_z(script, *first))


def test_exact_modes_against_enumeration(script):
    W, b, c = rbm(0)
    first, p = script.exact_modes(W, b, c, components(2), top=3)
    assert first["log_z"] == pytest.approx(exact_log_z(script, W, b, c), abs=1e-12)
    assert float(p.sum()) == pytest.approx(1.0) and first["top_p"] == sorted(p.tolist(), reverse=True)[:3]
    assert first["overlap_with_previous"] is None
    same, _ = script.exact_modes(W, b, c, components(2), previous=p)
    other, _ = script.exact_modes(*rbm(1), components(2), previous=p)
    assert same["overlap_with_previous"] == pytest.approx(1.0) and other["overlap_with_previous"] < 0.99


def chi_square(samples: Tensor, probs: Tensor) -> tuple[float, int]:
    """(Pearson's chi-square of the state codes `samples` against `probs`, over the states expecting at least 20;
    its degrees of freedom)."""
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    expected = probs * samples.numel()
    kept = expected >= 20
    return float(((counts[kept] - expected[kept]) ** 2 / expected[kept]).sum()), int(kept.sum()) - 1


def assert_chi_square_fits(samples: Tensor, probs: Tensor) -> None:
    """Below df + 5 sqrt(2 df): a false failure well under once in 10,000 runs."""
    stat, df = chi_square(samples, probs)
    assert stat < df + 5 * math.sqrt(2 * df), (stat, df)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_the_mixture_move_leaves_pi_beta_invariant(script, beta):
    W, b, c = rbm(1, scale=3.0)
    q = script.Mixture(W, c, components(4, n=3))
    H, N = W.shape[1], q.size
    h_all = ((torch.arange(2**H)[:, None] >> torch.arange(H)) & 1).double()
    n_all = torch.arange(N).repeat_interleave(2**H)
    h_rep = h_all.repeat(N, 1)
    log_pi = (1 - beta) * q.log_component(n_all, h_rep) + beta * script.log_f_hidden(W, b, c, h_rep)
    probs = torch.softmax(log_pi, 0)
    g = torch.Generator().manual_seed(20)
    start = torch.multinomial(probs, 100_000, replacement=True, generator=g)
    n, h = script.mixture_move(q, W, b, c, n_all[start], h_rep[start], beta, g)
    codes = n * 2**H + (h.long() * (1 << torch.arange(H))).sum(1)
    assert_chi_square_fits(codes, probs)


def test_the_jump_move_leaves_p_v_invariant(script):
    first = rbm(5)
    W, b, c = first
    V = W.shape[0]
    v_all = ((torch.arange(2**V)[:, None] >> torch.arange(V)) & 1).double()
    probs = torch.softmax(script.log_f_visible(W, b, c, v_all), 0)
    g = torch.Generator().manual_seed(21)
    smc = script.JumpSMC(base_of(W, b), components(7), 100_000, 10, 0.0, g)
    smc.v = v_all[torch.multinomial(probs, 100_000, replacement=True, generator=g)]
    moved = smc._move(first)
    assert 0.05 < smc.accepted[-1] < 0.95  # the jump moves some chains, so the test sees it
    assert_chi_square_fits((moved.long() * (1 << torch.arange(V))).sum(1), probs)
