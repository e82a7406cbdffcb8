"""The amx product route (`IntegerWeights`, amx_products.c): the exact integer sum of the quantized weights, rounded
once; offered only where the quantization stays within float32's rounding of a column's typical weight, and only on
CPUs with AMX tiles. The exact-transition and unbiasedness tests run with it through the `product_route` fixture
(tests/kernels/test_block_gibbs.py, tests/estimators)."""

from __future__ import annotations

import json

import pytest
import torch
from raise_eval.models import native
from raise_eval.models.boltzmann import products
from raise_eval.models.boltzmann.products import IntegerWeights

from raise_eval.runtime import product_routes


def _needs_amx() -> None:
    if not products.amx_available():
        pytest.skip(f"no amx route here: {native.amx_unavailable_reason()}")


def _exact(weights: IntegerWeights, xs, bias, alpha) -> torch.Tensor:
    """What the kernel must give, bit for bit: the integer weights rebuilt from their digits, the exact int64 sum,
    then bias + alpha s (sum) in float64, rounded once to float32."""
    d = weights.packed.permute(1, 2, 4, 0, 3).reshape(4, weights.kpad, -1).to(torch.int64)  # (digits, kpad, cols)
    q = ((d[0] * 256 + d[1]) * 256 + d[2]) * 256 + d[3]
    x = torch.cat(xs, 1).to(torch.int64)
    whole = x @ q[: x.shape[1], : weights.cols]
    value = whole.double() * weights.scales[: weights.cols]
    return (value if bias is None else bias.double() + alpha * value).float()


@pytest.mark.parametrize("shape", [(1000, (784,), 500), (37, (20,), 7), (70, (130, 65), 33), (1, (64,), 16)])
def test_the_sum_is_exact_and_rounded_once(shape):
    """Digits that rebuild the quantized weights within half a step of each weight; results equal to the exactly
    rounded sum of those integers, for any shape (rows, inputs and columns off the tile sizes; two terms), with and
    without a bias; within float32 rounding of the float64 product."""
    _needs_amx()
    rows, inner, cols = shape
    g = torch.Generator().manual_seed(7)
    ws = [torch.randn(n, cols, generator=g) * 0.1 for n in inner]
    xs = [(torch.rand(rows, n, generator=g) < 0.5).float() for n in inner]
    bias = torch.randn(cols, generator=g)
    weights = IntegerWeights(ws)
    assert weights.eligible
    a = torch.cat(ws).double()
    d = weights.packed.permute(1, 2, 4, 0, 3).reshape(4, weights.kpad, -1).to(torch.int64)
    q = (((d[0] * 256 + d[1]) * 256 + d[2]) * 256 + d[3])[: a.shape[0], :cols]
    scale = weights.scales[:cols]
    assert float(((q.double() * scale - a).abs() / scale).max()) <= 0.5
    assert float(q.abs().max()) <= 2**30 and float(a.abs().amax(0).div(scale).min()) > 2**29
    for b, alpha in ((bias, 0.3), (None, 1.0)):
        got = weights(xs, None, b, alpha)
        assert torch.equal(got, _exact(weights, xs, b, alpha))
        reference = sum(x.double() @ w.double() for x, w in zip(xs, ws)) * alpha
        reference = reference if b is None else reference + b.double()
        terms = sum(x.double() @ w.double().abs() for x, w in zip(xs, ws)) * alpha
        terms = terms if b is None else terms + b.double().abs()
        assert float(((got.double() - reference).abs() / terms.clamp_min(1e-30)).max()) < 2 * 2**-24


def test_the_same_bits_for_any_split_of_the_rows():
    """Rows are independent and the sums exact: 1 or 2 threads, any subset of rows, the same bits; `out` is written."""
    _needs_amx()
    g = torch.Generator().manual_seed(3)
    w = torch.randn(300, 90, generator=g)
    x = (torch.rand(250, 300, generator=g) < 0.3).float()
    weights = IntegerWeights([w])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = weights([x], None, None, 1.0)
        torch.set_num_threads(2)
        two = weights([x], None, None, 1.0)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    assert torch.equal(weights([x[37:101].contiguous()], None, None, 1.0), one[37:101])
    out = torch.empty(250, 90)
    assert weights([x], out, None, 1.0) is out and torch.equal(out, one)


