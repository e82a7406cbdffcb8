"""Dataset readers and validation of user data."""

import gzip

import numpy as np
import pytest
import torch

from raise_eval.datasets import DataError, check_binary, load_array_file, load_dataset, read_idx, resolve_data_root


def test_embedded_digits_need_no_data_root(monkeypatch, tmp_path):
    monkeypatch.setenv("RAISE_EVAL_DATA", str(tmp_path / "nowhere"))
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    assert train.shape == (1437, 64) and test.shape == (360, 64)
    assert set(train.unique().tolist()) == {0.0, 1.0}


def test_idx_reader(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    header = bytes([0, 0, 0x08, 3]) + b"".join(int(n).to_bytes(4, "big") for n in images.shape)
    path = tmp_path / "x-idx3-ubyte.gz"
    with gzip.open(path, "wb") as f:
        f.write(header + images.tobytes())
    np.testing.assert_array_equal(read_idx(path), images)
    with gzip.open(path, "wb") as f:
        f.write(header + images.tobytes()[:-1])
    with pytest.raises(DataError, match="truncated"):
        read_idx(path)


def test_data_root_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("RAISE_EVAL_DATA", str(tmp_path))
    assert resolve_data_root() == tmp_path
    assert resolve_data_root(tmp_path) == tmp_path
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_data_root(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="MNIST/raw"):
        load_dataset("mnist", "test")


def test_array_files(tmp_path):
    x = np.random.default_rng(0).random((5, 6)) < 0.5
    np.save(tmp_path / "a.npy", x)
    np.savez(tmp_path / "b.npz", data=x.astype(np.float64), labels=np.zeros(5))
    np.savez(tmp_path / "c.npz", x.astype(np.uint8), x)
    assert torch.equal(load_array_file(tmp_path / "a.npy"), torch.from_numpy(x).float())
    assert torch.equal(load_array_file(tmp_path / "b.npz"), torch.from_numpy(x).float())
    with pytest.raises(DataError, match="name the data array 'data'"):
        load_array_file(tmp_path / "c.npz")
    (tmp_path / "d.csv").write_text("0,1")
    with pytest.raises(DataError, match=".npy or .npz"):
        load_array_file(tmp_path / "d.csv")


def test_check_binary_messages():
    good = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    assert check_binary(good, 2) is good
    with pytest.raises(DataError, match=r"must be binary .* 0.5 at row 1, column 0"):
        check_binary(torch.tensor([[0.0, 1.0], [0.5, 1.0]]))
    with pytest.raises(DataError, match="784 visible units but data has 196 columns.*mnist14"):
        check_binary(torch.zeros(3, 196), 784)
    with pytest.raises(DataError, match="shaped \\(N, D\\)"):
        check_binary(torch.zeros(3))
    with pytest.raises(DataError, match="splits train, test, not 'valid'"):
        load_dataset("digits", "valid")
    with pytest.raises(DataError, match="unknown dataset"):
        load_dataset("cifar", "test")


@pytest.mark.data
def test_shared_datasets(shared_data):
    mnist = load_dataset("mnist", "test", shared_data)
    assert mnist.shape == (10000, 784) and set(mnist.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(mnist, load_dataset("mnist", "test", shared_data))  # fixed-seed binarization
    assert load_dataset("mnist14", "test", shared_data).shape == (10000, 196)
    assert load_dataset("binarized_mnist", "valid", shared_data).shape == (10000, 784)
