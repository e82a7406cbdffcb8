"""SandwichCallback in a real Lightning Trainer: the logged metrics are a stand-alone `evaluate` of the model at
each epoch with the same seed, sanity checking adds no record, and the error messages say what to do."""

from __future__ import annotations

import csv
import importlib
import sys
from types import SimpleNamespace

import pytest
import torch
from raise_eval.models import RBM
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from raise_eval import LikelihoodMonitor
from raise_eval import evaluate

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

from raise_eval.integrations.lightning import SandwichCallback  # noqa: E402

SETTINGS = dict(init="uniform", steps=30, ais_chains=40, raise_examples=8, raise_chains=3, seed=5, exact="auto")
QUIET = pytest.mark.filterwarnings("ignore::UserWarning")  # Lightning's advice on dataloader workers and the like


def binary(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rates = torch.linspace(0.1, 0.9, 10)
    return (torch.rand(n, 10, generator=g) < rates).float()


class RBMModule(pl.LightningModule):
    """A 10-3 RBM held as nn.Parameters, trained by CD-1 through the free-energy difference with SGD."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.W = nn.Parameter(torch.randn(10, 3, generator=g) * 0.1)
        self.vbias = nn.Parameter(torch.zeros(10))
        self.hbias = nn.Parameter(torch.zeros(3))
        self.gibbs = torch.Generator().manual_seed(1)
        self.sanity_batches = 0

    @property
    def model(self) -> RBM:
        return RBM(self.W, self.vbias, self.hbias)

    def training_step(self, batch, batch_idx):
        (v0,) = batch
        rbm = self.model
        with torch.no_grad():
            v1 = rbm.sample_visible(rbm.sample_hidden(v0, self.gibbs), self.gibbs)
        # F(v0) - F(v1) with F = -log f: its gradient is the CD-1 estimate of -d log p(v0).
        return (rbm.log_unnormalized_prob(v1) - rbm.log_unnormalized_prob(v0)).mean()

    def validation_step(self, batch, batch_idx):
        self.sanity_batches += int(self.trainer.sanity_checking)
        self.log("val/free_energy", -self.model.log_unnormalized_prob(batch[0]).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class Snapshot(pl.Callback):
    """Copies of the RBM at each epoch end (the parameters change in place afterwards)."""

    def __init__(self):
        self.models = {}

    def on_train_epoch_end(self, trainer, pl_module):
        m = pl_module.model
        self.models[trainer.current_epoch] = RBM(*(t.detach().clone() for t in (m.W, m.vbias, m.hbias)))


@QUIET
def test_trainer_logs_match_standalone_evaluate(tmp_path):
    train, valid, test = binary(60, 1), binary(20, 2), binary(30, 3)
    monitor = LikelihoodMonitor(test, every=1, **SETTINGS, history_path=tmp_path / "sandwich.json")
    snapshot = Snapshot()
    trainer = pl.Trainer(
        max_epochs=3,
        accelerator="cpu",
        devices=1,
        callbacks=[snapshot, SandwichCallback(monitor)],
        logger=CSVLogger(tmp_path, name="run"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        log_every_n_steps=1,
    )
    module = RBMModule()
    trainer.fit(
        module,
        DataLoader(TensorDataset(train), batch_size=20),
        DataLoader(TensorDataset(valid), batch_size=20),
    )
    assert module.sanity_batches == 1  # sanity checking ran ...
    assert [r.epoch for r in monitor.history] == [0, 1, 2]  # ... and added no record
    refs = {e: evaluate(m, test, **SETTINGS) for e, m in snapshot.models.items()}
    assert len({r.ais_mean for r in refs.values()}) == 3  # the model changed between epochs
    for rec in monitor.history:
        ref = refs[rec.epoch]
        assert (rec.ais, rec.raise_, rec.gap, rec.exact) == (ref.ais_mean, ref.raise_mean, ref.gap, ref.exact_mean)
        assert rec.exact is not None

    def f32(x):  # Lightning keeps logged values in float32
        return float(torch.tensor(x, dtype=torch.float32))

    last = refs[2]
    cm = trainer.callback_metrics
    assert cm["test_ll/ais"].item() == f32(last.ais_mean)
    assert cm["test_ll/raise"].item() == f32(last.raise_mean)
    assert cm["test_ll/gap"].item() == f32(last.gap)
    assert cm["test_ll/exact"].item() == f32(last.exact_mean)

    with open(trainer.logger.log_dir + "/metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("test_ll/ais")]
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    for row in rows:
        ref = refs[int(row["epoch"])]
        for key, value in (
            ("ais", ref.ais_mean),
            ("raise", ref.raise_mean),
            ("gap", ref.gap),
            ("exact", ref.exact_mean),
        ):
            assert float(row[f"test_ll/{key}"]) == f32(value), key
    assert (tmp_path / "sandwich.json").exists()


def fake_trainer(epoch, **overrides):
    return SimpleNamespace(
        **{
            "sanity_checking": False,
            "current_epoch": epoch,
            "max_epochs": 10,
            "max_steps": -1,
            "global_step": 0,
            "should_stop": False,
            "is_global_zero": True,
            **overrides,
        }
    )


class Recorder:
    """Stands in for a LightningModule: keeps the model elsewhere and records `log` calls."""

    def __init__(self, rbm):
        self.rbm = rbm
        self.logged = []

    def log(self, name, value, **kwargs):
        self.logged.append((name, value, kwargs))


def test_schedule_final_sanity_and_getter(tmp_path):
    rbm = RBM.random(10, 3, weight_std=0.5, generator=torch.Generator().manual_seed(2))
    monitor = LikelihoodMonitor(binary(30, 3), every=5, **SETTINGS, history_path=tmp_path / "h.csv")
    callback = SandwichCallback(monitor, model_getter=lambda module: module.rbm)
    module = Recorder(rbm)
    assert callback.on_train_epoch_end(fake_trainer(0, sanity_checking=True), module) is None
    assert callback.on_train_epoch_end(fake_trainer(1), module) is None  # not due (1 % 5), not the last epoch
    assert monitor.history == [] and module.logged == []
    rec = callback.on_train_epoch_end(fake_trainer(9), module)  # the last of max_epochs=10: evaluated
    assert rec is not None and rec.epoch == 9
    assert callback.on_train_epoch_end(fake_trainer(3, should_stop=True), module).epoch == 3  # stopping early
    assert {name for name, _, _ in module.logged} == {"test_ll/ais", "test_ll/raise", "test_ll/gap", "test_ll/exact"}
    for _, value, kwargs in module.logged:
        assert type(value) is float
        assert kwargs["on_step"] is False and kwargs["on_epoch"] is True
    # A rank other than 0 evaluates and logs but writes no files.
    other = LikelihoodMonitor(binary(30, 3), every=1, **SETTINGS, history_path=tmp_path / "rank1.csv")
    assert SandwichCallback(other, lambda m: m.rbm).on_train_epoch_end(fake_trainer(0, is_global_zero=False), module)
    assert len(other.history) == 1 and not (tmp_path / "rank1.csv").exists()


def test_errors():
    monitor = LikelihoodMonitor(binary(30, 3), **SETTINGS)
    with pytest.raises(AttributeError, match=r"no attribute 'model'.*model_getter=lambda module"):
        SandwichCallback(monitor).on_train_epoch_end(fake_trainer(0), pl.LightningModule())
    with pytest.raises(TypeError, match="must be a raise_eval.LikelihoodMonitor"):
        SandwichCallback(object())


def test_missing_lightning_says_how_to_install(monkeypatch):
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    monkeypatch.delitem(sys.modules, "raise_eval.integrations.lightning")
    with pytest.raises(ImportError, match=r"pip install raise-eval\[lightning\]"):
        importlib.import_module("raise_eval.integrations.lightning")


def test_a_tracking_monitor_gives_its_verdict_at_the_last_epoch():
    from raise_eval.trajectory import TrackSettings

    g = torch.Generator().manual_seed(2)
    models = [RBM.random(10, 3, weight_std=0.3 * (i + 1), generator=g) for i in range(3)]
    monitor = LikelihoodMonitor(binary(30, 3), every=1, init="uniform", raise_examples=8, raise_chains=3,
                                track=TrackSettings(chains=50, steps=5, start_steps=10))  # fmt: skip
    module = Recorder(models[0])
    callback = SandwichCallback(monitor, model_getter=lambda m: m.rbm)
    for epoch, model in enumerate(models):
        module.rbm = model
        rec = callback.on_train_epoch_end(fake_trainer(epoch, max_epochs=3), module)
    assert [r.verdict is None for r in monitor.history] == [True, True, False] and rec is monitor.history[-1]
    assert {name for name, _, _ in module.logged} >= {"test_ll/log_z", "test_ll/raise", "test_ll/gap"}
