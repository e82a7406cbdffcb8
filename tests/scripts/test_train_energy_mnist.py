"""scripts/train_energy_mnist.py at toy scale (a data root of 40 + 12 random idx images, two iterations): it writes
the state_dict, the examples and the log, which examples/energy_mnist_factory.py turns into an EnergyModel on the box
[0, 1]; existing outputs are refused before any work without --overwrite."""

from __future__ import annotations

import gzip
import importlib.util
import json
import struct

import numpy as np
import pytest
import torch

from tests.conftest import PROJECT_ROOT
from tests.scripts.test_reproduce_raise_tables import load_script


def _idx(path, n, seed):
    images = np.random.default_rng(seed).integers(0, 256, (n, 28, 28), dtype=np.uint8)
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", 0x00000803) + struct.pack(">III", n, 28, 28) + images.tobytes())


@pytest.fixture(autouse=True)
def scripts_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "scripts"))


def test_toy_training_writes_a_checkpoint_the_factory_loads(tmp_path, monkeypatch, capsys):
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    _idx(raw / "train-images-idx3-ubyte.gz", 40, 0)
    _idx(raw / "t10k-images-idx3-ubyte.gz", 12, 1)
    out = tmp_path / "run"
    script = load_script("train_energy_mnist")
    threads = torch.get_num_threads()
    args = ["--data-root", str(tmp_path / "data"), "--out", str(out), "--iterations", "2", "--batch", "4",
            "--langevin-steps", "2", "--num-test", "5"]  # fmt: skip
    try:
        assert script.main(args) == 0
    finally:
        torch.set_num_threads(threads)
    test, train = np.load(out / "test.npy"), np.load(out / "train.npy")
    assert test.shape == (5, 784) and train.shape == (40, 784) and 0 < test.min() and test.max() < 1
    assert len(json.loads((out / "log.json").read_text())["losses"]) == 2
    monkeypatch.setenv("ENERGY_MNIST_WEIGHTS", str(out / "energy.pt"))
    spec = importlib.util.spec_from_file_location("energy_mnist_factory", PROJECT_ROOT / "examples" /
                                                  "energy_mnist_factory.py")  # fmt: skip
    factory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(factory)
    model = factory.make()
    assert model.describe() == "energy real[0, 1](784) MLPEnergy"
    assert model.log_unnormalized(torch.from_numpy(test)).shape == (5,)
    with pytest.raises(SystemExit):
        script.main(args)  # the outputs exist now: refused without --overwrite
    assert "exists" in capsys.readouterr().err
