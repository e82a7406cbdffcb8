"""The kernels of energy models. Discrete (tiny neural energies, float64): the exact transition matrices of the
palindromic Metropolis scan and of Gibbs with gradients satisfy detailed balance with respect to p_beta and leave it
invariant, and the samplers draw from those matrices (chi-square, false alarm about 1e-4 per check). Real: HMC and
MALA leave a Gaussian p_beta invariant (moments of exact draws after transitions, within 5 standard errors: about
6e-7 per comparison), HMC reflected at a box's walls leaves a truncated Gaussian invariant (chi-square over bins),
and one HMC transition costs exactly L forward and backward passes of the energy."""

from __future__ import annotations

import math

import pytest
import torch
from raise_eval.models import EnergyModel, GaussianBase
from raise_eval.models.energy import fit_base

from raise_eval import contracts
from raise_eval.annealing import anneal
from raise_eval.exact import energy as exact_energy
from raise_eval.kernels.energy_hmc import EnergyHMCKernel, MALAKernel, _fold, reflect, tune_step_sizes
from raise_eval.kernels.energy_sites import GibbsWithGradientsKernel, MetropolisScanKernel
from raise_eval.paths.energy import EnergyPath
from tests.energy_models import QuadraticEnergy, neural_energy
from tests.statistics import assert_counts_match

TINY = [("binary", 3, 2), ("spin", 3, 2), ("categorical", 2, 3)]


def _path(kind, size, q, seed=0):
    model = neural_energy(kind, size, q, seed=seed, scale=1.5)
    data = exact_energy.configurations(model)[[0, 1, 1, 3]]
    return EnergyPath(model, fit_base(model, model.data_from_state(data), pseudocount=0.3))


def _p_beta(path, beta):
    codes = exact_energy.configurations(path.model)
    return torch.softmax(path.log_density(path.state_from_x(codes), beta), dim=0)


def _matrix(path, method, beta):
    if method == "metropolis":
        return exact_energy.metropolis_scan_matrix(path.model, path.base, beta)
    return exact_energy.gibbs_with_gradients_matrix(path.model, path.base, beta)


@pytest.mark.parametrize("method", ["metropolis", "gibbs-with-gradients"])
@pytest.mark.parametrize("kind, size, q", TINY)
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_the_discrete_kernels_satisfy_detailed_balance_and_leave_p_beta_invariant(kind, size, q, beta, method):
    path = _path(kind, size, q)
    p = _p_beta(path, beta)
    matrix = _matrix(path, method, beta)
    torch.testing.assert_close(matrix.sum(1), torch.ones_like(p), rtol=0, atol=1e-12)
    assert bool((matrix >= 0).all())
    flow = p.unsqueeze(1) * matrix
    torch.testing.assert_close(flow, flow.t(), rtol=0, atol=1e-14)
    torch.testing.assert_close(p @ matrix, p, rtol=0, atol=1e-13)


@pytest.mark.parametrize("method", ["metropolis", "gibbs-with-gradients"])
@pytest.mark.parametrize("kind, size, q", TINY)
def test_the_discrete_samplers_draw_from_their_transition_matrices(kind, size, q, method):
    path = _path(kind, size, q, seed=1)
    beta, start_index, n = 0.7, 3, 20_000
    start = exact_energy.configurations(path.model)[start_index]
    state = path.state_from_x(start.expand(n, *start.shape).contiguous())
    kernel = MetropolisScanKernel(path) if method == "metropolis" else GibbsWithGradientsKernel(path)
    new, info = kernel.step(state, beta, torch.Generator().manual_seed(2))
    counts = torch.bincount(exact_energy.configuration_index(path.model, new.x), minlength=q**size)
    assert_counts_match(counts, _matrix(path, method, beta)[start_index])
    # the state's log f is the new state's
    torch.testing.assert_close(new.log_f, path.model.log_unnormalized_state(new.x))
    assert info["acceptance"].shape == (n,) and bool(((info["acceptance"] >= 0) & (info["acceptance"] <= 1)).all())


def _gaussian_path(dim, seed=0):
    energy = QuadraticEnergy(dim, seed)
    model = EnergyModel(energy, support="real", event_shape=(dim,))
    g = torch.Generator().manual_seed(seed + 1)
    base = GaussianBase(torch.randn(dim, generator=g, dtype=torch.float64), 0.5 + torch.rand(dim, generator=g,
                        dtype=torch.float64))  # fmt: skip
    return EnergyPath(model, base), energy


def _gaussian_at(path, energy, beta):
    """(mean, covariance) of p_beta, a product of Gaussians."""
    prior = torch.diag(1 / path.base.std**2)
    precision = (1 - beta) * prior + beta * energy.precision
    cov = torch.linalg.inv(precision)
    mean = cov @ ((1 - beta) * prior @ path.base.mean + beta * energy.precision @ energy.mean)
    return mean, cov


