"""The 2-D Ising model on a torus, whose log Z is known in closed form (Kaufman 1949, tests/ising_exact.py): the
closed form against enumeration on small tori, then AIS on the 32 x 32 torus at the critical coupling against it."""

from __future__ import annotations

import math
import time

import pytest
import torch

from raise_eval import ais, exact
from raise_eval.paths.boltzmann import make_path
from tests.ising_exact import CRITICAL_COUPLING, kaufman_log_partition, torus_ising

TORI = [(2, 2), (2, 3), (3, 3), (3, 4), (4, 3), (4, 4)]


@pytest.mark.parametrize("coupling", [0.2, CRITICAL_COUPLING, 0.7])
@pytest.mark.parametrize("m, n", TORI)
def test_kaufman_s_closed_form_is_the_sum_over_every_configuration(m, n, coupling):
    assert kaufman_log_partition(m, n, coupling) == pytest.approx(
        exact.log_partition(torus_ising(m, n, coupling)), abs=1e-10
    )


def test_the_torus_has_four_bonds_per_site():
    model = torus_ising(5, 6, 0.3)
    assert torch.equal((model.couplings != 0).sum(1), torch.full((30,), 4))
    assert float(model.couplings.sum()) == pytest.approx(2 * 60 * 0.3)


@pytest.mark.slow
def test_ais_on_the_32x32_torus_at_the_critical_coupling_matches_kaufman():
    coupling, steps, chains = 0.4406868, 1000, 100
    truth = kaufman_log_partition(32, 32, coupling)
    path = make_path(torus_ising(32, 32, coupling))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        result = ais(path, torch.linspace(0, 1, steps + 1, dtype=torch.float64), chains,
                     generator=torch.Generator().manual_seed(42))  # fmt: skip
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    estimate, stderr = result.estimate, float(result.stderr)
    print(f"32x32 torus, K = {coupling}: AIS {estimate:.3f} +- {stderr:.3f} (ESS {float(result.ess):.1f}, {steps} "
          f"steps, {chains} chains, {seconds:.0f} s, one thread), exact {truth:.3f}")
    assert math.isfinite(stderr) and stderr < 1.0
    assert abs(estimate - truth) < 4 * stderr + 1e-6
