"""HMC's native route on an energy model (`kernels.energy_leapfrog`) against its PyTorch route: from the same
generator, the same transitions (positions, log f, gradients and acceptance probabilities to float tolerance, hence
the same accept decisions), on unbounded and box support (reflections at the walls, some crossing the whole box),
float32 and float64, chains with a two-dimensional batch and per-chain step sizes; RAISE_EVAL_NATIVE=0 takes the
PyTorch route. The native route's own statistics (every transition taken by it, checked by a spy): exact draws of
a Gaussian p_beta keep its moments (float32 and float64), and AIS through it is unbiased for Z at K = 1, 2, 3."""

from __future__ import annotations

import math

import pytest
import torch
from raise_eval.models import EnergyModel, GaussianBase
from torch import nn

from raise_eval import ais
from raise_eval.kernels import energy_hmc, energy_leapfrog
from raise_eval.kernels.energy_hmc import EnergyHMCKernel, hmc_transition
from raise_eval.paths.energy import EnergyPath
from tests.statistics import assert_unbiased

EVENT = (2, 3)


def _path(dtype: torch.dtype, bounded: bool) -> EnergyPath:
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1)).to(dtype)
    support = ("real", 0.0, 1.0) if bounded else "real"
    model = EnergyModel(lambda x: net(x.flatten(1)).squeeze(-1), support=support, event_shape=EVENT, dtype=dtype)
    mean, std = torch.linspace(0.1, 0.6, 6).reshape(EVENT), torch.linspace(0.2, 0.4, 6).reshape(EVENT)
    return EnergyPath(model, GaussianBase(mean, std, *((0.0, 1.0) if bounded else (None, None))))


def _run(path, native: bool, monkeypatch, transitions: int = 12):
    """Each transition's (x, log f, grad, acceptance) from one seed, by the native route or the PyTorch one."""
    monkeypatch.setenv("RAISE_EVAL_NATIVE", "1" if native else "0")
    generator = torch.Generator().manual_seed(7)
    state = path.sample_initial(12, generator)
    state = state._replace(x=state.x.reshape(3, 4, *EVENT), log_f=state.log_f.reshape(3, 4))
    # per-chain step sizes from small to several times the box: reflections, and folds across the whole box
    kernel = EnergyHMCKernel(path, torch.linspace(0.05, 6.0, 12, dtype=torch.float64).reshape(3, 4), 4)
    out = []
    for t in range(transitions):
        beta = 0.1 + 0.07 * t
        if native:
            state, info = energy_leapfrog.native_transition(
                path, state, beta, kernel.step_size(beta, state.x), 4, generator
            )
        else:
            state, info = hmc_transition(path, state, beta, kernel.step_size(beta, state.x), 4, generator)
        out.append((state.x, state.log_f, state.grad, info["acceptance"]))
    return out


