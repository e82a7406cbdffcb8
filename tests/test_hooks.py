"""LikelihoodMonitor in a plain training loop: its records are exactly a stand-alone `evaluate` of each epoch's
model with the same seed and settings, and its logger, history files and plot carry the same numbers."""

from __future__ import annotations

import csv
import json
import sys

import pytest
import torch
from raise_eval.models import RBM
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm

from raise_eval import LikelihoodMonitor, SandwichRecord
from raise_eval import evaluate

# Cheap settings; every test passes them to both the monitor and the stand-alone evaluate.
SETTINGS = dict(init="uniform", steps=30, ais_chains=40, raise_examples=8, raise_chains=3, seed=7, exact="auto")


def prototype_data(n: int, seed: int) -> torch.Tensor:
    """Binary vectors (n, 12): three fixed prototypes with 10% of the bits flipped."""
    protos = (torch.rand(3, 12, generator=torch.Generator().manual_seed(0)) < 0.5).float()
    g = torch.Generator().manual_seed(seed)
    flips = (torch.rand(n, 12, generator=g) < 0.1).float()
    return (protos[torch.randint(0, 3, (n,), generator=g)] - flips).abs()


@pytest.fixture(scope="module")
def data():
    return prototype_data(120, seed=1), prototype_data(40, seed=2)


def train_with(monitor, train, epochs=3, final=False):
    """Train a 12-4 RBM with CD-1, calling the monitor after each epoch; returns {epoch: model at that epoch}."""
    models = {}

    def callback(epoch, model):
        models[epoch] = model  # train_rbm builds new tensors at each update: this model stays as it was
        monitor(epoch, model)

    config = RBMTrainingConfig(n_hidden=4, epochs=epochs, batch_size=20, learning_rate=0.1, method="cd")
    model = train_rbm(train, config, generator=torch.Generator().manual_seed(3), callback=callback)
    if final:
        monitor.final(epochs - 1, model)
    return models


def test_plain_loop_records_match_standalone_evaluate(data, tmp_path):
    train, test = data
    logged = []
    csv_path, png_path = tmp_path / "history.csv", tmp_path / "sandwich.png"
    monitor = LikelihoodMonitor(
        test,
        every=1,
        **SETTINGS,
        logger=lambda m, step: logged.append((m, step)),
        history_path=csv_path,
        plot_path=png_path,
    )
    rng_before = torch.random.get_rng_state()
    models = train_with(monitor, train, epochs=3)
    assert [r.epoch for r in monitor.history] == [0, 1, 2]
    for rec in monitor.history:
        ref = evaluate(models[rec.epoch], test, **SETTINGS)
        assert rec.ais == ref.ais_mean and rec.raise_ == ref.raise_mean and rec.exact == ref.exact_mean
        assert rec.raise_se == ref.raise_stderr and rec.ais_se == float(ref.ais.stderr)
        assert rec.gap == ref.gap == rec.ais - rec.raise_
        assert rec.log_z == ref.ais.estimate and rec.log_z_exact == ref.log_z_exact
        assert rec.exact is not None  # 4 hidden units: enumerated under exact='auto'
        assert rec.warnings == tuple(w.code for w in ref.warnings)
    # The models change from epoch to epoch, so equal numbers are not an accident of a constant model.
    assert len({r.ais for r in monitor.history}) == 3
    assert monitor.last_report is not None and monitor.last_report.ais_mean == monitor.history[-1].ais

    # The logger got the same numbers under the prefix, with the epoch as step.
    assert [step for _, step in logged] == [0, 1, 2]
    for (metrics, _), rec in zip(logged, monitor.history):
        assert metrics == {
            "test_ll/ais": rec.ais,
            "test_ll/raise": rec.raise_,
            "test_ll/gap": rec.gap,
            "test_ll/exact": rec.exact,
        }
        assert all(type(v) is float for v in metrics.values())

    # The CSV parses back to the same floats.
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    for row, rec in zip(rows, monitor.history):
        assert int(row["epoch"]) == rec.epoch
        for key, value in rec.to_dict().items():
            if key not in ("epoch", "warnings", "verdict"):
                assert float(row[key]) == value, key
        assert row["warnings"] == ";".join(rec.warnings)
        assert row["verdict"] == "" and rec.verdict is None  # not a certified monitor

    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.tmp"))
    # evaluate draws from its own generators only.
    assert torch.equal(torch.random.get_rng_state(), rng_before)


