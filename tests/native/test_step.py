"""The elementwise kernels of an annealing step (step.c): the samples' comparison gives the PyTorch sampler's bits
and leaves the generator where it leaves it; the weight update's sum matches the exact softplus differences. The
kernels' distributions are checked end to end by the exact-transition and unbiasedness tests, which take them
wherever they compile."""

from __future__ import annotations

import ctypes

import pytest
import torch
import torch.nn.functional as F
from raise_eval.models import native, sampling
from raise_eval.models.boltzmann import layered
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine, random_chain_parameters


def _needs_step() -> None:
    if native.library("step") is None:
        pytest.skip(f"the step kernels are unavailable: {native.unavailable_reason('step')}")


def _philox(counter, key) -> list[int]:
    lib = native.library("step")
    c, k, out = (ctypes.c_uint32 * 4)(*counter), (ctypes.c_uint32 * 2)(*key), (ctypes.c_uint32 * 4)()
    lib.philox4x32_10(c, k, out)
    return list(out)


def test_philox_gives_random123s_known_answers():
    _needs_step()
    assert _philox([0] * 4, [0] * 2) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert _philox([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    pi = [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344]
    assert _philox(pi, [0xA4093822, 0x299F31D0]) == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def _key_of(seed: int) -> tuple[int, int]:
    word = int(
        torch.empty(1, dtype=torch.int64).random_(-(1 << 63), None, generator=torch.Generator().manual_seed(seed))
    )
    return word & 0xFFFFFFFF, (word >> 32) & 0xFFFFFFFF


def test_each_element_takes_the_byte_its_counter_gives():
    """The kernel's bytes, read back through the samples (with p = k / 256 an element is 1 exactly when its byte is
    below k, no tie), are those of the scalar Philox at the documented counters: element e of block B (256
    elements) takes byte e mod 4 of word e / 64 of counter 16 B + (e mod 64) / 4. So the vectorized rounds equal the
    reference, and the key is the generator's next 64 bits."""
    _needs_step()
    n = 4096 + 300
    ones = torch.zeros(n)
    for k in range(256):
        p = torch.full((n,), k / 256)
        ones += sampling.sample_bernoulli_probs_(p, torch.Generator().manual_seed(9))
    got = (255 - ones).to(torch.int64)  # #{k : byte < k} = 255 - byte
    key = _key_of(9)
    expected = []
    for e in range(n):
        block, offset = divmod(e, 256)
        counter = 16 * block + (offset % 64) // 4
        word = _philox([counter & 0xFFFFFFFF, counter >> 32, 0, 0], list(key))[offset // 64]
        expected.append((word >> (8 * (offset % 4))) & 0xFF)
    assert got.tolist() == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_the_same_samples_for_any_split_and_in_place_or_not(dtype):
    """Sizes off the kernel's blocks, 1 or 2 threads, in place or into a copy: the same samples; the generator moves
    by one 64-bit draw per call; another seed gives other samples."""
    _needs_step()
    p = torch.rand(70_001, generator=torch.Generator().manual_seed(1), dtype=dtype)
    results = []
    saved = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for in_place in (True, False):
                g = torch.Generator().manual_seed(4)
                x = (
                    sampling.sample_bernoulli_probs_(p.clone(), g)
                    if in_place
                    else sampling.sample_bernoulli_probs(p, g)
                )
                results.append((x, torch.rand(3, generator=g)))
    finally:
        torch.set_num_threads(saved)
    after_one_draw = torch.Generator().manual_seed(4)
    torch.empty(1, dtype=torch.int64).random_(-(1 << 63), None, generator=after_one_draw)
    expected_next = torch.rand(3, generator=after_one_draw)
    for x, next_numbers in results:
        assert torch.equal(x, results[0][0]) and torch.equal(next_numbers, expected_next)
    assert not torch.equal(sampling.sample_bernoulli_probs(p, torch.Generator().manual_seed(5)), results[0][0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_the_native_draw_samples_p(dtype):
    """The frequency of ones for each probability, ties included (p on the bytes' grid k/256 and just off it, where
    the tie uniform decides), within 4 standard errors (each fails about 1 time in 16,000)."""
    _needs_step()
    values = torch.tensor([0.0, 1.0, 0.001, 0.1, 0.37, 0.5, 0.9, 0.999, 77 / 256, 77 / 256 + 1e-3, 3e-4], dtype=dtype)
    reps = 200_000
    x = sampling.sample_bernoulli_probs(values.repeat(reps), torch.Generator().manual_seed(0)).view(reps, -1)
    se = (values * (1 - values) / reps).sqrt()
    assert bool(((x.mean(0) - values).abs() <= 4 * se).all())


def test_the_native_draw_from_logits_samples_their_sigmoid():
    """Logits (float32, the sigmoid taken in the draw's pass): the frequency of ones within 4 standard errors of
    sigmoid(logit), saturated logits giving 0 and 1; logits of other dtypes, or too few, take sigmoid_ and the
    probability path."""
    _needs_step()
    logits = torch.tensor([-200.0, -30.0, -3.0, -0.2, 0.0, 0.7, 4.0, 30.0, 200.0])
    values = torch.sigmoid(logits.double())
    reps = 200_000
    x = sampling.sample_bernoulli_logits_(logits.repeat(reps), torch.Generator().manual_seed(0)).view(reps, -1)
    se = (values * (1 - values) / reps).sqrt().clamp_min(1e-12)
    assert bool(((x.mean(0).double() - values).abs() <= 4 * se).all())
    assert float(x[:, 0].max()) == 0.0 and float(x[:, -1].min()) == 1.0


def test_the_kernels_sigmoid_is_as_accurate_as_torchs():
    """sigmoid_float (step.c), read through the weight update's probabilities (the draw from logits uses the same
    function), against float64's sigmoid of the same float32 logits over [-60, 60]: relative error within 1.3 2^-23
    wherever p > 1e-37 (torch.sigmoid's: 1.21 2^-23 on these logits), and a NaN logit's probability a NaN."""
    _needs_step()
    model, base, layers = _two_temperatures(torch.float32)
    a, b = model.annealed(0.99, base), model.annealed(1.0, base)  # weight scale 1: b + u is exact in double
    u = torch.linspace(-60.0, 60.0, 700 * 300).view(700, 300)  # any inputs: the kernel reads them as given
    probs = torch.empty_like(u)
    layered._native_log1p_expm1(u, probs, a, b, 1, b.weight_scale - a.weight_scale, 2.0, fill_probs=True)
    logits = (b.biases[1].double() + b.weight_scale * u.double()).float()  # formed in double, rounded once
    exact = torch.sigmoid(logits.double())
    keep = exact > 1e-37
    assert float(((probs.double() - exact).abs() / exact)[keep].max()) <= 1.3 * 2.0**-23
    u[0, :3] = torch.tensor([float("nan"), -200.0, 200.0])
    layered._native_log1p_expm1(u, probs, a, b, 1, b.weight_scale - a.weight_scale, 2.0, fill_probs=True)
    assert torch.isnan(probs[0, 0]) and probs[0, 1] == 0.0 and probs[0, 2] == 1.0


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
