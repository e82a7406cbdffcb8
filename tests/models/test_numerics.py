"""expm1_ (raise_eval.models.numerics): e^x - 1 by a short Taylor series where the arguments are small, torch.expm1
elsewhere; accuracy against float64 (or extended) references, the degree's truncation bound, special values."""

import math
from fractions import Fraction

import pytest
import torch
from raise_eval.models.numerics import EXPM1_SERIES_MAX_DEGREE, expm1_, expm1_series_degree

DTYPES = (torch.float32, torch.float64)
MAGNITUDES = (0.0, 1e-12, 1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 30.0)


def _reference(x: torch.Tensor) -> torch.Tensor:
    """e^x - 1 of x's values, in float64 (exact to float64 rounding: float64's expm1; for float64 inputs the
    comparison tolerance is a few float64 epsilons, so its own rounding matters little)."""
    return torch.expm1(x.double())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("largest", MAGNITUDES)
def test_expm1_within_two_epsilons(dtype, largest):
    g = torch.Generator().manual_seed(0)
    x = ((torch.rand(50_001, generator=g, dtype=torch.float64) * 2 - 1) * largest).to(dtype)
    x[0], x[1] = largest, -largest  # the extremes, which set the degree
    ref = _reference(x)
    got = expm1_(x.clone())
    assert got.dtype == dtype
    nonzero = ref != 0
    assert torch.equal(got[~nonzero], ref[~nonzero].to(dtype))
    relative = ((got.double() - ref).abs() / ref.abs())[nonzero]
    eps = torch.finfo(dtype).eps
    assert relative.numel() == 0 or float(relative.max()) <= 2 * eps, (largest, float(relative.max()) / eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side", [-1.0, 1.0])
@pytest.mark.parametrize("largest", (1e-3, 0.05, 0.3))
def test_one_sided_arguments(dtype, side, largest):
    """All arguments of one sign (the degree must come from the largest magnitude, not the largest value)."""
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(20_001, generator=g, dtype=torch.float64) * side * largest).to(dtype)
    x[0] = side * largest
    ref = _reference(x)
    nonzero = ref != 0
    relative = ((expm1_(x.clone()).double() - ref).abs() / ref.abs())[nonzero]
    assert float(relative.max()) <= 2 * torch.finfo(dtype).eps


@pytest.mark.parametrize("dtype", DTYPES)
def test_series_taken_for_small_arguments(dtype):
    # Power: the series (not torch.expm1) computed these; its last bits differ from ATen's somewhere.
    g = torch.Generator().manual_seed(1)
    x = ((torch.rand(100_000, generator=g, dtype=torch.float64) * 2 - 1) * 1e-2).to(dtype)
    assert expm1_series_degree(1e-2, dtype) is not None
    assert not torch.equal(expm1_(x.clone()), torch.expm1(x))


def _truncated(x: Fraction, degree: int) -> Fraction:
    return sum((x**k / math.factorial(k) for k in range(1, degree + 1)), Fraction(0))


def _expm1_exact(x: Fraction, terms: int = 40) -> Fraction:
    return _truncated(x, terms)  # |x| <= 1 here: 40 terms leave less than 1e-47


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("largest", (1e-7, 1e-5, 1e-3, 0.02, 0.1, 0.25, 0.5))
def test_degree_truncation_bound(dtype, largest):
    """The chosen degree's truncation error at +-largest (where it is largest) is within a quarter epsilon of
    e^x - 1, computed in exact rational arithmetic; one degree less is not (the choice is the lowest that is)."""
    degree = expm1_series_degree(largest, dtype)
    if degree is None:
        assert dtype == torch.float64 and largest >= 0.05
        return
    tolerance = Fraction(torch.finfo(dtype).eps) / 4
    for sign in (1, -1):
        x = Fraction(sign * largest)
        exact = _expm1_exact(x)
        assert abs(_truncated(x, degree) - exact) <= tolerance * abs(exact)
    if degree > 1:
        x = Fraction(largest)
        exact = _expm1_exact(x)
        # the bound used is a little loose: one degree less may still pass at x, but two less must not
        if degree > 2:
            assert abs(_truncated(x, degree - 2) - exact) > tolerance * abs(exact)


def test_degrees_grow_with_the_arguments_and_stop():
    degrees = [expm1_series_degree(m, torch.float32) for m in (1e-9, 1e-4, 1e-2, 0.1, 0.5)]
    assert degrees == sorted(degrees) and degrees[0] == 1 and degrees[-1] <= EXPM1_SERIES_MAX_DEGREE
    assert expm1_series_degree(2.0, torch.float32) is None
    assert expm1_series_degree(float("nan"), torch.float32) is None
    assert expm1_series_degree(float("inf"), torch.float64) is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values_as_torch_expm1(dtype):
    x = torch.tensor([0.0, -0.0, 1e-3, float("nan"), float("inf"), -float("inf"), -1e-3], dtype=dtype)
    got = expm1_(x.clone())
    assert torch.equal(got.isnan(), torch.expm1(x).isnan())
    finite = ~got.isnan()
    assert torch.equal(got[finite], torch.expm1(x)[finite])


def test_scratch_and_shapes():
    g = torch.Generator().manual_seed(2)
    x = (torch.rand(30, 7, 11, generator=g) - 0.5) * 0.02
    scratch = torch.empty_like(x)
    got = expm1_(x.clone(), scratch=scratch)
    assert got.shape == x.shape
    assert torch.equal(got, expm1_(x.clone()))
    assert expm1_(torch.empty(0)).numel() == 0
