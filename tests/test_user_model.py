"""Loading the user's model file: explicit by path, its neighbours importable, and every error reported as the
user's, naming their file and line."""

import sys
import textwrap

import pytest

from raise_eval.models import DecoderModel
from raise_eval.io.user_model import UserCodeError, build_user_model, parse_model_spec

GOOD = """
    import torch
    from torch import nn
    from raise_eval import DecoderModel

    def make_model():
        torch.manual_seed(0)
        return DecoderModel(nn.Linear(2, 6), latent_dim=2, likelihood="bernoulli")
"""


def write(folder, name, source):
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def test_a_factory_returning_a_decoder_model(tmp_path):
    path = write(tmp_path, "my_model.py", GOOD)
    model = build_user_model(f"{path}:make_model")
    assert isinstance(model, DecoderModel) and model.data_dim == 6
    assert str(tmp_path) not in sys.path  # the file's folder is on sys.path only while its code runs


def test_the_file_can_import_its_neighbours_and_find_files_beside_it(tmp_path):
    write(tmp_path, "architecture.py", "from torch import nn\ndef decoder():\n    return nn.Linear(3, 4)\n")
    (tmp_path / "weights.txt").write_text("3")
    path = write(
        tmp_path,
        "factory.py",
        """
        from pathlib import Path
        from raise_eval import DecoderModel
        from architecture import decoder

        def make():
            latent = int((Path(__file__).parent / "weights.txt").read_text())
            return DecoderModel(decoder(), latent_dim=latent)
        """,
    )
    assert build_user_model(f"{path}:make").latent_dim == 3


def test_a_factory_that_raises_names_the_users_file_and_line(tmp_path):
    path = write(
        tmp_path,
        "broken.py",
        """
        import torch

        def make_model():
            state = {"w": torch.zeros(2)}
            return state["decoder.weight"]  # line 6
        """,
    )
    with pytest.raises(UserCodeError) as info:
        build_user_model(f"{path}:make_model")
    message = str(info.value)
    assert f"{path}, line 6, in make_model" in message
    assert "KeyError: 'decoder.weight'" in message and 'state["decoder.weight"]' in message
    assert "raise_eval" not in message.split("\n")[1]  # the location is the user's line, not raise-eval's


def test_an_error_deeper_down_names_the_users_line_and_where_it_was_raised(tmp_path):
    path = write(
        tmp_path,
        "wrong_size.py",
        """
        from torch import nn
        from raise_eval import DecoderModel

        def make_model():
            return DecoderModel(nn.Linear(2, 7), latent_dim=2, likelihood="gaussian")  # line 6
        """,
    )
    with pytest.raises(UserCodeError) as info:
        build_user_model(f"{path}:make_model")
    message = str(info.value)
    assert f"{path}, line 6, in make_model" in message and "multiple of 2" in message
    assert "(raised in" in message and "adapter.py" in message


def test_errors_while_loading_the_file(tmp_path):
    syntax = write(tmp_path, "syntax.py", "def make_model(:\n    pass\n")
    with pytest.raises(UserCodeError, match=rf"loading {syntax} failed: SyntaxError.*\n  at {syntax}, line 1"):
        build_user_model(f"{syntax}:make_model")
    importing = write(tmp_path, "importing.py", "import numpy\nimport no_such_module_here\n")
    with pytest.raises(UserCodeError, match=rf"ModuleNotFoundError.*\n  at {importing}, line 2"):
        build_user_model(f"{importing}:make_model")


def test_what_the_factory_must_be(tmp_path):
    path = write(
        tmp_path,
        "odd.py",
        """
        from torch import nn
        VALUE = 3

        def needs_arguments(path):
            return None

        def returns_a_module():
            return nn.Linear(2, 3)
        """,
    )
    with pytest.raises(UserCodeError, match="has no 'make_model' .it defines needs_arguments, returns_a_module"):
        build_user_model(f"{path}:make_model")
    with pytest.raises(UserCodeError, match="VALUE is a int, not a function"):
        build_user_model(f"{path}:VALUE")
    with pytest.raises(UserCodeError, match=r"called with no arguments; give its parameters \(path\) default values"):
        build_user_model(f"{path}:needs_arguments")
    with pytest.raises(UserCodeError, match="returned a Linear, not a directed model; wrap your modules"):
        build_user_model(f"{path}:returns_a_module")


def test_sys_exit_in_the_factory_is_reported_as_the_users(tmp_path):
    """sys.exit() is a SystemExit, not an Exception: uncaught, it would end raise-eval as if raise-eval had failed."""
    path = write(
        tmp_path,
        "exits.py",
        """
        import sys

        def make_model():
            sys.exit("bad config")  # line 5
        """,
    )
    with pytest.raises(UserCodeError) as info:
        build_user_model(f"{path}:make_model")
    message = str(info.value)
    assert f"make_model() in {path} raised SystemExit (sys.exit('bad config'))" in message
    assert f"at {path}, line 5, in make_model" in message and 'if __name__ == "__main__":' in message


def test_a_script_parsing_arguments_when_loaded_is_reported_as_the_users(tmp_path, monkeypatch, capsys):
    """A training script's top-level argparse parses raise-eval's own command line and exits (status 2)."""
    path = write(
        tmp_path,
        "train.py",
        """
        import argparse

        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int, default=10)
        args = parser.parse_args()  # line 6

        def make_model():
            pass
        """,
    )
    monkeypatch.setattr(sys, "argv", ["raise-eval", "bdmc", "--model", f"{path}:make_model", "--steps", "100"])
    with pytest.raises(UserCodeError) as info:
        build_user_model(f"{path}:make_model")
    message = str(info.value)
    assert f"loading {path} failed: SystemExit (sys.exit(2))" in message
    assert f"at {path}, line 6, in <module>" in message and "argparse" in message
    assert 'belongs under `if __name__ == "__main__":`' in message
    assert "unrecognized arguments" in capsys.readouterr().err  # argparse's own message, before it exits


def test_model_specs():
    with pytest.raises(UserCodeError, match="give FILE.py:FACTORY"):
        parse_model_spec("model.py")
    with pytest.raises(UserCodeError, match="not a Python file"):
        parse_model_spec("model.txt:make")
    with pytest.raises(UserCodeError, match="does not exist"):
        parse_model_spec("no/such/file.py:make")
