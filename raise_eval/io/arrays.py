"""Binary vectors from files and tensors: `load_array_file` reads a .npy array or a .npz holding one array (or one
named `data`, `x` or `images`), never unpickling; `check_binary` checks a matrix of 0s and 1s against the model's
width; `DataError` says what is wrong with data and how to fix it."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Union

import numpy as np
import torch
from torch import Tensor

from raise_eval.models.boltzmann.unit_data import DataError, check_binary  # noqa: F401 (their home: the core uses them)
from raise_eval.models.io.files import EMPTY_ZIP_MAGIC, check_magic, why_unusable


def load_array_file(path: Union[str, Path], *, keep_float64: bool = False) -> Tensor:
    """Vectors from a .npy file, or a .npz with a single array (or one named data, x or images), as float32 (float64
    arrays stay float64 with `keep_float64`: real-valued data for Gaussian units keep their precision)."""
    path = Path(path)
    unusable = why_unusable(path)
    if unusable == "does not exist":
        raise FileNotFoundError(f"data file {path} does not exist")
    if unusable is not None:  # a link loop, a broken link, a folder, a device: never opened
        raise DataError(f"data file {path} {unusable}; give a .npy or .npz file")
    if path.suffix == ".npz" and _is_empty_zip(path):
        raise DataError(
            f"{path} is an empty .npz archive (it holds no arrays); save the vectors in it, e.g. "
            "numpy.savez(path, data=x) with x shaped (N, n_visible)"
        )
    if path.suffix in (".npy", ".npz"):
        try:
            check_magic(path, path.suffix[1:])
        except ValueError as e:
            raise DataError(str(e)) from None
    try:
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
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error) as e:
        if isinstance(e, DataError):
            raise
        if "allow_pickle" not in str(e):  # numpy's words name no file: a truncated .npy, a damaged .npz member
            detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(
                f"{path} cannot be read: it is truncated or damaged ({detail}); write it again "
                f"({'numpy.save' if path.suffix == '.npy' else 'numpy.savez'})"
            ) from None
        # An object array is read only by unpickling, which can run any code: never done for a data file.
        save = "numpy.save(path, " if path.suffix == ".npy" else "numpy.savez(path, data="
        raise DataError(
            f"{path} holds a NumPy object array (dtype=object: Python objects such as lists or None, not numbers), "
            f"which raise-eval does not unpickle; convert it to numbers and save it again, e.g. "
            f"{save}numpy.asarray(x, dtype=numpy.uint8))"
        ) from None
    if array.dtype == np.bool_:
        array = array.astype(np.uint8)
    if not np.issubdtype(array.dtype, np.number):
        raise DataError(f"{path} holds {array.dtype} values; expected numbers 0 and 1")
    if np.iscomplexobj(array):  # a cast to float would drop the imaginary parts with only numpy's ComplexWarning
        raise DataError(f"{path} holds complex numbers ({array.dtype}); the data must be real: save x.real if the "
                        "imaginary parts are zero")  # fmt: skip
    dtype = np.float64 if keep_float64 and array.dtype == np.float64 else np.float32
    return torch.from_numpy(np.ascontiguousarray(array).astype(dtype, copy=False))


def _is_empty_zip(path: Path) -> bool:
    """Whether `path` is a zip archive with no members (what numpy.savez writes when given no arrays)."""
    with open(path, "rb") as f:
        return f.read(len(EMPTY_ZIP_MAGIC)) == EMPTY_ZIP_MAGIC
