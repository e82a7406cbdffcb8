"""Checks of data against a layer's states: errors that say where the first bad entry is and how to fix it."""

from __future__ import annotations

import torch
from torch import Tensor


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
