"""scripts/prepare_gpu_data.py and scripts/measure_rounding_gap.py on a small stand-in for the shared data folder: the
DATA_DIR that scripts/check_gpu.sh reads, a clear refusal where the folder lacks a file, and a row per rounding."""

from __future__ import annotations

import numpy as np
import pytest

from raise_eval.io.arrays import load_array_file
from tests.scripts.test_reproduce_raise_tables import load_script


def _shared(root, rows: int = 3):
    rng = np.random.default_rng(0)
    (root / "binarized_mnist").mkdir(parents=True)
    (root / "checkpoints").mkdir()
    splits = {}
    for split in ("test", "train"):
        splits[split] = rng.integers(0, 2, size=(rows, 784))
        np.savetxt(root / "binarized_mnist" / f"binarized_mnist_{split}.amat", splits[split], fmt="%d")
    np.savez(root / "checkpoints" / "rbm_mnist_sgd_grosse_salakhutdinov_2015.npz", W=np.zeros((784, 5)))
    return splits


def test_it_writes_what_the_gpu_checks_read(tmp_path, capsys):
    splits = _shared(tmp_path / "shared")
    out = tmp_path / "gpu"
    assert load_script("prepare_gpu_data").main(["--data-root", str(tmp_path / "shared"), "--out", str(out)]) == 0
    for split, rows in splits.items():
        assert np.array_equal(load_array_file(out / f"mnist_{split}.npz").numpy(), rows)
    assert (out / "rbm_mnist_sgd_grosse_salakhutdinov_2015.npz").is_file()
    assert (out / "data" / "binarized_mnist" / "binarized_mnist_test.amat").is_file()
    assert f"wrote {out}" in capsys.readouterr().out


def test_a_missing_file_is_named(tmp_path, capsys):
    _shared(tmp_path / "shared")
    (tmp_path / "shared" / "checkpoints" / "rbm_mnist_sgd_grosse_salakhutdinov_2015.npz").unlink()
    with pytest.raises(SystemExit):
        load_script("prepare_gpu_data").main(["--data-root", str(tmp_path / "shared"), "--out", str(tmp_path / "o")])
    assert "rbm_mnist_sgd_grosse_salakhutdinov_2015.npz is missing" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_rounding_gap_script_prints_each_rounding(tmp_path, capsys):
    """scripts/measure_rounding_gap.py on a stand-in RBM: a row per rounding; float16 and TF32 round a weight of
    modest size alike (11 significant bits), so their rows agree, and bfloat16's differs."""
    _shared(tmp_path, rows=5)
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "checkpoints" / "rbm_mnist_sgd_grosse_salakhutdinov_2015.npz", W=rng.normal(0, 0.3, (784, 7)),
             vbias=rng.normal(0, 1, 784), hbias=rng.normal(0, 1, 7))  # fmt: skip
    script = load_script("measure_rounding_gap")
    assert script.main(["--data-root", str(tmp_path), "--vectors", "5", "--sweeps", "2"]) == 0
    rows = {line.split("  ")[0].strip(): line.split()[-5:] for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(rows) == {"float16 (half-path)", "TF32 (tf32-path)", "bfloat16"}
    assert rows["float16 (half-path)"] == rows["TF32 (tf32-path)"] != rows["bfloat16"]
