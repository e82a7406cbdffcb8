"""The step program of fully visible paths (`kernels.site_program.SiteScanProgram`, run by `step_programs`), on the CPU.

On CUDA the program runs many steps per CUDA graph (tests/test_cuda.py checks that there); here it runs eagerly
(programs='always'), which checks its arithmetic and distributions: the weight update against the path's own
log-density ratio, the eager loop's bits (the same draws in the same order and the same arithmetic, op for op: dense
and colour scans, Gibbs and Metropolis, float64 and float32), then AIS and RAISE unbiased at K = 1, 2, 3 (where
off-by-one errors in the schedule show) on a tiny Potts and a tiny Ising model against enumeration (4-sigma checks,
tests/statistics.py: about 6e-5 false alarms per z-score, 48 z-scores here; the seeds are fixed).
"""

from __future__ import annotations

import pytest
import torch
from raise_eval.models import FullyVisibleModel

from raise_eval import ais, anneal, exact, raise_log_likelihood
from raise_eval.exact import fully_visible as exact_fv
from raise_eval.kernels.site_program import SiteScanProgram
from raise_eval.paths.fully_visible import FullyVisiblePath, data_base_fields
from raise_eval.step_programs import LoopOptions, loop_options
from tests.fully_visible_models import random_model, spin_ring
from tests.statistics import assert_unbiased

CHAINS = 40_000
METHODS = pytest.mark.parametrize("method", ["gibbs", "metropolis"])


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _path(kind: str, method: str, dtype=torch.float64) -> FullyVisiblePath:
    """A tiny Potts (3 sites, 3 states) or Ising (4 spins) model with a base fitted to random training data (as
    tests/estimators/test_fully_visible_unbiased.py's), or the ring of spins with a uniform base."""
    if kind == "ring":
        return FullyVisiblePath(spin_ring().to(dtype=dtype), None, method)
    sites, size, q = {"potts": ("categorical", 3, 3), "ising": ("spin", 4, 2)}[kind]
    model = random_model(sites, size, q, seed=11, scale=0.8).to(dtype=dtype)
    train = model.sites_from_codes(torch.randint(0, q, (30, size), generator=_gen(12)))
    return FullyVisiblePath(model, data_base_fields(model, train, pseudocount=0.05), method)


def _test_vectors(model: FullyVisibleModel) -> torch.Tensor:
    codes = exact_fv.site_configurations(model.n_visible, model.num_states)
    return model.sites_from_codes(codes[[0, 5, codes.shape[0] - 2]])


@METHODS
@pytest.mark.parametrize("betas", [(0.0, 1.0), (0.3, 0.3004), (1.0, 0.0), (0.9, 0.2)], ids=str)
def test_the_weight_update_is_the_paths_log_density_ratio(betas, method):
    for kind in ("potts", "ising", "ring"):
        path = _path(kind, method)
        start = path.sample_initial(500, _gen(1))
        program = path.step_program(LoopOptions(programs="always"))
        assert isinstance(program, SiteScanProgram)
        program.begin(start, None, betas[0])
        b0, b1 = (torch.tensor(b, dtype=torch.float64) for b in betas)
        program.step(b0, b1, _gen(2))
        after = program.state(betas[1])
        # (not necessarily moved: Metropolis on spins from a uniform base at beta = 0 flips each site twice)
        assert after.shape == start.shape and after.dtype == torch.int64
        assert torch.equal(program.log_weights, path.log_density_ratio(after, *betas))


@METHODS
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("kind", ["potts", "ising", "ring"])
def test_the_program_computes_the_eager_loops_bits(kind, dtype, method, monkeypatch):
    """AIS and RAISE (chains with batch (N, C)) through the program and through the eager loop (`transition` and
    `log_density_ratio`): the same log-weights and final states to the bit, the program doing every step."""
    path = _path(kind, method, dtype)
    assert (path.coupling_tables().colours is not None) == (kind == "ring")
    betas = torch.linspace(0, 1, 8, dtype=torch.float64)
    v = path.model.sites_from_codes(path.sample_initial(3, _gen(3)))
    steps = []
    original = SiteScanProgram.step
    monkeypatch.setattr(SiteScanProgram, "step", lambda self, *a: steps.append(1) or original(self, *a))
    runs = []
    for programs in ("never", "always"):
        with loop_options(programs=programs):
            forward = ais(path, betas, 300, generator=_gen(4))
            reverse = raise_log_likelihood(path, v, betas, 40, generator=_gen(5))
            state, log_w = anneal(path, path.sample_initial(50, _gen(6)), betas, generator=_gen(7))
        runs.append((forward.log_weights, reverse.log_weights, state, log_w))
    assert len(steps) == 3 * 7  # every step of the second pass, none of the first
    for eager, program in zip(*runs):
        assert torch.equal(eager, program)


@METHODS
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("kind", ["potts", "ising"])
def test_ais_and_raise_are_unbiased(kind, k, method):
    path = _path(kind, method)
    model = path.model
    betas = torch.linspace(0, 1, k + 1, dtype=torch.float64)
    v = _test_vectors(model)
    with loop_options(programs="always"):
        result = ais(path, betas, CHAINS, generator=_gen(100 + k))
        raised = raise_log_likelihood(path, v, betas, CHAINS, generator=_gen(200 + k))
    assert_unbiased(result.log_weights, exact.log_partition(model))
    assert raised.start == "test vector"
    assert_unbiased(raised.log_weights, exact_fv.log_annealing_model(model, path.base_biases, betas, v, method=method))


def test_a_continued_run_is_the_uninterrupted_one_and_the_start_is_left_alone():
    path = _path("potts", "gibbs")
    betas = torch.linspace(0, 1, 13, dtype=torch.float64)
    start = path.sample_initial(300, _gen(8))
    before = start.clone()
    saved = {}

    def keep(step, state, log_weights):
        if step == 5:
            saved.update(state=state.clone(), log_weights=log_weights.clone(), generator=gen.get_state())

    gen = _gen(9)
    with loop_options(programs="always"):
        s1, w1 = anneal(path, start, betas, generator=gen, on_step=keep)
        gen.set_state(saved["generator"])
        s2, w2 = anneal(path, saved["state"], betas, generator=gen, log_weights=saved["log_weights"], start_step=5)
        _, w3 = anneal(path, start, betas, generator=_gen(10))
    assert torch.equal(w2, w1) and torch.equal(s2, s1) and not torch.equal(w3, w1)
    assert torch.equal(start, before)


def test_given_log_weights_are_added_to_even_when_not_contiguous():
    path = _path("ising", "metropolis")
    start = path.sample_initial(10, _gen(13))
    given = torch.ones(10, 2, dtype=torch.float64)[:, 0]  # a strided view (10,)
    assert not given.is_contiguous()
    betas = torch.linspace(0, 1, 5, dtype=torch.float64)
    with loop_options(programs="always"):
        _, plain = anneal(path, start, betas, generator=_gen(14))
        _, added = anneal(path, start, betas, generator=_gen(14), log_weights=given)
    assert added is given and torch.allclose(given, plain + 1.0, rtol=0, atol=1e-12)


def test_the_program_runs_where_the_options_say():
    path = _path("potts", "gibbs")
    assert isinstance(path.step_program(LoopOptions(programs="always")), SiteScanProgram)
    assert path.step_program(LoopOptions(programs="cuda")) is None  # (the model is on the CPU)
    assert path.step_program(LoopOptions(programs="never")) is None
    assert path.step_program(LoopOptions(programs="always")).method == "gibbs"
    assert _path("potts", "metropolis").step_program(LoopOptions(programs="always")).method == "metropolis"
