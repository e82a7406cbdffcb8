"""The elementwise kernels of an annealing step (step.c): the samples' comparison gives the PyTorch sampler's bits
and leaves the generator where it leaves it; the weight update's sum matches the exact softplus differences. The
kernels' distributions are checked end to end by the exact-transition and unbiasedness tests, which take them
wherever they compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from raise_eval.models import sampling
from raise_eval.models.boltzmann import layered
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine, random_chain_parameters

from raise_eval import native


def _needs_step() -> None:
    if native.library("step") is None:
        pytest.skip(f"the step kernels are unavailable: {native.unavailable_reason('step')}")


def _sample(p: torch.Tensor, seed: int, in_place: bool) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = sampling.sample_bernoulli_probs_(p.clone(), g) if in_place else sampling.sample_bernoulli_probs(p, g)
    return x, torch.rand(4, generator=g)  # where the generator was left


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("n", [4096, 4099, 70_001, 300_000])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_native_comparison_gives_the_pytorch_samplers_bits(dtype, n, threads, monkeypatch):
    """Probabilities of every kind (0, 1, the byte grid's ties k/256, a NaN, tiny ones, uniform ones), sizes off the
    kernel's blocks of 256 and its split between threads, sampled in place and into a copy: the same samples, and
    the generator left in the same state, as the PyTorch passes."""
    _needs_step()
    g = torch.Generator().manual_seed(n)
    p = torch.rand(n, generator=g, dtype=dtype)
    special = torch.tensor([0.0, 1.0, 0.5, 1 / 256, 255 / 256, float("nan"), 1e-30, 1 - 2**-24, 2**-32], dtype=dtype)
    p[: special.numel()] = special
    p[1000:1300] = torch.randint(0, 257, (300,), generator=g).to(dtype) / 256  # on the bytes' grid
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for in_place in (True, False):
            monkeypatch.setenv(native.NATIVE_ENV, "0")
            expected = _sample(p, 11, in_place)
            monkeypatch.delenv(native.NATIVE_ENV)
            got = _sample(p, 11, in_place)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    finally:
        torch.set_num_threads(saved)
    assert got[0][0] == 0 and got[0][1] == 1 and got[0][5] == 0  # p = 0, 1 and NaN


def test_the_native_comparison_samples_p():
    """The frequency of ones, per probability, within 4 standard errors (fails about 1 time in 16,000 per value)."""
    _needs_step()
    values = torch.tensor([0.001, 0.1, 0.37, 0.5, 0.9, 0.999])
    p = values.repeat(100_000)
    x = sampling.sample_bernoulli_probs(p, torch.Generator().manual_seed(0)).view(100_000, -1)
    se = (values * (1 - values) / 100_000).sqrt()
    assert bool(((x.mean(0) - values).abs() <= 4 * se).all())


def _two_temperatures(dtype):
    g = torch.Generator().manual_seed(2)
    weights, biases = random_chain_parameters([200, 300], weight_std=0.1, bias_std=0.5, generator=g, dtype=dtype)
    model = LayeredBoltzmannMachine(weights, biases)
    base = [torch.randn(200, generator=g, dtype=dtype), torch.zeros(300, dtype=dtype)]
    v = (torch.rand(700, 200, generator=g) < 0.5).to(dtype)
    return model, base, [v, None]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("step", [1e-7, 1e-3, 0.05])
def test_the_native_weight_update_matches_the_exact_softplus_differences(dtype, step):
    """-sum log1p(expm1(-d) sigmoid(z')) by the kernel (series degrees 1 to 8 or more over these steps), against
    the float64 softplus differences of the same logits: within 1e-5 of a float32 logit's rounding per unit, as
    the PyTorch passes are; the same bits at 1 and 2 threads."""
    _needs_step()
    model, base, layers = _two_temperatures(dtype)
    a, b = model.annealed(0.4, base), model.annealed(0.4 + step, base)
    u = model.unscaled_input(layers, 1)
    z_from, z_to = a.layer_logits(layers, 1, u).double(), b.layer_logits(layers, 1, u).double()
    exact = (F.softplus(z_to) - F.softplus(z_from)).sum(-1) + layers[0].double() @ (b.biases[0] - a.biases[0]).double()
    bound = step * float(model.weights[0].abs().sum(0).max() + base[1].sub(model.biases[1]).abs().max())
    got = a.log_ratio_to(b, layers, [None, u], small_steps=[False, True], step_bounds=[None, bound])
    pytorch = a.log_ratio_to(b, layers, [None, u], small_steps=[False, True])
    tolerance = 300 * torch.finfo(dtype).eps * float(z_to.abs().max()) * step + 1e-12
    assert float((got - exact).abs().max()) <= max(tolerance, float((pytorch - exact).abs().max()) * 2)
    # the kernel's own sum: rows split between threads, the same bits (torch.mv's visible term may not be)
    probs = torch.sigmoid(z_to).to(dtype)
    saved = torch.get_num_threads()
    try:
        sums = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            sums.append(layered._native_log1p_expm1(u, probs, a, b, 1, b.weight_scale - a.weight_scale, bound))
    finally:
        torch.set_num_threads(saved)
    assert sums[0] is not None and torch.equal(sums[0], sums[1])


def test_without_a_bound_or_the_kernel_the_pytorch_passes_serve(monkeypatch):
    """No bound on |d| given (the caller cannot vouch for one), or the kernel switched off: log_ratio_to takes its
    PyTorch passes and gives their numbers."""
    model, base, layers = _two_temperatures(torch.float32)
    a, b = model.annealed(0.4, base), model.annealed(0.401, base)
    u = model.unscaled_input(layers, 1)
    plain = a.log_ratio_to(b, layers, [None, u], small_steps=[False, True])
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    off = a.log_ratio_to(b, layers, [None, u], small_steps=[False, True], step_bounds=[None, 0.5])
    assert torch.equal(plain, off)
