"""Thread counts: the Python API's entry points choose them as the command line does, for the call only."""

import os
from pathlib import Path

import pytest
import torch

import raise_eval.runtime.threads as threads
from raise_eval.io.datasets import load_dataset
from raise_eval import evaluate
from raise_eval.models.io.checkpoints import load_checkpoint
from raise_eval.runtime.threads import resolve_threads, using_threads

DEFAULT = Path(__file__).resolve().parents[1] / "checkpoints" / "rbm_digits_64-16.pt"
SMALL = dict(steps=20, ais_chains=50, raise_examples=5, raise_chains=2)


@pytest.fixture
def two_threads():
    """torch at 2 threads for the test (conftest sets 1), put back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def busy_machine(monkeypatch):
    """Every core looks busy with another process's work (as under the load that made the API 4 times slower)."""
    monkeypatch.setattr(threads, "busy_cores", lambda interval=0.1: float(os.cpu_count() or 1))


def test_resolve_threads(monkeypatch, busy_machine):
    assert resolve_threads(None, 3) == 3 and resolve_threads(5, 3) == 5 and resolve_threads("auto", 3) == 1
    monkeypatch.setattr(threads, "busy_cores", lambda interval=0.1: pytest.fail("measured for nothing"))
    assert resolve_threads("auto", 1) == 1  # one thread already: nothing to choose, nothing measured
    for bad in (0, -1, 1.5, True, "two"):
        with pytest.raises(ValueError, match="threads must be 'auto'(,| or) a positive integer"):
            resolve_threads(bad, 2)


def test_using_threads_restores_the_count_after_an_error(two_threads):
    with pytest.raises(RuntimeError), using_threads(1) as count:
        assert count == 1 and torch.get_num_threads() == 1
        raise RuntimeError("stage failed")
    assert torch.get_num_threads() == 2


def test_evaluate_chooses_threads_as_the_cli_does_and_restores_them(two_threads, busy_machine):
    ckpt = load_checkpoint(DEFAULT)
    test = load_dataset("digits", "test")
    report = evaluate(ckpt.model, test, train_pixel_means=ckpt.train_pixel_means, **SMALL)  # threads='auto'
    assert report.settings["threads"] == 1 and torch.get_num_threads() == 2
    report = evaluate(ckpt.model, test, train_pixel_means=ckpt.train_pixel_means, threads=None, **SMALL)
    assert report.settings["threads"] == 2 and torch.get_num_threads() == 2
    with pytest.raises(ValueError, match="threads must be"):
        evaluate(ckpt.model, test, train_pixel_means=ckpt.train_pixel_means, threads=0, **SMALL)
    assert torch.get_num_threads() == 2


def test_certify_and_bdmc_take_threads_too(two_threads, busy_machine):
    from raise_eval import VAE, VAEConfig, certify
    from raise_eval.bidirectional import evaluate_bdmc

    ckpt = load_checkpoint(DEFAULT)
    cert = certify(
        ckpt.model, load_dataset("digits", "test"), tolerance=10.0, train_pixel_means=ckpt.train_pixel_means, **SMALL
    )
    assert cert.report.settings["threads"] == 1 and torch.get_num_threads() == 2
    torch.manual_seed(0)  # parameter initialization only
    vae = VAE(VAEConfig(data_dim=6, latent_dim=2, hidden=[4]))
    report = evaluate_bdmc(vae, num_examples=3, chains=2, steps=(3,), iwae_samples=(1,), elbo_samples=2, threads=1)
    assert report.settings["threads"] == 1 and torch.get_num_threads() == 2


@pytest.mark.parametrize("text", ["1e30", "3000000000"])
def test_absurd_thread_counts_are_refused_before_any_work(text, capsys):
    """torch takes a C int: a count beyond 65,536 was an overflow error without the flag's name (a new user's find)."""
    from raise_eval.cli import main

    with pytest.raises(SystemExit) as exit_:
        checkpoint = Path(__file__).resolve().parents[1] / "checkpoints" / "rbm_digits_64-16.pt"
        main(["evaluate", str(checkpoint), "--threads", text])
    assert exit_.value.code == 2
    assert "--threads must be a thread count of at most 65536" in capsys.readouterr().err