@pytest.mark.parametrize("kernel_kind", ["hmc", "mala"])
@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_hmc_and_mala_leave_a_gaussian_p_beta_invariant(kernel_kind, beta):
    path, energy = _gaussian_path(3)
    mean, cov = _gaussian_at(path, energy, beta)
    n = 20_000
    g = torch.Generator().manual_seed(3)
    draws = mean + torch.randn(n, 3, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).t()
    kernel = EnergyHMCKernel(path, 0.4, 5) if kernel_kind == "hmc" else MALAKernel(path, 0.4)
    state = path.state_from_x(draws)
    accepted = []
    for _ in range(5):
        state, info = kernel.step(state, beta, g)
        accepted.append(float(info["acceptance"].mean()))
    x = state.x
    assert 0.3 < min(accepted) and max(accepted) < 1.0  # the chains moved (the test is not vacuous)
    assert float((x - draws).abs().mean()) > 0.05
    se = (cov.diagonal() / n).sqrt()
    assert bool(((x.mean(0) - mean).abs() < 5 * se).all()), (x.mean(0) - mean) / se
    # variances: the standard error of a sample variance of a normal is var * sqrt(2 / n)
    var_se = cov.diagonal() * math.sqrt(2 / n)
    assert bool(((x.var(0) - cov.diagonal()).abs() < 5 * var_se).all())


def test_hmc_reflected_at_the_walls_leaves_a_truncated_gaussian_invariant():
    # E(x) = (x - 0.9)^2 / (2 0.3^2) on [0, 1]^2: p_beta is the truncated Gaussian itself when the base is it
    model = EnergyModel(lambda x: ((x - 0.9) ** 2).sum(-1) / (2 * 0.3**2), ("real", 0.0, 1.0), (2,),
                        dtype=torch.float64)  # fmt: skip
    base = GaussianBase(torch.full((2,), 0.9, dtype=torch.float64), torch.full((2,), 0.3, dtype=torch.float64), 0, 1)
    path = EnergyPath(model, base)
    n = 20_000
    g = torch.Generator().manual_seed(4)
    state = path.state_from_x(base.sample((n,), g, torch.float64))
    kernel = EnergyHMCKernel(path, 1.5, 4)  # long moves: many reach a wall
    for _ in range(3):
        state, info = kernel.step(state, 0.6, g)
    assert bool(((state.x >= 0) & (state.x <= 1)).all()) and float(info["acceptance"].mean()) > 0.5
    edges = torch.linspace(0, 1, 21, dtype=torch.float64)
    cdf = torch.special.ndtr((edges - 0.9) / 0.3)
    probs = (cdf[1:] - cdf[:-1]) / (cdf[-1] - cdf[0])
    counts = torch.histc(state.x[:, 0], bins=20, min=0, max=1).long()
    assert_counts_match(counts, probs)


def test_step_sizes_per_chain():
    path, _ = _gaussian_path(3)
    start = path.sample_initial(6, torch.Generator().manual_seed(0))
    per_chain = torch.tensor([1e-9, 1e-9, 1e-9, 0.3, 0.3, 0.3], dtype=torch.float64)
    new, info = EnergyHMCKernel(path, per_chain, 3).step(start, 1.0, torch.Generator().manual_seed(1))
    moved = (new.x - start.x).abs().amax(1)
    assert bool((moved[:3] < 1e-6).all()) and bool((moved[3:] > 1e-3).any())
    assert bool((info["acceptance"][:3] > 0.999).all())  # a step of 1e-9 changes H by almost nothing


def test_reflection_folds_into_the_box_and_flips_the_momentum_of_odd_reflections():
    x = torch.tensor([0.5, 1.25, -0.25, 2.5, -1.5], dtype=torch.float64)
    folded, p = reflect(x, torch.ones(5, dtype=torch.float64), 0.0, 1.0)
    torch.testing.assert_close(folded, torch.tensor([0.5, 0.75, 0.25, 0.5, 0.5], dtype=torch.float64))
    assert p.tolist() == [1.0, -1.0, -1.0, 1.0, 1.0]
    # the CPU's route folds only the coordinates outside: the same numbers as folding every one
    g = torch.Generator().manual_seed(0)
    x, p = 3 * torch.randn(50, 7, generator=g) - 1, torch.randn(50, 7, generator=g)
    expected = _fold(x, p, -1.0, 0.5)
    got = reflect(x.clone(), p.clone(), -1.0, 0.5)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


class _Counting(torch.nn.Module):
    def __init__(self, energy):
        super().__init__()
        self.inner, self.calls = energy, 0

    def forward(self, x):
        self.calls += 1
        return self.inner(x)


@pytest.mark.parametrize("num_leapfrog", [1, 4])
def test_one_hmc_transition_costs_exactly_l_energy_evaluations_and_the_weight_update_none(num_leapfrog):
    counting = _Counting(QuadraticEnergy(3))
    path = EnergyPath(EnergyModel(counting, "real", (3,)))
    state = path.with_grad(path.sample_initial(5, torch.Generator().manual_seed(0)))
    kernel = EnergyHMCKernel(path, 0.2, num_leapfrog)
    counting.calls = 0
    state = kernel(state, 0.5, torch.Generator().manual_seed(1))
    state = kernel(state, 0.5, torch.Generator().manual_seed(2))
    path.log_density_ratio(state, 0.5, 0.6)
    assert counting.calls == 2 * num_leapfrog


