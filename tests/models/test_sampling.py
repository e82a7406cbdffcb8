"""The Bernoulli sampler is exact on each of its paths (random bytes on the CPU, from Philox in C or from the
generator's words in PyTorch passes; plain uniforms otherwise): every test here runs with the C kernels and without
(RAISE_EVAL_NATIVE=0)."""

import math

import pytest
import torch
from raise_eval.models.sampling import sample_bernoulli_logits, sample_bernoulli_probs, sample_bernoulli_probs_

@pytest.fixture(autouse=True, params=["native", "pytorch"])
def sampler_path(request, monkeypatch):
    if request.param == "pytorch":
        monkeypatch.setenv("RAISE_EVAL_NATIVE", "0")
    else:
        monkeypatch.delenv("RAISE_EVAL_NATIVE", raising=False)
    return request.param


# Probabilities that stress the byte comparison: 0, 1, tiny, exactly on and next to the 1/256 grid.
EDGE = [0.0, 1.0, 1e-7, 1 / 256, 1 / 256 + 1e-6, 0.5, 0.3, 255 / 256, 1 - 1e-7, 0.999]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("columns", [10, 13])  # 13: total size not a multiple of 8, exercises the tail
def test_sampler_frequencies_match_probabilities(dtype, columns):
    """Statistical: each column's mean over 300,000 rows is within 4.5 standard errors of its probability (about
    7e-6 false-alarm rate per column for an exact sampler; fixed seed) where both outcomes are expected at least 30
    times; where one is rarer (p = 1e-7 and 1 - 1e-7: 0.03 expected), its count must not lie in a Poisson tail below
    1e-6 either way (a normal z there is no test: a single rare outcome, probability 3%, reads as z = -5).
    Deterministic columns must be exactly 0 or 1."""
    probs = torch.tensor((EDGE * 2)[:columns], dtype=dtype)
    p = probs.expand(300_000, columns).contiguous()
    x = sample_bernoulli_probs(p, torch.Generator().manual_seed(0))
    assert x.dtype == dtype and x.shape == p.shape
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert not torch.signbit(x).any()  # zeros are +0., as a user printing a sample expects
    mean = x.double().mean(0)
    pd = probs.double()
    se = (pd * (1 - pd) / p.shape[0]).sqrt()
    deterministic = (pd == 0) | (pd == 1)
    assert torch.equal(mean[deterministic], pd[deterministic])
    rare = torch.minimum(pd, 1 - pd) * p.shape[0]
    normal = ~deterministic & (rare >= 30)
    z = ((mean - pd) / se)[normal]
    assert (z.abs() < 4.5).all(), z
    for column in torch.nonzero(~deterministic & (rare < 30)).squeeze(-1).tolist():
        expected = float(rare[column])
        count = int(round(float(torch.minimum(mean[column], 1 - mean[column])) * p.shape[0]))
        assert _poisson_tail(count, expected) > 1e-6, (column, count, expected)


def _poisson_tail(k: int, rate: float) -> float:
    """The smaller of P(K >= k) and P(K <= k) for K ~ Poisson(rate)."""
    terms = [math.exp(-rate)]
    for i in range(1, max(k, 1) + 1):
        terms.append(terms[-1] * rate / i)
    below = sum(terms[: k + 1])
    return min(below, 1.0 - sum(terms[:k]))


def test_small_and_noncontiguous_inputs_use_the_plain_path():
    g = torch.Generator().manual_seed(1)
    p = torch.full((100, 3), 0.25)
    x = sample_bernoulli_probs(p, g)
    assert abs(x.mean().item() - 0.25) < 4 * (0.25 * 0.75 / 300) ** 0.5
    q = torch.full((6000, 4), 0.25).t()  # non-contiguous, large
    y = sample_bernoulli_probs(q, g)
    assert y.shape == q.shape and abs(y.mean().item() - 0.25) < 0.01


def test_in_place_sampler_returns_its_argument():
    p = torch.full((5000, 8), 0.7)
    out = sample_bernoulli_probs_(p, torch.Generator().manual_seed(2))
    assert out is p and set(p.unique().tolist()) <= {0.0, 1.0}


def test_same_seed_same_samples_and_global_rng_untouched():
    logits = torch.linspace(-3, 3, 40_000).reshape(100, 400)
    state = torch.random.get_rng_state()
    a = sample_bernoulli_logits(logits, torch.Generator().manual_seed(3))
    b = sample_bernoulli_logits(logits, torch.Generator().manual_seed(3))
    c = sample_bernoulli_logits(logits, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [0, 5, 32, 100, 4096 + 13, 200_000])
@pytest.mark.parametrize("density", [0.0, 0.004, 0.3, 1.0])
def test_tie_search_finds_every_entry_strictly_between_minus_one_and_zero_in_order(dtype, n, density):
    """The block search for ties returns exactly the indices of the entries in (-1, 0), ascending, among the
    unclamped values the sampler computes, b - 256 p: decided ones anywhere in (-256, -1] or [0, 256) (exactly -1
    and 0 among them), and NaN of either sign (a NaN probability), which is never a tie."""
    from raise_eval.models.sampling import _tie_indices

    g = torch.Generator().manual_seed(n)
    decided = (torch.rand(n, generator=g, dtype=dtype) * 512 - 256).floor_()  # whole numbers: -256 to 255
    special = torch.tensor([-1.0, 0.0, -256.0, 255.9, float("nan"), -float("nan"), -1.0 - 2**-20], dtype=dtype)
    decided[: min(n, special.numel())] = special[:n]
    ties = -torch.rand(n, generator=g, dtype=dtype).clamp_(min=1e-30)  # in [-1, 0): -1 itself is decided
    x = torch.where(torch.rand(n, generator=g, dtype=dtype) < density, ties, decided)
    expected = torch.nonzero((x > -1) & (x < 0)).squeeze(-1)
    assert torch.equal(_tie_indices(x), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nan_probabilities_sample_zero_as_the_plain_path_does(dtype):
    from raise_eval.models.sampling import sample_bernoulli_probs

    p = torch.full((5000,), 0.5, dtype=dtype)
    p[::7] = float("nan")
    x = sample_bernoulli_probs(p, torch.Generator().manual_seed(0))
    assert torch.equal(x[::7], torch.zeros_like(x[::7]))
    assert set(x.unique().tolist()) == {0.0, 1.0}
    small = sample_bernoulli_probs(p[:100], torch.Generator().manual_seed(0))  # below the lazy path's size
    assert torch.equal(small[::7], torch.zeros_like(small[::7]))
