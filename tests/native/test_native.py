"""The native kernels (`raise_eval.models.native`): compiled on first use, taken only where they work, and the same bits
however the work is split. Their draws are checked against exact logits, and their invariance and unbiasedness
against enumeration, in tests/estimators/test_log_f_ais.py."""

from __future__ import annotations

import math

import pytest
import torch
from raise_eval.models import DBN, native

import raise_eval.paths.posterior.sweeps as posterior  # the sweeps' module: its constants and plan
from raise_eval.paths.posterior import DBNPosteriorPath


def _needs_native() -> None:
    if native.library() is None:
        pytest.skip(f"the native sweep is unavailable: {native.unavailable_reason()}")


def _model(dtype=torch.float32, weight_std=1.5):
    g = torch.Generator().manual_seed(1)
    return DBN.random((60, 40, 30, 20), weight_std=weight_std, bias_std=1.0, generator=g).to(dtype=dtype)


def _sweeps(path: DBNPosteriorPath, v: torch.Tensor, seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    state, _ = path.start(v, 30, g)
    state = path.clone_state(state)
    for beta in [0.0, 0.3, 1.0, 1.0]:
        path.transition_(state, beta, g)
    return state.layers[1:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_the_same_bits_whatever_the_threads_and_tiles(dtype, monkeypatch):
    """Rows are swept independently from their own thresholds: 1 or 2 threads, tiles of 1 row or many, the same
    samples bit for bit."""
    _needs_native()
    model = _model(dtype)
    v = (torch.rand(20, 60, generator=torch.Generator().manual_seed(2)) < 0.4).to(dtype)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        reference = _sweeps(DBNPosteriorPath(model, sweep="native"), v)
        torch.set_num_threads(2)
        two = _sweeps(DBNPosteriorPath(model, sweep="native"), v)
        monkeypatch.setattr(posterior, "_NATIVE_TILE_BYTES", 1)
        one_row_tiles = _sweeps(DBNPosteriorPath(model, sweep="native"), v)
    finally:
        torch.set_num_threads(threads)
    for other in (two, one_row_tiles):
        assert all(torch.equal(a, b) for a, b in zip(reference, other))
    assert not all(torch.equal(a, b) for a, b in zip(reference, _sweeps(DBNPosteriorPath(model, sweep="native"), v, 1)))


def test_auto_takes_the_native_sweep_on_the_cpu():
    _needs_native()
    path = DBNPosteriorPath(_model())
    assert [path.sweep_route(l, torch.device("cpu")) for l in (1, 2)] == ["native", "native"]
    assert path.sweep_route(1, torch.device("cuda")) == "full"  # no device is touched to decide


def test_without_a_compiler_the_pytorch_sweep_serves(monkeypatch):
    """A machine without a working C compiler: the library says why, "auto" takes the bounded sweep, and asking
    for the native one is refused with the reason."""
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("CC", "/nonexistent/raise-eval-test-cc")
    assert native.library() is None
    assert "/nonexistent/raise-eval-test-cc" in native.unavailable_reason()
    assert DBNPosteriorPath(_model()).sweep_route(1, torch.device("cpu")) == "bounded"
    with pytest.raises(ValueError, match="native sweep is unavailable here: the C compiler"):
        DBNPosteriorPath(_model(), sweep="native")


def test_the_environment_variable_turns_it_off(monkeypatch):
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    assert native.library() is None and native.unavailable_reason() == "RAISE_EVAL_NATIVE=0"
    assert DBNPosteriorPath(_model()).sweep_route(1, torch.device("cpu")) == "bounded"
    monkeypatch.setenv(native.NATIVE_ENV, "sometimes")
    with pytest.raises(ValueError, match="RAISE_EVAL_NATIVE='sometimes' is not understood: set it to 0"):
        native.library()


def test_bad_sweep_names_are_refused():
    with pytest.raises(ValueError, match="sweep must be one of auto, native, bounded, full, got 'fast'"):
        DBNPosteriorPath(_model(), sweep="fast")
    with pytest.raises(ValueError, match="either bounded or sweep"):
        DBNPosteriorPath(_model(), bounded=True, sweep="full")


@pytest.mark.parametrize("weight_std", [0.1, 1.5, 2.5])
def test_the_plan_keeps_every_product_in_range(weight_std):
    """Each group's bound (the largest sum of |w| over its inputs, over the units) is within the dtype's range, the
    groups cover the inputs in steps of 16, and the carried double takes its log before its bound passes 0.9
    log(DBL_MAX); weights beyond what 16 inputs allow have no plan (the PyTorch sweeps serve)."""
    w = torch.randn(300, 50, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * weight_std
    limit = posterior._log_range(torch.float32)
    ends, take_log = posterior._native_plan(w, limit)
    ends, take_log = ends.tolist(), take_log.tolist()
    assert ends[-1] == 300 and all(e % 16 == 0 for e in ends[:-1]) and take_log[-1] == 1
    begin, carried = 0, 0.0
    for end, take in zip(ends, take_log):
        bound = float(w[begin:end].abs().sum(0).max())
        assert bound <= limit
        carried += bound
        assert carried <= 0.9 * math.log(torch.finfo(torch.float64).max)
        if take:
            carried = 0.0
        begin = end
    assert posterior._native_plan(torch.full((40, 5), 6.0), limit) is None  # 16 x 6 > 79.8


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_models_take_the_pytorch_sweep(dtype):
    """The kernel has float32 and float64 versions only: a half-precision DBN takes a PyTorch sweep (a review found
    the float32 kernel run on 2-byte elements, past the ends of the buffers), and asking for the native one is
    refused."""
    model = _model(torch.float32, weight_std=0.1).to(dtype=dtype)
    path = DBNPosteriorPath(model)
    assert path.sweep_route(1, torch.device("cpu")) != "native" and not path.takes_native_sweep(torch.device("cpu"))
    v = (torch.rand(5, 60, generator=torch.Generator().manual_seed(2)) < 0.4).to(dtype)
    g = torch.Generator().manual_seed(0)
    state, _ = path.start(v, 3, g)
    state = path.transition(state, 0.5, g)
    assert all(bool(((x == 0) | (x == 1)).all()) for x in state.layers[1:])
    with pytest.raises(ValueError, match=f"runs float32 and float64 models, not {dtype}"):
        DBNPosteriorPath(model, sweep="native")


def test_auto_prices_a_model_the_kernel_cannot_run_at_the_pytorch_rate():
    """Weights too large for the kernel's plan: the PyTorch sweep runs, and 'auto' prices it so."""
    from raise_eval.evaluation.plan import _dbn_sweep_rate

    big = _model(weight_std=8.0)  # 16 inputs sum past 79.8; no single weight does
    assert not DBNPosteriorPath(big).takes_native_sweep(torch.device("cpu"))
    assert _dbn_sweep_rate(big)[1] == "with the PyTorch sweep"


def test_a_compiler_that_fails_silently_is_reported(monkeypatch, tmp_path):
    """A compiler that exits non-zero without a word: the reason says so (a review found an IndexError here)."""
    cc = tmp_path / "silent-cc"
    cc.write_text("#!/bin/sh\necho\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("CC", str(cc))
    assert native.library() is None
    assert native.unavailable_reason() == f"the C compiler ({cc}) failed: exit status 1, no output"


def test_cc_may_name_a_wrapper(monkeypatch):
    """CC="env cc": a command with arguments, as build tools take it."""
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("CC", "env cc")
    if native.library() is None:
        pytest.skip(f"no C compiler here: {native.unavailable_reason()}")
    assert native.unavailable_reason() is None
