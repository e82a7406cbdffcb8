"""Shared fixtures: tiny multimodal Boltzmann machines with exact answers, seeded generators, the data root."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from raise_eval.models import RBM, LayeredBoltzmannMachine

from raise_eval import exact

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# The tests' models are tiny: one thread is as fast as two, and it cannot stall when another process holds the
# other core (torch's threads spin-wait for each other). Subprocess tests choose their own thread counts.
torch.set_num_threads(1)


def count_local_modes(model: LayeredBoltzmannMachine) -> int:
    """Visible configurations whose exact probability beats every single-bit flip."""
    n = model.n_visible
    v = exact.binary_configurations(n)
    log_f = exact.log_unnormalized_visible(model, v)
    flips = torch.stack([log_f[exact.configuration_index(v) ^ (1 << j)] for j in range(n)], dim=1)
    return int((log_f.unsqueeze(1) > flips).all(1).sum())


def make_multimodal_rbm(n_visible: int, n_hidden: int, seed: int, weight_std: float = 2.5) -> RBM:
    g = torch.Generator().manual_seed(seed)
    model = RBM.random(n_visible, n_hidden, weight_std=weight_std, bias_std=1.0, generator=g, dtype=torch.float64)
    # Centre the visible biases so that the weights, not the biases, decide the modes.
    model = RBM(model.W, model.vbias - 0.5 * model.W.sum(1), model.hbias - 0.5 * model.W.sum(0))
    assert count_local_modes(model) >= 2, "fixture model must be multimodal"
    return model


@pytest.fixture(scope="session", autouse=True)
def native_cache_in_a_temporary_folder(tmp_path_factory):
    """The C kernels compiled by the tests (and by the commands they start, which inherit the environment) are kept
    in a folder of the test session, never in the user's cache folder (raise_eval.models.native.cache_folder)."""
    previous = os.environ.get("RAISE_EVAL_CACHE_DIR")
    os.environ["RAISE_EVAL_CACHE_DIR"] = str(tmp_path_factory.mktemp("raise_eval_cache"))
    yield
    if previous is None:
        os.environ.pop("RAISE_EVAL_CACHE_DIR", None)
    else:
        os.environ["RAISE_EVAL_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def tiny_rbm() -> RBM:
    """An 8-6 RBM in float64 whose visible distribution has several separated modes."""
    return make_multimodal_rbm(8, 6, seed=3)


@pytest.fixture(scope="session")
def tiny_chain() -> LayeredBoltzmannMachine:
    """A 5-4-3 three-layer chain (a tiny DBM) in float64."""
    g = torch.Generator().manual_seed(11)
    sizes = [5, 4, 3]
    weights = [torch.randn(a, b, generator=g, dtype=torch.float64) * 1.5 for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [torch.randn(n, generator=g, dtype=torch.float64) * 0.5 for n in sizes]
    return LayeredBoltzmannMachine(weights, biases)


@pytest.fixture(scope="session")
def train_vectors() -> torch.Tensor:
    """Binary 'training data' for data-base-rate tests: pixel i is on with probability (i + 1) / 10."""
    g = torch.Generator().manual_seed(5)
    rates = (torch.arange(8, dtype=torch.float64) + 1) / 10
    return (torch.rand(400, 8, generator=g, dtype=torch.float64) < rates).double()


def data_root() -> Path | None:
    """The shared data root (../shared/data or $RAISE_EVAL_DATA), or None when absent."""
    env = os.environ.get("RAISE_EVAL_DATA")
    root = Path(env) if env else PROJECT_ROOT.parent / "shared" / "data"
    return root if root.is_dir() else None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = data_root()
    if root is None:
        where = os.environ.get("RAISE_EVAL_DATA") or str(PROJECT_ROOT.parent / "shared" / "data")
        pytest.skip(f"no data root at {where}: point RAISE_EVAL_DATA at the folder with MNIST and checkpoints")
    return root


def _random_layers(sizes, seed, weight_std, bias_std=0.5):
    """Random chain parameters, biases centred (as in `make_multimodal_rbm`) so that the weights decide the modes."""
    g = torch.Generator().manual_seed(seed)
    weights = [torch.randn(a, b, generator=g, dtype=torch.float64) * weight_std for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [torch.randn(n, generator=g, dtype=torch.float64) * bias_std for n in sizes]
    for l in range(len(sizes)):
        if l < len(weights):
            biases[l] = biases[l] - 0.5 * weights[l].sum(1)
        if l > 0:
            biases[l] = biases[l] - 0.5 * weights[l - 1].sum(0)
    recognition = [torch.randn(n, generator=g, dtype=torch.float64) * bias_std for n in sizes[1:-1]]
    return weights, biases, recognition


@pytest.fixture(scope="session", params=[(5, 4, 3), (4, 3, 3, 2)], ids=["dbm-2-hidden", "dbm-3-hidden"])
def tiny_dbm(request):
    """Tiny DBMs in float64 with two and three hidden layers (every layer small enough to enumerate), each with
    two local modes of the visible distribution."""
    from raise_eval.models import DBM

    weights, biases, _ = _random_layers(request.param, seed=22, weight_std=2.0)
    model = DBM(weights, biases)
    assert count_local_modes(model) >= 2, "fixture model must be multimodal"
    return model


@pytest.fixture(scope="session", params=[(5, 4, 3), (4, 3, 3, 2)], ids=["dbn-2-hidden", "dbn-3-hidden"])
def tiny_dbn(request):
    """Tiny DBNs in float64 with two and three hidden layers."""
    from raise_eval.models import DBN

    weights, biases, recognition = _random_layers(request.param, seed=31, weight_std=1.0)
    return DBN(weights, biases, recognition)


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C (SIGINT) raising KeyboardInterrupt here and in the subprocesses a test starts, as in a terminal, even
    when the test run itself was started as a background job, where SIGINT is ignored and children inherit that
    (a handled signal, unlike an ignored one, is reset to its default at exec)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(params=["mm", "onednn", "table", "amx"])
def product_route(request, monkeypatch):
    """Every float CPU product of a Boltzmann machine forced through one route (torch.mm, oneDNN, the table route,
    the amx route), however small, as large models may take it: yields the list of routes that products took
    (skipped for oneDNN where the build has none, for amx where the CPU has no AMX tiles). A product the route cannot
    compute (oneDNN in float64, the table and amx routes for inputs not known to be binary, amx in float64) uses
    torch.mm."""
    from raise_eval.models import native
    from raise_eval.models.boltzmann import products

    from raise_eval.runtime import product_routes

    if request.param == "onednn" and not products.onednn_available():
        pytest.skip("this torch build has no oneDNN")
    if request.param == "amx" and not products.amx_available():
        pytest.skip(f"no amx route here: {native.amx_unavailable_reason()}")
    taken = []
    original = products.run_route
    monkeypatch.setattr(products, "run_route", lambda route, *a, **k: taken.append(route) or original(route, *a, **k))
    with product_routes.forced_route(request.param):
        yield taken