def test_weights_far_above_their_column_mean_are_not_offered_the_route():
    """A column whose largest weight is hundreds of times its mean nonzero |weight| would lose more than float32's
    rounding of its typical weight to the quantization: the weights are not eligible, and a product forced through
    the route (or timed to it) takes torch.mm, recorded as such. Zero columns, non-finite weights likewise."""
    g = torch.Generator().manual_seed(4)
    w = torch.randn(784, 50, generator=g) * 0.05
    assert IntegerWeights([w]).eligible
    zero_column = w.clone()
    zero_column[:, 3] = 0.0
    assert IntegerWeights([zero_column]).eligible  # a zero column is held exactly
    outlier = w.clone()
    outlier[5, 7] = 40.0
    assert not IntegerWeights([outlier]).eligible
    nan = w.clone()
    nan[0, 0] = float("nan")
    assert not IntegerWeights([nan]).eligible
    if not products.amx_available():
        return
    x = (torch.rand(600, 784, generator=g) < 0.5).float()
    product_routes.clear_route_choices()
    with product_routes.forced_route("amx"):
        got = products.neighbour_product([(x, outlier, False)], None, binary=True)
    assert torch.equal(got, torch.mm(x, outlier))
    chosen = [(c.route, c.how) for c in product_routes.route_choices()]
    assert chosen == [("amx", "forced"), ("mm", "forced-unavailable")]
    product_routes.clear_route_choices()


def test_weights_changed_in_place_are_held_again():
    _needs_amx()
    g = torch.Generator().manual_seed(5)
    w = torch.randn(200, 64, generator=g)
    x = (torch.rand(600, 200, generator=g) < 0.5).float()
    with product_routes.forced_route("amx"):
        before = products.neighbour_product([(x, w, False)], None, binary=True)
        w.mul_(2.0)
        after = products.neighbour_product([(x, w, False)], None, binary=True)
    assert torch.equal(after, 2.0 * before)  # the scales are powers of two: doubling doubles every integer's scale


def test_without_amx_the_route_is_neither_timed_nor_adopted(monkeypatch):
    """A CPU without AMX tiles (or a kernel that cannot be compiled): the route is not a candidate, a forced one falls
    back to torch.mm, and a choice of amx recorded on another machine (a resumed run) is not adopted but timed
    again."""
    monkeypatch.setattr(native, "_state", {"amx_products": (None, "no compiler (test)")})
    assert not products.amx_available()
    assert native.amx_unavailable_reason() == "no compiler (test)"
    assert "amx" not in products.available_routes((784,), 500, torch.float32, True)
    product_routes.clear_route_choices()
    monkeypatch.delenv(product_routes.ROUTE_ENV, raising=False)
    threads = torch.get_num_threads()
    record = product_routes.RouteChoice(64, (784,), 500, "float32", threads, True, "amx", "measured", (("amx", 1.0),))
    product_routes.adopt_route_choices([json.loads(json.dumps(record.as_dict()))])
    assert product_routes.route_choices() == ()
    with product_routes.forced_route("amx"):
        choice = product_routes.choose_route(64, (784,), 500, torch.float32, torch.device("cpu"), True, False)
    assert (choice.route, choice.how) == ("mm", "forced-unavailable")
    product_routes.clear_route_choices()


def test_a_cpu_without_amx_tiles_is_told_apart_from_a_missing_compiler(monkeypatch):
    if native.library("amx_products") is None:
        pytest.skip(f"the kernel does not compile here: {native.unavailable_reason('amx_products')}")
    state = dict(native._state)
    state["amx_ready"] = False
    monkeypatch.setattr(native, "_state", state)
    assert native.amx_library() is None
    assert (
        native.amx_unavailable_reason() == "this CPU has no AMX int8 tiles, or the operating system does not grant them"
    )


def test_a_shapes_two_choices_are_kept_apart_when_adopted(monkeypatch):
    """A shape chosen for eligible weights (amx) and again for weights the route cannot hold (another route): both
    records say which they are, and a resumed run adopts each under its own key (a review found the second
    overwriting the first, so that eligible weights took the other route after a resume)."""
    _needs_amx()
    monkeypatch.delenv(product_routes.ROUTE_ENV, raising=False)
    fake = {"mm": 3.0, "onednn": 2.0, "table": 4.0, "amx": 1.0}
    monkeypatch.setattr(product_routes, "_time_routes", lambda routes, *a: {r: fake[r] for r in routes})
    product_routes.clear_route_choices()
    cpu = torch.device("cpu")
    eligible = product_routes.choose_route(512, (256,), 128, torch.float32, cpu, True, False)
    other = product_routes.choose_route(512, (256,), 128, torch.float32, cpu, True, False, amx=False)
    assert (eligible.route, other.route) == ("amx", "onednn" if products.onednn_available() else "mm")
    records = [json.loads(json.dumps(c.as_dict())) for c in product_routes.route_choices()]
    assert [r["weights_for_amx"] for r in records] == [True, False]
    product_routes.clear_route_choices()
    product_routes.adopt_route_choices(records)
    monkeypatch.setattr(product_routes, "_time_routes", lambda *a: (_ for _ in ()).throw(AssertionError("timed again")))
    assert product_routes.choose_route(512, (256,), 128, torch.float32, cpu, True, False).route == "amx"
    without_amx = product_routes.choose_route(512, (256,), 128, torch.float32, cpu, True, False, amx=False)
    assert without_amx.route == other.route
    product_routes.clear_route_choices()
