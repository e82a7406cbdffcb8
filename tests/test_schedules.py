import pytest
import torch

from raise_eval.schedules import (
    linear_schedule,
    make_schedule,
    salakhutdinov_schedule,
    sigmoid_schedule,
    validate_schedule,
)


@pytest.mark.parametrize("name", ["linear", "sigmoid", "salakhutdinov"])
@pytest.mark.parametrize("k", [1, 2, 3, 10, 1000])
def test_schedules_run_from_zero_to_one_monotonically(name, k):
    b = make_schedule(name, k)
    assert b.dtype == torch.float64 and b.shape == (k + 1,)
    assert b[0].item() == 0.0 and b[-1].item() == 1.0
    assert bool((b[1:] >= b[:-1]).all())
    torch.testing.assert_close(validate_schedule(b), b)


def test_linear_schedule_values():
    torch.testing.assert_close(linear_schedule(4), torch.tensor([0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64))


def test_sigmoid_schedule_formula():
    k, delta = 10, 4.0
    t = torch.arange(k + 1, dtype=torch.float64) / k
    raw = torch.sigmoid(delta * (2 * t - 1))
    torch.testing.assert_close(sigmoid_schedule(k), (raw - raw[0]) / (raw[-1] - raw[0]))
    steps = sigmoid_schedule(100).diff()
    assert steps[0] < steps[50] and steps[-1] < steps[50]  # denser near both ends


def test_salakhutdinov_schedule_reproduces_the_original_grid():
    b = salakhutdinov_schedule(14500)
    torch.testing.assert_close(b[:501], torch.arange(501, dtype=torch.float64) * 1e-3)
    torch.testing.assert_close(b[500:4501], 0.5 + torch.arange(4001, dtype=torch.float64) * 1e-4)
    torch.testing.assert_close(b[4500:], 0.9 + torch.arange(10001, dtype=torch.float64) * 1e-5)


@pytest.mark.parametrize(
    "betas, message",
    [
        ([0.0, 0.5, 0.4, 1.0], "decreases at step 2"),
        ([0.1, 0.5, 1.0], "run from beta = 0 to beta = 1"),
        ([0.0, 0.5, 0.9], "run from beta = 0 to beta = 1"),
        ([1.0, 0.5, 0.0], "run from beta = 0 to beta = 1"),
        ([0.0, float("nan"), 1.0], "NaN"),
        ([0.0], "at least two"),
    ],
)
def test_bad_schedules_are_refused(betas, message):
    with pytest.raises(ValueError, match=message):
        validate_schedule(betas)


@pytest.mark.parametrize("k", [0, -3, 2.5, True])
def test_bad_step_counts_are_refused(k):
    with pytest.raises(ValueError, match="num_steps must be an integer of at least 1"):
        linear_schedule(k)


def test_unknown_schedule_name():
    with pytest.raises(ValueError, match="choose one of linear, sigmoid, salakhutdinov"):
        make_schedule("cosine", 10)
