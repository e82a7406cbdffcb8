"""Datasets of binary vectors, read from disk with numpy (no torchvision, nothing downloaded).

Named datasets (`load_dataset(name, split)`), each returned as a float32 tensor (N, D) of 0s and 1s:

- digits (64 units; train, test): scikit-learn's 8x8 digits binarized at half intensity, embedded (no data root).
- mnist (784; train, test): MNIST idx files, binarized stochastically (pixel / 255) with a fixed seed per split.
- mnist14 (196; train, test): MNIST average-pooled 2x2 to 14x14 and thresholded at 0.5.
- binarized_mnist (784; train, valid, test): Larochelle & Murray's fixed binarization (.amat files).

Files: a .npy array, or a .npz holding one array (or one named `data`, `x` or `images`), of binary vectors
shaped (N, D).

The data root holds MNIST/raw/*.gz and binarized_mnist/*.amat (the layout of ../shared/data). It is, in order:
the `data_root` argument, $RAISE_EVAL_DATA, ./../shared/data, and ../shared/data beside the project checkout.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from raise_eval.models.io.files import check_magic

DATA_ROOT_ENV = "RAISE_EVAL_DATA"
_PACKAGE_DATA = Path(__file__).resolve().parent / "data"
_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
DATASETS = {
    "digits": ("train", "test"),
    "mnist": ("train", "test"),
    "mnist14": ("train", "test"),
    "binarized_mnist": ("train", "valid", "test"),
}
# Seed of MNIST's stochastic binarization, per split, so that train and test use different noise.
MNIST_BINARIZATION_SEEDS = {"train": 1234, "test": 5678}


class DataError(ValueError):
    """Data that cannot be evaluated as it is; the message says what is wrong and how to fix it."""


def resolve_data_root(data_root: Optional[Union[str, Path]] = None) -> Path:
    """The folder with MNIST/ and binarized_mnist/ (see the module docstring for the search order)."""
    if data_root is not None:
        root = Path(data_root).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"data root {root} does not exist")
        return root
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        root = Path(env).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"${DATA_ROOT_ENV}={env} is not a folder")
        return root
    for candidate in (Path.cwd().parent / "shared" / "data", Path(__file__).resolve().parents[2] / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        "no data root found: pass --data-root DIR (or set $RAISE_EVAL_DATA) to a folder holding MNIST/raw/*.gz "
        "and binarized_mnist/*.amat; the embedded dataset 'digits' needs none"
    )


def read_idx(path: Union[str, Path]) -> np.ndarray:
    """Read an idx file (optionally gzipped), the format of the original MNIST files."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path} is not an idx file (bad magic number)")
    dtypes = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in dtypes:
        raise DataError(f"{path}: unknown idx element type 0x{raw[2]:02x}")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=dtypes[raw[2]], offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise DataError(f"{path}: header says {shape} but the file holds {data.size} values (truncated?)")
    return data.reshape(shape)


def mnist_images(split: str, data_root: Optional[Union[str, Path]] = None) -> np.ndarray:
    """MNIST grey levels (0..255) of a split, shaped (N, 28, 28), uint8."""
    _check_split("mnist", split)
    path = resolve_data_root(data_root) / "MNIST" / "raw" / _MNIST_FILES[split][0]
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the data root must hold MNIST/raw/{_MNIST_FILES[split][0]}")
    return read_idx(path)


def binarize_stochastic(grey: np.ndarray, generator: torch.Generator) -> Tensor:
    """x ~ Bernoulli(grey / 255) pixel by pixel, as float32 (N, D)."""
    p = torch.from_numpy(grey.reshape(len(grey), -1).astype(np.float32) / 255.0)
    return (torch.rand(p.shape, generator=generator) < p).float()


