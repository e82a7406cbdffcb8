import math

import pytest
import torch

from raise_eval.stats import log_mean_exp, mean_and_stderr, summarize_log_weights


def test_equal_weights():
    s = summarize_log_weights(torch.full((10,), 3.0, dtype=torch.float64))
    assert s.estimate.item() == pytest.approx(3.0)
    assert s.stderr.item() == pytest.approx(0.0)
    assert s.ess.item() == pytest.approx(10.0)


def test_summary_matches_direct_formulas():
    log_w = torch.tensor([0.0, math.log(2.0), math.log(3.0), 500.0 - 500.0], dtype=torch.float64) + 700.0
    w = torch.tensor([1.0, 2.0, 3.0, 1.0], dtype=torch.float64)
    s = summarize_log_weights(log_w)  # would overflow without the shift
    mean, sd = w.mean(), w.std()
    assert s.estimate.item() == pytest.approx(700 + math.log(mean.item()))
    assert s.stderr.item() == pytest.approx((sd / 2 / mean).item())
    assert s.upper.item() == pytest.approx(700 + math.log(mean.item() + 3 * sd.item() / 2))
    assert s.ess.item() == pytest.approx((w.sum() ** 2 / (w**2).sum()).item())


def test_lower_end_is_minus_infinity_when_the_interval_reaches_zero():
    s = summarize_log_weights(torch.tensor([0.0, -30.0, -30.0], dtype=torch.float64))
    assert s.lower.item() == -math.inf and math.isfinite(s.upper.item())


def test_batched_summary_and_log_mean_exp():
    log_w = torch.randn(3, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = summarize_log_weights(log_w, dim=-1)
    assert s.estimate.shape == (3,)
    torch.testing.assert_close(s.estimate, log_mean_exp(log_w, -1))
    torch.testing.assert_close(log_mean_exp(log_w, -1), torch.log(torch.exp(log_w).mean(-1)))


def test_mean_and_stderr():
    m, se = mean_and_stderr(torch.tensor([1.0, 2.0, 3.0]))
    assert m == pytest.approx(2.0) and se == pytest.approx(1.0 / math.sqrt(3))
    assert math.isnan(mean_and_stderr(torch.tensor([1.0]))[1])
