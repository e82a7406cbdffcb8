"""scripts/examples/torchebm_2d.py and examples/torchebm_2d_factory.py (issue 43's first "Must show"): the factory
rebuilds the energy the script trains, and the script skips cleanly, writing nothing, without torchebm."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from raise_eval import EnergyModel
from raise_eval.io.user_model import load_module
from tests.conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "examples" / "torchebm_2d.py"
FACTORY = PROJECT_ROOT / "examples" / "torchebm_2d_factory.py"


def _script():
    spec = importlib.util.spec_from_file_location("scripts_examples_torchebm_2d", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_factory_wraps_a_saved_state_dict(tmp_path, monkeypatch):
    factory = load_module(FACTORY)
    torch.manual_seed(0)
    saved = factory.MLPEnergy()
    torch.save(saved.state_dict(), tmp_path / "energy.pt")
    monkeypatch.setenv("TORCHEBM_2D_WEIGHTS", str(tmp_path / "energy.pt"))
    model = factory.make()
    assert isinstance(model, EnergyModel) and tuple(model.event_shape) == (2,)
    x = torch.randn(4, 2)
    with torch.no_grad():
        torch.testing.assert_close(model.log_unnormalized(x).float(), -saved(x))


def test_the_factory_rebuilds_torchebm_s_energy(tmp_path, monkeypatch):
    pytest.importorskip("torchebm")
    energy, train, test = _script().train(iterations=2, n_test=10, seed=0)
    assert train.shape == (3000, 2) and test.shape == (10, 2)
    torch.save(energy.state_dict(), tmp_path / "energy.pt")
    monkeypatch.setenv("TORCHEBM_2D_WEIGHTS", str(tmp_path / "energy.pt"))
    model = load_module(FACTORY).make()
    with torch.no_grad():
        torch.testing.assert_close(model.log_unnormalized(test).float(), -energy(test))


def test_without_torchebm_the_script_writes_nothing(tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torchebm" else find_spec(name, *a)
    )
    assert _script().main(["--out", str(tmp_path / "out")]) == 0
    assert "torchebm is not installed" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()
