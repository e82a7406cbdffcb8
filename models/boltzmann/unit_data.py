"""Checks of data against a layer's states (and of binary data, `check_binary`): errors that say where the first bad
entry is and how to fix it. Here, not in raise_eval.io, because the core (RAISE's check of its test data) uses them."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


class DataError(ValueError):
    """Data that cannot be evaluated as it is; the message says what is wrong and how to fix it."""


class UnitDataError(ValueError):
    """Data that are not states of a layer (e.g. a 2 in spin data); the message says how to fix them."""


def _first_bad(bad: Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(bad)[0])


def _where(index: tuple[int, ...]) -> str:
    return f"row {index[0]}, column {index[1]}" if len(index) == 2 else f"index {index}"


def _refuse_other_values(bad: Tensor, x: Tensor, must: str) -> None:
    """Raise UnitDataError when any entry of `x` is marked `bad`: "`must` holds N other values, e.g. V at WHERE"."""
    if bool(bad.any()):
        i = _first_bad(bad)
        raise UnitDataError(f"{must} holds {int(bad.sum())} other values, e.g. {x[i].item():g} at {_where(i)}")


def _check_matrix(data: Tensor, columns: int, what: str, unit_words: str) -> Tensor:
    if data.dim() != 2:
        raise UnitDataError(
            f"{what} must be a matrix shaped (N, {columns}) of {unit_words}; got shape {tuple(data.shape)}"
        )
    if data.shape[0] == 0:
        raise UnitDataError(f"{what} is empty")
    if data.shape[1] != columns:
        raise UnitDataError(
            f"the model's layer has {columns} units but {what} has {data.shape[1]} columns; the data must match the "
            "model's input size"
        )
    return data if torch.is_floating_point(data) else data.double()


def check_binary(data: Tensor, n_visible: Optional[int] = None, what: str = "data") -> Tensor:
    """Check that `data` is (N, n_visible) with every value 0 or 1; return it. Raises DataError saying how to fix."""
    if data.dim() != 2:
        raise DataError(f"{what} must be a matrix of binary vectors shaped (N, D); got shape {tuple(data.shape)}")
    if data.shape[0] == 0:
        raise DataError(f"{what} is empty")
    if n_visible is not None and data.shape[1] != n_visible:
        # The hint names data of the model's width (the data given has the wrong one).
        hint = {64: " (8x8 images: try --data digits)", 196: " (14x14 images: try --data mnist14)",
                784: " (28x28 images: try --data mnist or binarized_mnist)"}  # fmt: skip
        raise DataError(
            f"the model has {n_visible} visible units but {what} has {data.shape[1]} columns; the data must match the "
            f"model's input size{hint.get(n_visible, '')}"
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