@pytest.mark.parametrize("bounded", [False, True], ids=["unbounded", "box"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_native_route_gives_the_pytorch_routes_transitions(dtype, bounded, monkeypatch):
    path = _path(dtype, bounded)
    if energy_leapfrog.leapfrog_library(torch.zeros(1, *EVENT, dtype=dtype), path) is None:
        pytest.skip("the native kernel did not compile here")
    native, reference = _run(path, True, monkeypatch), _run(path, False, monkeypatch)
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-11, "atol": 1e-11}
    moved = []
    for (x, log_f, grad, acceptance), (x_ref, log_f_ref, grad_ref, acceptance_ref) in zip(native, reference):
        torch.testing.assert_close(x, x_ref, **tolerance)
        torch.testing.assert_close(log_f, log_f_ref, **tolerance)
        torch.testing.assert_close(grad, grad_ref, **tolerance)
        torch.testing.assert_close(acceptance, acceptance_ref, **tolerance)
        assert x.dtype == dtype and grad.dtype == dtype and log_f.dtype == torch.float64
        moved.append(acceptance)
    acceptance = torch.stack(moved)
    assert bool((acceptance > 0.9).any()) and bool((acceptance < 0.1).any())  # accepted and rejected proposals
    if bounded:
        assert bool(((native[-1][0] >= 0) & (native[-1][0] <= 1)).all())


class _KeptGradientQuadratic(torch.autograd.Function):
    """E(x) = |x - 0.4|^2 / 2 whose backward writes its gradient into a buffer it keeps and returns that buffer (as an
    energy might, or a hook of the user's that keeps the gradients it sees)."""

    kept = None

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * ((x - 0.4) ** 2).sum(-1)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        if _KeptGradientQuadratic.kept is None or _KeptGradientQuadratic.kept.shape != x.shape:
            _KeptGradientQuadratic.kept = torch.empty_like(x)
        return torch.mul(grad_out[:, None], x - 0.4, out=_KeptGradientQuadratic.kept)


@pytest.mark.parametrize("bounded", [False, True], ids=["unbounded", "box, a chain starting outside"])
def test_an_energy_that_keeps_the_gradient_it_returns_gets_the_pytorch_routes_transitions(bounded, monkeypatch):
    """A reviewer's find: a chain's kept gradient was the buffer the energy's backward returned, which the energy
    rewrote at its next pass, so a rejected proposal left its chain with another position's gradient (and a native
    route that wrote the chosen gradient into that buffer put its states 1.8 apart from the PyTorch route's after 8
    transitions). `EnergyModel` sees the reuse when it is built (two gradients of the probe batch in the same memory)
    and copies each gradient from then on; the kernels write only to buffers of their own. On the box, a chain
    starting outside it takes the acceptance test apart (`select_rows`), the other branch."""
    support = ("real", 0.0, 1.0) if bounded else "real"
    model = EnergyModel(_KeptGradientQuadratic.apply, support=support, event_shape=(3,), dtype=torch.float64)
    box = (0.0, 1.0) if bounded else (None, None)
    path = EnergyPath(model, GaussianBase(torch.full((3,), 0.5), torch.full((3,), 0.3), *box))
    if energy_leapfrog.leapfrog_library(torch.zeros(1, 3, dtype=torch.float64), path) is None:
        pytest.skip("the native kernel did not compile here")
    runs = []
    for native in (True, False):
        monkeypatch.setenv("RAISE_EVAL_NATIVE", "1" if native else "0")
        _KeptGradientQuadratic.kept = None
        generator = torch.Generator().manual_seed(7)
        state = path.sample_initial(12, generator)
        if bounded:
            state = path.state_from_x(torch.cat([torch.full((1, 3), 1.5, dtype=torch.float64), state.x[1:]]))
        kernel = EnergyHMCKernel(path, 3.0, 4)  # long moves: rejections
        accepted = []
        for _ in range(8):
            state, info = hmc_transition(path, state, 0.5, kernel.step_size(0.5, state.x), 4, generator)
            accepted.append(info["acceptance"])
        runs.append((state, torch.stack(accepted)))
    assert model._copies_gradient and not _path(torch.float64, bounded).model._copies_gradient
    (native, acceptance), (reference, _) = runs
    assert bool((acceptance < 0.5).any())  # rejected proposals, where the chosen gradient is the start's
    torch.testing.assert_close(native.x, reference.x, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(native.grad, reference.grad, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(native.grad, -(native.x - 0.4), rtol=1e-11, atol=1e-11)  # each chain's own gradient


@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0])
def test_the_acceptance_from_the_kernels_sums_is_the_log_densities_and_kinetic_energies_taken_apart(beta):
    """The native route's log acceptance ratio against H_0 - H_L written out from log p_0 (`GaussianBase.log_prob`,
    -inf outside the box), log f and the kinetic energies, from chains' own positions and momenta: `hmc_finish`'s
    shortened arithmetic (the base's normalizer cancelled) for chains inside the box, read back from its acceptance
    probabilities min(1, e^r) of r and of -r (old and new swapped); and `_log_accept_apart`, taken where a chain is
    outside the box at either end, which gets the written-out value (-inf, or NaN where both are outside or beta is
    1, which the transition then rejects and counts)."""
    path = _path(torch.float64, True)
    g = torch.Generator().manual_seed(3)
    x0, x1 = (torch.rand(5, *EVENT, generator=g, dtype=torch.float64) for _ in range(2))
    x1[3, 0, 0], x0[4, 1, 2], x1[4, 1, 2] = 1.5, -0.2, 1.2  # 3 ends outside the box, 4 starts and ends there
    p0, p1 = (torch.randn(5, *EVENT, generator=g, dtype=torch.float64) for _ in range(2))
    log_f0, log_f1 = torch.randn(5, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)
    base = path.base

    def sums(x, p, square):
        z = ((x - base.mean) / base.std).flatten(1)
        outside = ((x < 0) | (x > 1)).flatten(1).any(-1).long()
        return {square: p.flatten(1).square().sum(-1), "base_sum": z.square().sum(-1), "base_outside": outside}

    start, end = sums(x0, p0, "square_in"), sums(x1, p1, "square_out")
    kinetic0, kinetic1 = 0.5 * p0.flatten(1).square().sum(-1), 0.5 * p1.flatten(1).square().sum(-1)
    h0 = -((1 - beta) * base.log_prob(x0) + beta * log_f0) + kinetic0
    h1 = -((1 - beta) * base.log_prob(x1) + beta * log_f1) + kinetic1
    want = h0 - h1
    lib = energy_leapfrog.leapfrog_library(x0, path)
    if lib is not None:  # inside the box (chains 0 to 2): hmc_finish, every proposal accepted (log u = -inf)
        rows = torch.zeros(3, 1, dtype=torch.float64)  # the rows it copies: placeholders here

        def acceptance(new, old, start, end):
            out = torch.empty(3, 3, dtype=torch.float64)
            sums = (start["base_sum"], end["base_sum"], start["square_in"], end["square_out"])
            log_u = torch.full((3,), -math.inf, dtype=torch.float64)
            # every argument held here while the kernel reads it (a pointer to a freed temporary would dangle)
            args = [t[:3].contiguous() for t in (new, old, *sums)] + [log_u] + [rows.clone() for _ in range(5)]
            lib.hmc_finish(3, 8, beta, *(t.data_ptr() for t in (*args, out[0], out[1], out[2])))
            return out[1]

        forward = acceptance(log_f1, log_f0, start, end)
        backward = acceptance(log_f0, log_f1, {"base_sum": end["base_sum"], "square_in": end["square_out"]},
                              {"base_sum": start["base_sum"], "square_out": start["square_in"]})  # fmt: skip
        got = forward.log() - backward.log()  # r = log min(1, e^r) - log min(1, e^-r)
        torch.testing.assert_close(got, want[:3], rtol=1e-12, atol=1e-12)
    got = energy_leapfrog._log_accept_apart(path, beta, log_f1, log_f0, start, end, (5,))  # chains 3, 4 outside
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert bool(torch.isfinite(want[:3]).all()) and (float(want[3]) == -math.inf or beta == 1.0)


def test_the_native_route_split_over_threads_gives_the_same_transitions(monkeypatch):
    path = _path(torch.float32, True)
    if energy_leapfrog.leapfrog_library(torch.zeros(1, *EVENT), path) is None:
        pytest.skip("the native kernel did not compile here")
    one = _run(path, True, monkeypatch, transitions=4)
    monkeypatch.setattr(energy_leapfrog, "COORDINATES_PER_THREAD", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        split = _run(path, True, monkeypatch, transitions=4)
    finally:
        torch.set_num_threads(threads)
    for got, want in zip(split, one):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_pass_reflects_as_the_pytorch_route_bit_for_bit(dtype):
    """One moving pass on the box [0, 1] with no force (beta = 1, zero gradient: the momentum stays) and unit moves,
    so the position before reflection is x + p: the kernel's positions and momenta equal `reflect`'s bit for bit,
    for steps inside the box, across a wall, exactly one width past it (folded onto the other wall, the momentum
    kept: t = 2 is even), across the whole box several times, and for NaN and infinite momenta. (A fold recovered
    from the mirrored position, 0a2a794, differed there, and in the last bits of long folds.)"""
    model = EnergyModel(lambda x: x.sum(-1), support=("real", 0.0, 1.0), event_shape=(12,), dtype=dtype)
    path = EnergyPath(model, GaussianBase(torch.full((12,), 0.5), torch.ones(12), 0.0, 1.0))
    x = torch.full((1, 12), 0.5, dtype=dtype)
    lib = energy_leapfrog.leapfrog_library(x, path)
    if lib is None:
        pytest.skip("the native kernel did not compile here")
    p = torch.tensor([[0.2, 0.6, -0.6, 1.5, -1.5, 2.5, 3.7, -2.2, 10.25, 1234.567, math.inf, math.nan]], dtype=dtype)
    x_out, p_out = torch.empty_like(x), torch.empty_like(p)
    kernel = energy_leapfrog._Pass(lib, path, x, torch.tensor(1.0), 1.0)
    kernel(x, x_out, p, p_out, torch.zeros_like(x), 1.0, True, {})
    want_x, want_p = energy_hmc.reflect(x + p, p, 0.0, 1.0)
    torch.testing.assert_close(x_out, want_x, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(p_out, want_p, rtol=0, atol=0, equal_nan=True)
    assert float(x_out[0, 3]) == 0.0 and float(p_out[0, 3]) == 1.5  # one width past the top: the bottom, unflipped


def test_the_native_route_reflects_across_the_whole_box_as_fold_does(monkeypatch):
    """Chains whose one step crosses the box several times: the kernel's fold matches `_fold`'s (via the PyTorch
    route's transition)."""
    path = _path(torch.float64, True)
    if energy_leapfrog.leapfrog_library(torch.zeros(1, *EVENT, dtype=torch.float64), path) is None:
        pytest.skip("the native kernel did not compile here")
    calls = []

    def spy(x, p, low, high):
        calls.append(int(((x - x.clamp(low, high)).abs() >= high - low).sum()))
        return energy_hmc._fold(x, p, low, high)

    monkeypatch.setattr(energy_hmc, "reflect", spy)
    reference = _run(path, False, monkeypatch, transitions=3)
    assert sum(calls) > 0  # some coordinates crossed the whole box
    native = _run(path, True, monkeypatch, transitions=3)
    for got, want in zip(native, reference):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("setting, native_calls", [("0", 0), ("1", None)])
def test_raise_eval_native_0_takes_the_pytorch_route(setting, native_calls, monkeypatch):
    path = _path(torch.float32, True)
    monkeypatch.setenv("RAISE_EVAL_NATIVE", setting)
    available = energy_leapfrog.native.library("energy_leapfrog") is not None if setting == "1" else False
    reflections = []

    def counting(x, p, low, high):
        reflections.append(1)
        return energy_hmc._fold(x, p, low, high)

    monkeypatch.setattr(energy_hmc, "reflect", counting)
    generator = torch.Generator().manual_seed(0)
    kernel = EnergyHMCKernel(path, 0.5, 3)
    kernel(path.sample_initial(5, generator), 0.5, generator)
    assert len(reflections) == (0 if available else 3)  # the PyTorch route reflects once per leapfrog step


def test_the_native_route_is_not_taken_off_the_cpu_dtypes_or_for_another_base():
    path = _path(torch.float32, False)
    assert energy_leapfrog.leapfrog_library(torch.zeros(2, *EVENT, dtype=torch.float16), path) is None

    class OtherBase(GaussianBase):
        pass

    other = EnergyPath(path.model, path.base)
    other.base = OtherBase(path.base.mean, path.base.std)  # a base whose density may be another (a subclass)
    assert energy_leapfrog.leapfrog_library(torch.zeros(2, *EVENT), other) is None


# ---------------------------------------------------------------- the native route's own statistics
# A diagonal quadratic energy E(x) = sum a (x - m)^2 / 2 (log Z = sum log(2 pi / a) / 2) on a diagonal Gaussian base
# that is not it: p_beta is the diagonal Gaussian of precision (1 - beta) / s0^2 + beta a, in closed form.
PRECISION, CENTRE = torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64), torch.tensor([0.5, -1.0, 0.2])
BASE_MEAN, BASE_STD = torch.tensor([0.2, -0.6, 0.0]), torch.tensor([0.9, 1.6, 1.1])


def _quadratic_path(dtype: torch.dtype) -> EnergyPath:
    a, m = PRECISION.to(dtype), CENTRE.to(dtype)
    model = EnergyModel(lambda x: 0.5 * (a * (x - m) ** 2).sum(-1), support="real", event_shape=(3,), dtype=dtype)
    return EnergyPath(model, GaussianBase(BASE_MEAN, BASE_STD))


def _p_beta(beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, variance) per coordinate of p_beta, float64."""
    prior = 1 / BASE_STD.double() ** 2
    precision = (1 - beta) * prior + beta * PRECISION
    return ((1 - beta) * prior * BASE_MEAN.double() + beta * PRECISION * CENTRE.double()) / precision, 1 / precision


def _count_routes(monkeypatch) -> list:
    """Records, per HMC transition, whether the native route took it (True) or returned None (False)."""
    routes = []

    def spy(*args):
        done = energy_leapfrog.native_transition(*args)
        routes.append(done is not None)
        return done

    monkeypatch.setattr(energy_hmc, "native_transition", spy)
    return routes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_native_route_leaves_a_gaussian_p_beta_invariant(dtype, monkeypatch):
    """Exact draws of p_beta, five native HMC transitions: each coordinate's mean and variance within 4 standard
    errors of p_beta's (the transitions taken by the kernel, checked by a spy)."""
    path = _quadratic_path(dtype)
    if energy_leapfrog.leapfrog_library(torch.zeros(1, 3, dtype=dtype), path) is None:
        pytest.skip("the native kernel did not compile here")
    routes = _count_routes(monkeypatch)
    beta, n = 0.6, 20_000
    mean, var = _p_beta(beta)
    g = torch.Generator().manual_seed(21)
    draws = mean + var.sqrt() * torch.randn(n, 3, generator=g, dtype=torch.float64)
    state = path.state_from_x(draws.to(dtype))
    kernel = EnergyHMCKernel(path, 0.5, 4)
    accepted = []
    for _ in range(5):
        state, info = kernel.step(state, beta, g)
        accepted.append(float(info["acceptance"].mean()))
    assert routes == [True] * 5
    x = state.x.double()
    assert 0.3 < min(accepted) and max(accepted) < 0.999  # moved, with rejections (the test is not vacuous)
    assert float((x - draws).abs().mean()) > 0.1
    se, var_se = (var / n).sqrt(), var * (2 / n) ** 0.5  # a normal sample variance's s.e.: var sqrt(2 / n)
    assert bool(((x.mean(0) - mean).abs() < 4 * se).all()), (x.mean(0) - mean) / se
    assert bool(((x.var(0) - var).abs() < 4 * var_se).all()), (x.var(0) - var) / var_se


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ais_through_the_native_route_is_unbiased_for_z(dtype, k, monkeypatch):
    """AIS with K = 1, 2, 3 native HMC transitions: the mean of exp(log w - log Z) within 4 s.e. of 1."""
    path = _quadratic_path(dtype)
    if energy_leapfrog.leapfrog_library(torch.zeros(1, 3, dtype=dtype), path) is None:
        pytest.skip("the native kernel did not compile here")
    routes = _count_routes(monkeypatch)
    betas = torch.linspace(0, 1, k + 1, dtype=torch.float64)
    kernel = EnergyHMCKernel(path, 0.6, 3)
    result = ais(path, betas, 20_000, generator=torch.Generator().manual_seed(40 + k), kernel=kernel)
    assert routes == [True] * k  # the K transitions, each by the native kernel
    log_z = float(0.5 * torch.log(2 * torch.pi / PRECISION).sum())
    assert_unbiased(result.log_weights, log_z)


@pytest.mark.parametrize("shape", [(3,), (8, 3)], ids=["per-coordinate", "per-chain-and-coordinate"])
def test_step_sizes_varying_over_the_event_take_the_pytorch_route(shape, monkeypatch):
    """`hmc_transition`'s step sizes broadcast against x (*B, *event_shape); the kernel takes one per chain, so those
    varying over the event's coordinates go by the PyTorch route (where the native one raised a RuntimeError)."""
    path = _quadratic_path(torch.float64)
    if energy_leapfrog.leapfrog_library(torch.zeros(1, 3, dtype=torch.float64), path) is None:
        pytest.skip("the native kernel did not compile here")
    state = path.sample_initial(8, torch.Generator().manual_seed(5))
    eps = torch.linspace(0.1, 0.9, math.prod(shape), dtype=torch.float64).reshape(shape)
    routes = _count_routes(monkeypatch)
    got, info = hmc_transition(path, state, 0.5, eps, 3, torch.Generator().manual_seed(6))
    assert routes == [False]
    monkeypatch.setenv("RAISE_EVAL_NATIVE", "0")
    want, info_want = hmc_transition(path, state, 0.5, eps, 3, torch.Generator().manual_seed(6))
    torch.testing.assert_close(got.x, want.x, rtol=0, atol=0)
    torch.testing.assert_close(info["acceptance"], info_want["acceptance"], rtol=0, atol=0)
