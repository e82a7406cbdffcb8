"""What `raise-eval evaluate --model FILE.py:FACTORY` reads: the user's `EnergyModel` (its energy tried when built;
moved to --device and --dtype, and tried again there), the test examples of --data and the training examples of
--train-data (for the base), .npy/.npz files shaped (N, *event_shape) or (N, prod(event_shape)), checked against the
model's support before any work."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.io.arrays import load_array_file
from raise_eval.io.user_model import build_user_energy
from raise_eval.models.energy_check import check_data_energies


@dataclass
class EnergyInputs:
    """The model (on the device), the test and training examples (None without --train-data), the files read."""

    model: Any
    test: Tensor
    train: Optional[Tensor]
    files: list[tuple[str, Optional[str]]]


def load_energy_inputs(inputs) -> EnergyInputs:
    """Build the model of `inputs.model` and read `inputs.data` and `inputs.train_data` (an `io.inputs.InputSettings`
    with a model); ValueError naming the file when its examples do not fit the model."""
    model = build_user_energy(inputs.model)
    device, dtype = torch.device(inputs.device), getattr(torch, inputs.dtype)
    if device != model.device or dtype != model.dtype:  # moved as bdmc moves a decoder; the copy is tried again
        model = _moved(model, device, dtype, inputs.dtype)
    test = _examples(model, inputs.data, "--data")
    train = None if inputs.train_data is None else _examples(model, inputs.train_data, "--train-data")
    files = [("the --model file", inputs.model.rpartition(":")[0]), ("the --data file", inputs.data),
             ("the --train-data file", inputs.train_data)]  # fmt: skip
    return EnergyInputs(model, test, train, files)


def _moved(model, device: torch.device, dtype: torch.dtype, dtype_name: str):
    """The model moved to --device and --dtype; where the energy fails only in the new dtype (a function whose own
    tensors stay in the model's dtype), the error says so and names --dtype, not only the user's line."""
    try:
        return model.to(device=device, dtype=dtype)
    except ValueError as error:
        if dtype == model.dtype or model.device != device:
            raise
        own = str(model.dtype).replace("torch.", "")
        said = str(error).replace("; fix it there)", ")")  # the user's line is not the cause: the dtype is
        raise ValueError(f"{said}; the model was built in {own} and fails in {dtype_name} (--dtype, float32 by "
                         f"default): give --dtype {own}, or make the energy follow its input's dtype") from None


def _examples(model, path: str, flag: str) -> Tensor:
    """The examples of a file, reshaped to (N, *event_shape) when stored flat, checked against the support."""
    x = load_array_file(path, keep_float64=True)
    if x.dim() == 2 and len(model.event_shape) > 1 and x.shape[1] == model.n_visible:
        x = x.reshape(x.shape[0], *model.event_shape)
    shape = ", ".join(map(str, model.event_shape))
    if x.dim() >= 1 and x.shape[0] == 0:
        raise ValueError(f"{flag} {path} holds no examples (an array shaped {tuple(x.shape)}): save at least one, "
                         f"shaped (N, {shape})")  # fmt: skip
    if x.dim() != 1 + len(model.event_shape) or tuple(x.shape[1:]) != model.event_shape:
        raise ValueError(f"{flag} {path} holds an array shaped {tuple(x.shape)}; the model's examples are shaped "
                         f"{model.event_shape}: save them shaped (N, {shape}){_shape_hint(model, x)}")  # fmt: skip
    if not model.support.discrete:
        x = x.to(model.dtype)
    # refused here, naming the file, before any work: values off the support, then energies that are not finite
    state = model.state_from_data(x, f"{flag} {path}")
    check_data_energies(model, state, f"{flag} {path}")
    return x


def _shape_hint(model, x: Tensor) -> str:
    """How examples of another shape could be what the model takes (else nothing): one-hot codes, a single example,
    the same values with the axes in another order (channels last) or without an axis of size 1. Never reshaped here:
    only the user knows which layout the file holds."""
    event, given = model.event_shape, tuple(x.shape[1:])
    if model.support.kind == "categorical" and given == model.input_shape:
        return " (integer codes: x.argmax(-1) of one-hot examples)"
    if tuple(x.shape) == event:
        return " (one example: save x[None])"
    if x.dim() < 2 or math.prod(given) != model.n_visible:
        return ""
    if len(given) == len(event) and sorted(given) == sorted(event) and given[-1] == event[0]:
        return " (channels last? numpy.moveaxis(x, -1, 1) puts them first)"
    shape = ", ".join(map(str, event))
    return f" (if each example's {model.n_visible} values are in the model's order: x.reshape(len(x), {shape}))"