def test_the_kernels_conform_report_through_anneal_and_refuse_the_wrong_support():
    path, _ = _gaussian_path(2)
    discrete = _path("binary", 3, 2)
    for kernel in (EnergyHMCKernel(path, 0.3, 3), MALAKernel(path, 0.3), MetropolisScanKernel(discrete),
                   GibbsWithGradientsKernel(discrete, 2)):  # fmt: skip
        assert isinstance(kernel, contracts.InfoKernel)
        p = kernel.path
        seen = []
        start = p.sample_initial(4, torch.Generator().manual_seed(0))
        betas = torch.linspace(0, 1, 4, dtype=torch.float64)
        _, log_w = anneal(p, start, betas, generator=torch.Generator().manual_seed(1), kernel=kernel,
                          on_info=lambda step, info, seen=seen: seen.append(info["acceptance"]))  # fmt: skip
        assert len(seen) == 3 and all(a.shape == (4,) for a in seen) and log_w.shape == (4,)
        _, again = anneal(p, start, betas, generator=torch.Generator().manual_seed(1), kernel=kernel)
        assert torch.equal(log_w, again)  # the info channel changes nothing
    with pytest.raises(ValueError, match=r"HMC needs real support; this energy's is binary"):
        EnergyHMCKernel(discrete)
    with pytest.raises(ValueError, match="the Metropolis scan needs discrete support; this energy's is real"):
        MetropolisScanKernel(path)
    with pytest.raises(ValueError, match="num_proposals must be an integer of at least 1"):
        GibbsWithGradientsKernel(discrete, 0)


def test_the_pilot_tunes_step_sizes_towards_the_target_acceptance():
    path, _ = _gaussian_path(4)
    betas = torch.linspace(0, 1, 21, dtype=torch.float64)
    schedule = tune_step_sizes(path, betas, generator=torch.Generator().manual_seed(0), num_leapfrog=5, warmup=100)
    kernel = EnergyHMCKernel(path, schedule, 5)
    state = path.sample_initial(400, torch.Generator().manual_seed(1))
    acceptance = []
    for beta in betas.tolist():
        state, info = kernel.step(state, beta, torch.Generator().manual_seed(2))
        acceptance.append(float(info["acceptance"].mean()))
    assert 0.4 < sum(acceptance) / len(acceptance) < 0.9  # the target is 0.65
    with pytest.raises(ValueError, match="target_accept must be in"):
        tune_step_sizes(path, betas, generator=torch.Generator(), target_accept=1.5)


@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "pytorch"])
def test_hmc_counts_the_proposals_it_rejects_for_a_nan_energy(native, monkeypatch):
    """An energy NaN beyond x0 = 1: from chains just below it, long HMC moves land there; those proposals are
    rejected (the chain stays where it was) and the info's 'non_finite' is 1 for them, 0 for the others, by either
    route; where no proposal can reach the hole, it is 0 everywhere."""
    monkeypatch.setenv("RAISE_EVAL_NATIVE", native)
    model = EnergyModel(lambda x: torch.where(x[:, 0] > 1.0, torch.nan, 0.5 * (x**2).sum(-1)), support="real",
                        event_shape=(2,), dtype=torch.float64)  # fmt: skip
    path = EnergyPath(model, GaussianBase(torch.zeros(2), torch.ones(2)))
    g = torch.Generator().manual_seed(4)
    start = path.state_from_x(torch.full((400, 2), 0.9, dtype=torch.float64))
    state, info = EnergyHMCKernel(path, 0.5, 3).step(start, 1.0, g)
    hit = info["non_finite"]
    assert hit.shape == (400,) and bool(((hit == 0) | (hit == 1)).all())
    assert 50 < int(hit.sum()) < 350  # some proposals fell in the hole, some did not
    assert bool((state.x[hit == 1] == start.x[hit == 1]).all()) and bool((info["acceptance"][hit == 1] == 0).all())
    assert bool(torch.isfinite(state.log_f).all())
    _, far = EnergyHMCKernel(path, 0.01, 3).step(path.state_from_x(torch.zeros(400, 2, dtype=torch.float64)), 1.0, g)
    assert bool((far["non_finite"] == 0).all())


def test_the_metropolis_scan_rejects_and_counts_nan_energies():
    """A binary energy that is NaN at one configuration (1, 1, 1, 0): the scan never enters it, and 'non_finite' says
    how often it was proposed (a share of the scan's 2D proposals per chain)."""
    hole = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)

    def energy(x):
        return torch.where((x == hole).all(-1), torch.nan, -x[:, 0] * x[:, 1])

    model = EnergyModel(energy, support="binary", event_shape=(4,), dtype=torch.float64)
    path = EnergyPath(model, None)
    g = torch.Generator().manual_seed(5)
    state = path.state_from_data(torch.tensor([[1.0, 1.0, 0.0, 0.0]] * 200, dtype=torch.float64))
    state, info = MetropolisScanKernel(path).step(state, 1.0, g)
    assert not bool((model.data_from_state(state.x) == hole).all(-1).any())
    assert float(info["non_finite"].mean()) > 0 and bool((info["non_finite"] <= 1).all())
