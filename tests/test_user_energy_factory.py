"""A user's energy factory (`raise-eval evaluate --model FILE.py:FACTORY`) whose `EnergyModel(...)` refuses the energy:
one line naming the user's file and the line that built the model, not raise-eval's own file as where it was raised."""

from __future__ import annotations

import textwrap

import pytest

from raise_eval.io.user_model import UserCodeError, build_user_energy

FACTORY = """
import torch
from raise_eval import EnergyModel
from raise_eval.models import categorical


class Energy(torch.nn.Module):
    def forward(self, x):
        return {energy}


def make():
    return EnergyModel(Energy(), support={support}, event_shape=(4,))  # line 13
"""


@pytest.mark.parametrize(
    "energy, support, message",
    [
        ("0.5 * (x ** 2).sum(-1, keepdim=True)", "'real'", "shaped (3,), got (3, 1)"),
        ("0.5 * (x.detach() ** 2).sum(-1)", "'real'", "not differentiable in its input"),
        ("(x ** 2).sum(-1) * float('nan')", "'binary'", "the energy is NaN or -inf"),
        ("(x ** 2).sum((-1, -2))", "'categorical'", "support=categorical(q)"),
        ("x.sum(-1) @ torch.zeros(7)", "'spin'", "the energy raised RuntimeError"),
    ],
    ids=["shape", "no-gradient", "NaN", "support", "exception"],
)
def test_a_refused_energy_is_one_line_naming_the_user_s_line(tmp_path, energy, support, message):
    path = tmp_path / "my_ebm.py"
    path.write_text(textwrap.dedent(FACTORY.format(energy=energy, support=support)))
    with pytest.raises(UserCodeError) as info:
        build_user_energy(f"{path}:make")
    text = str(info.value)
    assert "\n" not in text, text
    assert text.startswith(f"make() in {path} raised ValueError: ") and message in text, text
    assert text.endswith(f"(refused at {path}, line 13, in make)"), text
    assert "energy_check.py" not in text and "raise_eval" not in text.replace("from raise_eval", ""), text


def test_an_exception_of_the_user_s_own_code_keeps_its_traceback_lines(tmp_path):
    path = tmp_path / "my_ebm.py"
    path.write_text("import torch\n\n\ndef make():\n    return torch.load('no_such_weights.pt')  # line 5\n")
    with pytest.raises(UserCodeError) as info:
        build_user_energy(f"{path}:make")
    text = str(info.value)
    assert f"make() in {path} raised FileNotFoundError" in text and f"at {path}, line 5, in make" in text, text
    assert "(the error is in your model code; fix it there)" in text, text


def test_an_energy_refused_while_the_file_loads_is_one_line_too(tmp_path):
    path = tmp_path / "my_ebm.py"
    path.write_text(
        "import torch\nfrom raise_eval import EnergyModel\n\n"
        "MODEL = EnergyModel(lambda x: (x ** 2).sum(-1, keepdim=True), support='real', event_shape=(4,))\n\n\n"
        "def make():\n    return MODEL\n"
    )
    with pytest.raises(UserCodeError) as info:
        build_user_energy(f"{path}:make")
    text = str(info.value)
    assert "\n" not in text, text
    assert text.startswith(f"loading {path} failed: ValueError: the energy must return one energy per example"), text
    assert text.endswith(f"(refused at {path}, line 4, in <module>)"), text


IMAGE_FACTORY = """
import torch
from raise_eval import EnergyModel


class Energy(torch.nn.Module):
    def forward(self, x):  # x (N, 1, 4, 4)
        return 0.5 * (x ** 2).flatten(1).sum(-1)


def make():
    return EnergyModel(Energy(), support=("real", 0.0, 1.0), event_shape=(1, 4, 4))
"""


@pytest.mark.parametrize(
    "shape, hint",
    [
        ((5, 4, 4, 1), "numpy.moveaxis(x, -1, 1)"),
        ((5, 4, 4), "x.reshape(len(x), 1, 4, 4)"),
        ((5, 1, 4, 5), ""),
    ],
    ids=["channels-last", "no-channel-axis", "other-size"],
)
def test_a_data_file_of_another_example_shape_names_the_file_and_the_shape_to_save(tmp_path, capsys, shape, hint):
    import numpy as np

    from raise_eval.cli import main

    factory = tmp_path / "images.py"
    factory.write_text(textwrap.dedent(IMAGE_FACTORY))
    data = tmp_path / "test.npy"
    np.save(data, np.full(shape, 0.5, dtype=np.float32))
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", f"{factory}:make", "--data", str(data), "--no-progress", "--threads", "1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert f"--data {data} holds an array shaped {shape}; the model's examples are shaped (1, 4, 4): save them " \
        "shaped (N, 1, 4, 4)" in err, err
    assert hint in err, err


@pytest.mark.parametrize(
    "support, values, hint",
    [
        ("binary", [0.0, 255.0], "8-bit images of two levels? x / 255"),
        ("spin", [0.0, 255.0], "8-bit images of two levels? 2 * x / 255 - 1"),
        ("binary", [0.0, 0.25, 0.5, 0.75, 1.0, 0.1], "grey levels? binarize them as the model's training data were"),
    ],
    ids=["binary-0-255", "spin-0-255", "grey-levels"],
)
def test_two_state_data_of_another_encoding_are_told_how_to_convert_them(support, values, hint):
    import torch

    from raise_eval import EnergyModel

    model = EnergyModel(lambda x: x.sum(-1), support=support, event_shape=(2,))
    data = torch.tensor(values).repeat(2).reshape(-1, 2)
    with pytest.raises(ValueError, match=f"test data must hold {support} values") as info:
        model.state_from_data(data, "test data")
    assert hint in str(info.value) and "\n" not in str(info.value), str(info.value)
