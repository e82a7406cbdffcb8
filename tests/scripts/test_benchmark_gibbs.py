"""scripts/benchmark_gibbs.py, scripts/benchmark_log_f.py and scripts/race_peers.py at toy scale: they print every
figure they promise (no claim about the figures here: speed is what the scripts measure)."""

from __future__ import annotations

import os
import re

import pytest
import torch

from tests.scripts.test_reproduce_raise_tables import load_script


def test_toy_step_benchmark_prints_routes_ratios_load_and_breakdown(capsys):
    script = load_script("benchmark_gibbs")
    threads = torch.get_num_threads()
    try:
        script.main(
            [
                "--chains",
                "64",
                "--steps",
                "2",
                "--repeats",
                "1",
                "--threads",
                "1",
                "--all-routes",
                "--breakdown",
                "--units",
                "potts",
                "gaussian",
            ]
        )
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "load average before" in out and "load average after" in out
    assert re.search(r"other processes used (\d+%|\?) of the CPUs", out)
    # timed, or forced for the whole run (RAISE_EVAL_PRODUCT_ROUTE, e.g. the route-forcing test runs)
    assert re.search(r"route of x\(784,\) -> 500: (mm|onednn|table|amx) \((timed at start|forced by)", out)
    assert "products forced through each route: mm" in out and "table" in out
    assert re.search(r"bare torch\.mm products [\d.]+ ms: step / them [\d.]+ \(range", out)
    assert "the library's products" in out
    assert re.search(
        r"breakdown \(ms per step\): products [\d.]+, random [\d.]+, transcendental [\d.]+, native [\d.]+", out
    )
    for model in ("categorical(100x21) - bernoulli(200)", "gaussian(784) - bernoulli(500)"):
        assert re.search(
            re.escape(model) + r".*: AIS step [\d.]+ ms, bare torch\.mm products [\d.]+ ms: step / them", out
        )
    assert re.search(r"ratio \(AIS step / bare torch\.mm products, cpu, 1 thread\(s\), median\): [\d.]+\n$", out)


def test_toy_race_runs_raise_eval_and_names_the_peers_it_skips(capsys):
    script = load_script("race_peers")
    script.main(["--chains", "16", "--steps", "2", "--threads", "1"])
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "load average before" in out
    assert re.search(r"1 thread\(s\) \(other processes used (\d+%|\?) of the CPUs meanwhile; load average now", out)
    assert "contestants: raise-eval float32" in out
    assert re.search(r"raise-eval float32: [\d.]+ ms per step, log Z [\d.]+ \+- [\d.]+", out)
    assert re.search(r"raise-eval float64: [\d.]+ ms per step", out)
    for peer in ("rbms float32", "PyDeep float64"):
        assert f"skipped {peer}" in out or f"{peer}: " in out


def test_toy_step_benchmark_times_a_saved_rbm_near_a_beta(capsys, tmp_path):
    from raise_eval import RBM, save_checkpoint

    g = torch.Generator().manual_seed(0)
    path = tmp_path / "rbm.pt"
    save_checkpoint(path, RBM.random(40, 15, weight_std=0.3, generator=g))
    script = load_script("benchmark_gibbs")
    threads = torch.get_num_threads()
    try:
        script.main(["--model", str(path), "--beta", "0.9", "--chains", "32", "--steps", "3", "--repeats", "1"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert f"40-15 RBM {path}, 32 chains, 3 steps of 1e-4 from beta 0.9 x 1 repeats" in out
    assert re.search(r"bare torch\.mm products [\d.]+ ms: step / them [\d.]+ \(range", out)


def test_step_benchmark_refuses_a_beta_outside_the_path(capsys):
    script = load_script("benchmark_gibbs")
    with pytest.raises(SystemExit) as exit_:
        script.main(["--beta", "1.5"])
    assert exit_.value.code == 2
    assert "--beta 1.5: give an inverse temperature between 0 and 1" in capsys.readouterr().err


def test_toy_log_f_benchmark_prints_the_machine_its_load_and_the_ratio(capsys):
    script = load_script("benchmark_log_f")
    threads = torch.get_num_threads()
    try:
        result = script.main(
            ["--sizes", "12", "8", "6", "--vectors", "3", "--steps", "2", "--chains", "2", "--repeats", "1"]
        )
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "load average before" in out
    assert re.search(r"other processes used (\d+%|\?) of the CPUs meanwhile; load average after: ", out)
    assert re.search(r"repeat 1: AIS [\d.]+ s \([\d.]+ us per chain-step\), bare products [\d.]+ s", out)
    assert re.search(r"median ratio \(per-vector AIS for log f\(v\) / its bare matrix products\): [\d.]+\n$", out)
    assert result["machine"] and result["ratio"] > 0


def test_toy_log_f_benchmark_times_the_pytorch_sweep_beside_the_kernel(capsys, monkeypatch):
    """--pytorch-too: each repeat also times the estimate with the C kernel off, and the environment is restored."""
    monkeypatch.delenv("RAISE_EVAL_NATIVE", raising=False)
    script = load_script("benchmark_log_f")
    threads = torch.get_num_threads()
    try:
        result = script.main(
            ["--sizes", "12", "8", "6", "--vectors", "3", "--steps", "2", "--chains", "2", "--repeats", "2",
             "--pytorch-too"]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert re.search(r"\nsweep: (the C kernel|PyTorch)", out)
    assert re.search(r"repeat 2: AIS [\d.]+ s .*, AIS \(PyTorch sweep\) [\d.]+ s .*; ratio [\d.]+; ratio [\d.]+ "
                     r"\(PyTorch sweep\)\n", out)  # fmt: skip
    assert re.search(r"median ratio with the PyTorch sweep: [\d.]+; the kernel's estimate took 1/[\d.]+ of its", out)
    assert result["pytorch_sweep_ratio"] > 0 and result["speedup"] > 0
    assert "RAISE_EVAL_NATIVE" not in os.environ
