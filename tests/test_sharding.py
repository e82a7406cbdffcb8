"""Sharded AIS and RAISE: fixed shards with their own streams, bounded memory, refusal before work."""

import hashlib
from pathlib import Path

import pytest
import torch
from raise_eval.models.boltzmann.dbm import DBM
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.io.checkpoints import load_checkpoint

from raise_eval import sharding
from raise_eval.cli import main
from raise_eval.io.datasets import load_dataset
from raise_eval.estimators.ais import ais
from raise_eval.estimators.raise_ import raise_log_likelihood
from raise_eval import evaluate
from raise_eval.paths.boltzmann import BoltzmannPath, data_base_rates
from raise_eval.schedules import make_schedule
from raise_eval.runtime.sharding import default_shard_size, shard_generator, shard_seed, sharded_ais, sharded_raise
from raise_eval.settings import parse_size

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
SMALL = dict(steps=20, ais_chains=40, raise_examples=10, raise_chains=4, exact="never")


@pytest.fixture(scope="module")
def digits():
    ckpt = load_checkpoint(DEFAULT)
    return ckpt.model, load_dataset("digits", "test"), ckpt.train_pixel_means


@pytest.mark.parametrize(
    "text, value",
    [("512MB", 512 * 10**6), ("8GB", 8 * 10**9), ("1.5GiB", 3 * 2**29), ("1000", 1000), ("64 kib", 65536)],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["lots", "12 parsecs", "-1GB", "0", ""])
def test_parse_size_refuses_nonsense(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_shard_seeds():
    """Shard 0 keeps the stage's historical seed; the others hash (seed, stage, index) as documented."""
    assert shard_seed(7, "ais", 0) == 7 and shard_seed(7, "raise", 0) == 8
    expected = int.from_bytes(hashlib.sha256(b"raise-eval/raise/7/3").digest()[:8], "big") >> 1
    assert shard_seed(7, "raise", 3) == expected < 2**63
    assert len({shard_seed(0, s, i) for s in ("ais", "raise") for i in range(1, 50)}) == 98


def test_default_runs_are_one_shard():
    """Today's default runs (1,000 AIS chains, 100 x 20 RAISE pairs) stay one shard: their numbers are unchanged."""
    for sizes in ([64, 16], [784, 500], [784, 1000], [784, 500, 1000], [784, 500, 2000]):
        s = sharding.SHARD_UNITS // sum(sizes)
        assert s >= 2000, sizes
    assert (
        default_shard_size(DBN.random([6, 5, 4], generator=torch.Generator().manual_seed(0)))
        == sharding.SHARD_UNITS // 15
    )


def test_one_shard_is_the_unsharded_estimator(digits):
    model, test, _ = digits
    path, betas = BoltzmannPath(model), make_schedule("linear", 15)
    a = sharded_ais(path, betas, 30, seed=5, shard_size=1000)
    b = ais(path, betas, 30, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.log_weights, b.log_weights) and a.estimate == b.estimate
    r = sharded_raise(path, test[:6], betas, 3, seed=5, shard_size=1000)
    q = raise_log_likelihood(path, test[:6], betas, 3, generator=torch.Generator().manual_seed(6))
    assert torch.equal(r.log_weights, q.log_weights) and (r.mean, r.stderr) == (q.mean, q.stderr)


def test_shards_are_independent_runs_in_order():
    """Each shard is the estimator run alone on its piece with its own generator, concatenated in order."""
    model = DBM.random([6, 5, 4], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    path, betas = BoltzmannPath(model), make_schedule("linear", 10)
    a = sharded_ais(path, betas, 25, seed=3, shard_size=10)
    parts = [
        ais(path, betas, n, generator=shard_generator(3, "ais", i, model.device)) for i, n in enumerate([10, 10, 5])
    ]
    assert torch.equal(a.log_weights, torch.cat([p.log_weights for p in parts]))
    data = (torch.rand(7, 6, generator=torch.Generator().manual_seed(2)) < 0.5).double()
    r = sharded_raise(path, data, betas, 3, seed=3, shard_size=7)  # 2 vectors x 3 chains per shard
    pieces = [data[0:2], data[2:4], data[4:6], data[6:7]]
    parts = [
        raise_log_likelihood(path, d, betas, 3, generator=shard_generator(3, "raise", i, model.device))
        for i, d in enumerate(pieces)
    ]
    assert torch.equal(r.log_weights, torch.cat([p.log_weights for p in parts]))
    assert r.start == "heating"


@pytest.mark.parametrize("family", ["RBM", "DBN"])
def test_memory_bound_does_not_change_the_numbers(digits, family):
    if family == "RBM":
        model, test, means = digits
    else:
        model = DBN.random([64, 12, 8], generator=torch.Generator().manual_seed(4))
        test, means = digits[1], None
    init = "base-rates" if means is not None else "uniform"
    runs = [
        evaluate(
            model, test, init=init, train_pixel_means=means, **SMALL, log_f_samples=10, shard_size=10, max_memory=bound
        )
        for bound in (None, 10**9, 10**8)
    ]
    for r in runs[1:]:
        assert torch.equal(r.ais.log_weights, runs[0].ais.log_weights)
        assert torch.equal(r.raise_.log_weights, runs[0].raise_.log_weights)
        assert (r.ais_mean, r.raise_mean, r.raise_stderr) == (
            runs[0].ais_mean,
            runs[0].raise_mean,
            runs[0].raise_stderr,
        )
    assert runs[0].settings["shard_size"] == 10


def test_default_shard_gives_the_published_numbers(digits):
    """One shard per stage: evaluate's numbers are those of the plain estimators seeded seed and seed + 1."""
    model, test, means = digits
    report = evaluate(model, test, train_pixel_means=means, **SMALL)
    assert report.settings["shard_size"] == default_shard_size(model)
    path = BoltzmannPath(model, data_base_rates(model, means.double().unsqueeze(0)))
    betas = make_schedule("linear", SMALL["steps"])
    plain = ais(path, betas, SMALL["ais_chains"], generator=torch.Generator().manual_seed(0))
    assert torch.equal(report.ais.log_weights, plain.log_weights)


def test_request_over_the_bound_is_refused_before_work(digits, monkeypatch):
    model, test, means = digits

    def no_work(*args, **kwargs):
        raise AssertionError("an estimator ran")

    monkeypatch.setattr(sharding, "ais", no_work)
    monkeypatch.setattr(sharding, "raise_log_likelihood", no_work)
    with pytest.raises(ValueError, match=r"max_memory.*shard_size.*nothing was computed"):
        evaluate(model, test, train_pixel_means=means, **SMALL, max_memory=10_000)
    with pytest.raises(ValueError, match=r"RAISE \(100 vectors x 4,000 chains.*lower raise_examples x raise_chains, raise_chains"):
        evaluate(
            model,
            test,
            train_pixel_means=means,
            steps=5,
            ais_chains=2,
            raise_chains=4000,
            shard_size=100,
            max_memory=10**6,
            exact="never",  # the exact stage's chunks come before RAISE and would not fit this bound either
        )


def test_cli_refuses_before_work(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", str(DEFAULT), "--ais-chains", "10000000", "--max-memory", "100MB", "--no-progress"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--max-memory" in err and "--shard-size" in err and "--ais-chains" in err and "nothing was computed" in err
    with pytest.raises(SystemExit):
        main(["evaluate", str(DEFAULT), "--max-memory", "a lot"])
    assert "--max-memory: 'a lot' is not a size" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", str(DEFAULT), "--shard-size", "0"])
    assert "--shard-size must be an integer of at least 1, got 0" in capsys.readouterr().err
