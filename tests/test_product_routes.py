"""The product route of a run (issue 28) as a setting: forced or timed, recorded in the report, kept in a resume file
and adopted by the run that continues it, so that the continued run computes its products as the interrupted one."""

import torch

from raise_eval import RBM, evaluate
from raise_eval.runtime import product_routes

SMALL = dict(init="uniform", steps=5, raise_examples=4, raise_chains=2, threads=1, exact="never")


def _model_and_data():
    g = torch.Generator().manual_seed(0)
    model = RBM.random(64, 32, weight_std=0.3, generator=g)  # 2,000 chains x 64 x 32 = 4M MACs: timed when auto
    return model, (torch.rand(10, 64, generator=g) < 0.5).float()


def test_a_forced_route_is_recorded():
    model, test = _model_and_data()
    product_routes.clear_route_choices()
    report = evaluate(model, test, ais_chains=2000, product_route="mm", **SMALL)
    assert report.settings["product_route"] == "mm"
    routes = report.settings["product_routes"]
    assert routes and all(r["route"] == "mm" for r in routes if r["how"].startswith("forced"))
    assert any(r["how"].startswith("forced") for r in routes)


def test_a_resumed_run_adopts_the_routes_its_file_recorded(tmp_path, monkeypatch):
    model, test = _model_and_data()
    product_routes.clear_route_choices()
    file = tmp_path / "run.pt"
    first = evaluate(model, test, ais_chains=2000, resume_file=str(file), **SMALL)
    measured = {(r["rows"], tuple(r["inner"]), r["cols"]): r["route"] for r in first.settings["product_routes"]}
    assert measured and torch.load(file, weights_only=True)["product_routes"]
    product_routes.clear_route_choices()  # a new process: nothing timed yet
    monkeypatch.setattr(product_routes, "_time_routes", lambda *a: (_ for _ in ()).throw(AssertionError("timed again")))
    again = evaluate(model, test, ais_chains=2000, resume_file=str(file), **SMALL)
    # The same routes, taken from the file without timing, reported as the first run chose them.
    assert again.settings["product_routes"] == first.settings["product_routes"]
    assert again.ais_mean == first.ais_mean and again.raise_mean == first.raise_mean


def test_a_resumed_forced_run_reports_the_routes_of_the_interrupted_one(tmp_path):
    # A forced record is adopted under the route forced, as choose_route keys it: a resumed run forced the same way
    # (here the table route, which the non-binary products cannot take) finds each record instead of adding one.
    model, test = _model_and_data()
    product_routes.clear_route_choices()
    file = tmp_path / "run.pt"
    first = evaluate(model, test, ais_chains=2000, resume_file=str(file), product_route="table", **SMALL)
    assert {r["how"] for r in first.settings["product_routes"]} == {"forced", "forced-unavailable"}
    product_routes.clear_route_choices()
    again = evaluate(model, test, ais_chains=2000, resume_file=str(file), product_route="table", **SMALL)
    assert again.settings["product_routes"] == first.settings["product_routes"]
    assert again.ais_mean == first.ais_mean and again.raise_mean == first.raise_mean


def test_a_run_resumed_under_another_forcing_makes_its_own_choices(tmp_path, monkeypatch):
    # product_route is not a setting a resumed run must share: the records of the interrupted run's forcing are left
    # out, and the continued run's report lists only the routes it chose itself.
    model, test = _model_and_data()
    product_routes.clear_route_choices()
    file = tmp_path / "run.pt"
    evaluate(model, test, ais_chains=2000, resume_file=str(file), product_route="table", **SMALL)
    product_routes.clear_route_choices()
    again = evaluate(model, test, ais_chains=2000, resume_file=str(file), product_route="mm", **SMALL)
    assert again.settings["product_route"] == "mm"
    assert {(r["route"], r["how"]) for r in again.settings["product_routes"]} <= {("mm", "forced")}
    product_routes.clear_route_choices()
    monkeypatch.delenv(product_routes.ROUTE_ENV, raising=False)  # timed: neither the setting nor the environment forces
    timed = evaluate(model, test, ais_chains=2000, resume_file=str(file), **SMALL)
    assert not any(r["how"].startswith("forced") for r in timed.settings["product_routes"])


def test_a_run_says_whether_its_c_kernels_ran(monkeypatch):
    """The report records the C kernels' state (settings.native_kernels), and a run without them (no compiler here)
    says so in a note, as does a forced amx route that cannot run: they change a run's random numbers and speed (a
    new user's run fell back silently)."""
    from raise_eval.models import native

    model, test = _model_and_data()
    product_routes.clear_route_choices()
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("CC", "/nonexistent/raise-eval-test-cc")
    report = evaluate(model, test, ais_chains=200, product_route="amx", **SMALL)
    kernels = report.settings["native_kernels"]
    assert "/nonexistent/raise-eval-test-cc" in kernels["step"] and "/nonexistent" in kernels["amx_products"]
    assert any(n.startswith("the C kernels of the annealing step are not in use (the C compiler") for n in report.notes)
    assert any(n.startswith("the amx route cannot run here (") for n in report.notes)
    product_routes.clear_route_choices()
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.delenv("CC")
    plain = evaluate(model, test, ais_chains=200, **SMALL)
    if native.library("step") is not None:
        assert plain.settings["native_kernels"]["step"] == "in use"
        assert not any(n.startswith("the C kernels") for n in plain.notes)
    product_routes.clear_route_choices()


def test_the_route_policy_is_raise_evals_and_the_model_layer_needs_none(monkeypatch):
    """The model layer holds the routes, not the choice (issue 41): raise_eval installs its timing policy; without a
    chooser every product takes torch.mm, even under a forced route, and computes the same sum."""
    from raise_eval.models.boltzmann import products

    assert products._chooser is product_routes.choose_route
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(8, 12, generator=g) < 0.5).float()
    w = torch.randn(12, 6, generator=g)
    taken = []
    original = products.run_route
    monkeypatch.setattr(products, "run_route", lambda route, *a, **k: taken.append(route) or original(route, *a, **k))
    with product_routes.forced_route("table"):
        routed = products.neighbour_product([(x, w, False)], None, binary=True)
        assert taken == ["table"]
        previous = products.install_route_chooser(None)
        try:
            bare = products.neighbour_product([(x, w, False)], None, binary=True)
        finally:
            products.install_route_chooser(previous)
    assert taken == ["table", "mm"]
    torch.testing.assert_close(bare, routed)
    assert products._chooser is product_routes.choose_route