def pool_and_threshold(grey: np.ndarray, factor: int = 2, threshold: float = 0.5) -> Tensor:
    """Average-pool (N, H, W) grey levels by `factor` and threshold intensities (0..1) at `threshold`."""
    n, h, w = grey.shape
    pooled = grey.reshape(n, h // factor, factor, w // factor, factor).astype(np.float64).mean((2, 4)) / 255.0
    return torch.from_numpy((pooled >= threshold).reshape(n, -1).astype(np.float32))


def read_amat(path: Union[str, Path]) -> Tensor:
    """Read a Larochelle .amat file (rows of space-separated 0/1) as float32 (N, D)."""
    rows = np.loadtxt(path, dtype=np.float32)
    return torch.from_numpy(np.atleast_2d(rows))


def load_dataset(
    name: str,
    split: str = "test",
    data_root: Optional[Union[str, Path]] = None,
) -> Tensor:
    """A named dataset split (see the module docstring) as float32 (N, D) with values 0 and 1."""
    if name not in DATASETS:
        raise DataError(
            f"unknown dataset {name!r}; named datasets are {', '.join(DATASETS)} (or give a .npy/.npz file)"
        )
    _check_split(name, split)
    if name == "digits":
        with np.load(_PACKAGE_DATA / "digits.npz") as z:
            return torch.from_numpy(z["images"][z[f"{split}_index"]].astype(np.float32))
    if name == "mnist":
        g = torch.Generator().manual_seed(MNIST_BINARIZATION_SEEDS[split])
        return binarize_stochastic(mnist_images(split, data_root), g)
    if name == "mnist14":
        return pool_and_threshold(mnist_images(split, data_root))
    path = resolve_data_root(data_root) / "binarized_mnist" / f"binarized_mnist_{split}.amat"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the data root must hold binarized_mnist/{path.name}")
    return read_amat(path)


def load_array_file(path: Union[str, Path]) -> Tensor:
    """Binary vectors from a .npy file, or a .npz with a single array (or one named data, x or images)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"data file {path} does not exist")
    if path.suffix in (".npy", ".npz"):
        try:
            check_magic(path, path.suffix[1:])
        except ValueError as e:
            raise DataError(str(e)) from None
    if path.suffix == ".npy":
        array = np.load(path, allow_pickle=False)
    elif path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            keys = list(z.keys())
            chosen = next((k for k in ("data", "x", "images") if k in keys), keys[0] if len(keys) == 1 else None)
            if chosen is None:
                raise DataError(f"{path} holds arrays {keys}; name the data array 'data' (or save a single array)")
            array = z[chosen]
    else:
        raise DataError(f"{path}: data files must be .npy or .npz (got {path.suffix or 'no extension'})")
    if array.dtype == np.bool_:
        array = array.astype(np.uint8)
    if not np.issubdtype(array.dtype, np.number):
        raise DataError(f"{path} holds {array.dtype} values; expected numbers 0 and 1")
    return torch.from_numpy(np.ascontiguousarray(array).astype(np.float32, copy=False))


def check_binary(data: Tensor, n_visible: Optional[int] = None, what: str = "data") -> Tensor:
    """Check that `data` is (N, n_visible) with every value 0 or 1; return it. Raises DataError saying how to fix."""
    if data.dim() != 2:
        raise DataError(f"{what} must be a matrix of binary vectors shaped (N, D); got shape {tuple(data.shape)}")
    if data.shape[0] == 0:
        raise DataError(f"{what} is empty")
    if n_visible is not None and data.shape[1] != n_visible:
        hint = {196: " (14x14 images: try --data mnist14)", 784: " (28x28 images: try mnist or binarized_mnist)"}
        raise DataError(
            f"the model has {n_visible} visible units but {what} has {data.shape[1]} columns"
            f"{hint.get(data.shape[1], '')}; the data must match the model's input size"
        )
    if not torch.is_floating_point(data):
        data = data.float()
    bad = (data != 0) & (data != 1)
    if bool(bad.any()):
        row, col = (int(i) for i in torch.nonzero(bad)[0])
        raise DataError(
            f"{what} must be binary (0 or 1) but holds {int(bad.sum())} other values, e.g. {data[row, col].item():g} "
            f"at row {row}, column {col}; binarize it first (e.g. threshold at 0.5, or sample Bernoulli(x))"
        )
    return data


def _check_split(name: str, split: str) -> None:
    if split not in DATASETS[name]:
        raise DataError(f"dataset {name!r} has splits {', '.join(DATASETS[name])}, not {split!r}")
