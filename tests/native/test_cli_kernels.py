"""The command line and a run's report on the C kernels and the product routes (issue 45): environment variables read
before any work by every subcommand, a compile said on stderr unless --no-progress, a forced route recorded with
where it was forced, and a forced route that computed nothing said in a note."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from raise_eval.models import RBM
from raise_eval.models.boltzmann import products
from raise_eval.models.io.checkpoints import save_checkpoint

import raise_eval.cli.bdmc as bdmc_cli
from raise_eval import evaluate, native
from raise_eval.cli import main
from raise_eval.runtime import product_routes

SMALL = dict(init="uniform", steps=5, ais_chains=20, raise_examples=2, raise_chains=2, threads=1, exact="never")


def _model_and_data(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    model = RBM.random(16, 8, weight_std=0.3, generator=g).to(dtype=dtype)
    return model, (torch.rand(6, 16, generator=g) < 0.5).to(dtype)


@pytest.mark.parametrize("variable, value", [("RAISE_EVAL_NATIVE", "yes"), ("RAISE_EVAL_PRODUCT_ROUTE", "fast")])
def test_bdmc_refuses_a_bad_environment_variable_before_any_work(monkeypatch, capsys, variable, value):
    """bdmc read RAISE_EVAL_NATIVE first where the simulation drew its samples, and failed there after starting;
    now every subcommand refuses it (and RAISE_EVAL_PRODUCT_ROUTE) before loading anything."""
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr(bdmc_cli, "load_directed_model", lambda *a: pytest.fail("loaded a model"))
    with pytest.raises(SystemExit) as stop:
        main(["bdmc", "--model", "examples/plain_vae_factory.py:make_model", "--steps", "5", "--no-progress"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"raise-eval: error: {variable}={value!r}" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["evaluate", "trajectory"])
def test_other_subcommands_refuse_it_before_loading(monkeypatch, capsys, tmp_path, command):
    monkeypatch.setenv("RAISE_EVAL_NATIVE", "yes")
    with pytest.raises(SystemExit):
        main([command, str(tmp_path / "missing"), "--no-progress"])
    assert "RAISE_EVAL_NATIVE='yes' is not understood" in capsys.readouterr().err


@pytest.mark.parametrize("progress", [True, False], ids=["progress", "no-progress"])
def test_a_compile_is_said_on_stderr_unless_no_progress(monkeypatch, tmp_path, capfd, progress):
    if native.library("step") is None:
        pytest.skip(f"no C kernels here: {native.unavailable_reason('step')}")
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("RAISE_EVAL_CACHE_DIR", str(tmp_path / "cache"))
    model, test = _model_and_data()
    save_checkpoint(tmp_path / "m.pt", model)
    np.save(tmp_path / "test.npy", test.numpy().astype(np.uint8))
    args = ["evaluate", str(tmp_path / "m.pt"), "--data", str(tmp_path / "test.npy"), "--init", "uniform"]
    args += ["--steps", "5", "--ais-chains", "10", "--raise-examples", "2", "--raise-chains", "2", "--threads", "1"]
    assert main(args + ([] if progress else ["--no-progress"])) == 0
    err = capfd.readouterr().err
    assert ("compiling the C kernel step.c (once: kept in" in err) == progress
    assert list((tmp_path / "cache" / "native").glob("step-*.so"))


def test_a_route_forced_by_the_environment_is_recorded_as_such(monkeypatch):
    """RAISE_EVAL_PRODUCT_ROUTE=mm was recorded as product_route "auto"."""
    model, test = _model_and_data()
    product_routes.clear_route_choices()
    monkeypatch.setenv(product_routes.ROUTE_ENV, "mm")
    report = evaluate(model, test, **SMALL)
    assert report.settings["product_route"] == "mm"
    assert report.settings["product_route_forced_by"] == "RAISE_EVAL_PRODUCT_ROUTE"
    product_routes.clear_route_choices()
    forced = evaluate(model, test, product_route="table", **SMALL)  # the setting wins over the variable
    assert (forced.settings["product_route"], forced.settings["product_route_forced_by"]) == ("table", "setting")
    product_routes.clear_route_choices()
    monkeypatch.delenv(product_routes.ROUTE_ENV)
    timed = evaluate(model, test, **SMALL)
    assert (timed.settings["product_route"], timed.settings["product_route_forced_by"]) == ("auto", None)


def test_a_forced_amx_route_in_float64_says_that_torch_mm_ran(monkeypatch):
    """--product-route amx --dtype float64 on a CPU with AMX tiles fell back to torch.mm without a note (the amx
    route takes float32 products only). Here the kernels' state is that of such a CPU."""
    model, test = _model_and_data(torch.float64)
    product_routes.clear_route_choices()
    monkeypatch.setattr(native, "report", lambda: {"step": "in use", "amx_products": "in use"})
    report = evaluate(model, test, product_route="amx", **SMALL)
    assert all(c["how"] == "forced-unavailable" for c in report.settings["product_routes"])
    note = "the amx route ({product_route}) computes float32 products of 0/1 inputs, and this run's products "
    assert note + "(float64) are not: torch.mm ran them all" in [getattr(n, "template", n) for n in report.notes]
    product_routes.clear_route_choices()
    table = evaluate(model, test, product_route="table", **SMALL)  # the table route took the sampled layers
    assert not any(n.startswith("the table route") for n in table.notes)


def test_a_forced_onednn_route_in_float64_says_so_in_the_json(monkeypatch, tmp_path, capsys):
    if not products.onednn_available():
        pytest.skip("this torch build has no oneDNN")
    model, test = _model_and_data(torch.float64)
    save_checkpoint(tmp_path / "m.pt", model)
    np.save(tmp_path / "test.npy", test.numpy().astype(np.uint8))
    product_routes.clear_route_choices()
    args = ["evaluate", str(tmp_path / "m.pt"), "--data", str(tmp_path / "test.npy"), "--init", "uniform"]
    args += ["--steps", "5", "--ais-chains", "10", "--raise-examples", "2", "--raise-chains", "2", "--threads", "1"]
    args += ["--no-progress", "--dtype", "float64", "--product-route", "onednn", "--json", str(tmp_path / "r.json")]
    assert main(args) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert "the onednn route (--product-route) computes float32 products" in " ".join(doc["notes"])
    assert doc["settings"]["product_route_forced_by"] == "setting"