def test_every_final_json_and_device_dtype(data, tmp_path):
    train, test = data
    json_path = tmp_path / "history.json"
    monitor = LikelihoodMonitor(test.double(), every=2, **SETTINGS, history_path=json_path)
    models = train_with(monitor, train, epochs=4, final=True)
    # Epochs 0 and 2 are due (epoch % 2 == 0); final() adds the last, 3.
    assert [r.epoch for r in monitor.history] == [0, 2, 3]
    assert monitor.final(3, models[3]) is monitor.history[-1]  # already recorded: no second evaluation
    assert monitor(1, models[1]) is None and len(monitor.history) == 3
    doc = json.loads(json_path.read_text())
    assert [d["epoch"] for d in doc] == [0, 2, 3]
    for d, rec in zip(doc, monitor.history):
        assert d == {**rec.to_dict(), "warnings": list(rec.warnings)}
        assert isinstance(d["ais"], float) and isinstance(d["raise"], float) and isinstance(d["exact"], float)
    # float64 test data, float32 model: moved to the model's dtype, the same numbers as evaluate on float32 data.
    assert monitor.history[1].ais == evaluate(models[2], test, **SETTINGS).ais_mean


def test_no_exact_when_not_enumerated_and_model_untouched(data):
    _, test = data
    g = torch.Generator().manual_seed(4)
    model = RBM.random(12, 4, weight_std=0.5, generator=g, dtype=torch.float64)
    W = model.W.clone()
    logged = []
    monitor = LikelihoodMonitor(test, **{**SETTINGS, "exact": "never"}, logger=lambda m, s: logged.append(m))
    rec = monitor(0, model)
    assert isinstance(rec, SandwichRecord) and rec.exact is None and rec.log_z_exact is None
    assert set(logged[0]) == {"test_ll/ais", "test_ll/raise", "test_ll/gap"}  # exact only when known
    assert rec.to_dict()["raise"] == rec.raise_ and rec.to_dict()["exact"] is None
    assert torch.equal(model.W, W) and model.dtype == torch.float64


def test_errors(data, tmp_path, monkeypatch):
    _, test = data
    for every in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="every must be an integer of at least 1"):
            LikelihoodMonitor(test, every=every)
    with pytest.raises(ValueError, match="needs train_pixel_means"):
        LikelihoodMonitor(test, init="base-rates")
    with pytest.raises(ValueError, match="steps must be an integer"):
        LikelihoodMonitor(test, steps=0)
    with pytest.raises(ValueError, match="schedule must be one of"):
        LikelihoodMonitor(test, schedule="cosine")
    with pytest.raises(ValueError, match="must end in .csv or .json"):
        LikelihoodMonitor(test, history_path=tmp_path / "history.txt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LikelihoodMonitor(test, history_path=tmp_path / "missing" / "history.csv")
    with pytest.raises(ValueError, match="must be binary"):
        LikelihoodMonitor(test * 0.5)
    with pytest.raises(TypeError, match="RBM, DBM, DBN or FullyVisibleModel"):
        LikelihoodMonitor(test)(0, torch.nn.Linear(12, 4))
    # matplotlib missing: a None entry in sys.modules makes `import matplotlib` raise ImportError.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install -e \"\.\[plot\]\""):
        LikelihoodMonitor(test, plot_path=tmp_path / "sandwich.png")
    LikelihoodMonitor(test)  # no plot asked for: matplotlib is not needed


def check_against_evaluate(model):
    test = (torch.rand(30, model.n_visible, generator=torch.Generator().manual_seed(6)) < 0.5).float()
    settings = {**SETTINGS, "log_f_samples": 20}
    rec = LikelihoodMonitor(test, **settings)(0, model)
    ref = evaluate(model, test, **settings)
    assert (rec.ais, rec.raise_, rec.exact) == (ref.ais_mean, ref.raise_mean, ref.exact_mean)
    assert rec.exact is not None  # float64 chains small enough to enumerate


def test_dbm(tiny_dbm):
    check_against_evaluate(tiny_dbm)


def test_dbn(tiny_dbn):
    check_against_evaluate(tiny_dbn)
