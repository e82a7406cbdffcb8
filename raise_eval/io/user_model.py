"""Load a model from the user's own Python file: `raise-eval bdmc --model FILE.py:FACTORY` (and `raise-eval
evaluate --model`).

The file is loaded explicitly by its path (importlib.util.spec_from_file_location; nothing is searched for on
sys.path), with its own folder first on sys.path while it runs, so that it can import its neighbours, as
`python FILE.py` would. FACTORY is then called with no arguments and must return a directed model: a
`DecoderModel` (raise_eval.models.directed.adapter) or another `DirectedLatentModel` (bdmc), or an `EnergyModel`
(`raise-eval evaluate --model`).

An exception raised by the user's code (while the file is executed or the factory runs, including errors raised
by raise-eval for what the factory asked of it, e.g. a decoder whose output does not fit the likelihood) becomes a
`UserCodeError` naming the user's file, the line of it that was running, and the exception, not a traceback
through raise-eval. So does a SystemExit (sys.exit() in the factory, or a script's top-level argparse parsing
raise-eval's own command line), which would otherwise end raise-eval as if raise-eval had failed. An `EnergyModel`
refusing the energy it was given (tried on a probe batch) is one line: the refusal, which says what is wrong and where
in the energy, and the factory's line that built the model.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Optional

from raise_eval.models import energy as energy_module
from raise_eval.models import energy_check
from raise_eval.models.contracts import declared_family
from raise_eval.models.directed.base import DirectedLatentModel
from raise_eval.models.energy import EnergyModel


class UserCodeError(Exception):
    """The user's model file could not be loaded or its factory failed; the message says where and why."""


VAE_EXAMPLE = "examples/plain_vae_factory.py:make_model"
ENERGY_EXAMPLE = "examples/torchebm_2d_factory.py:make"


def parse_model_spec(spec: str, example: str = VAE_EXAMPLE) -> tuple[Path, str]:
    """'path/to/file.py:factory' -> (path, 'factory'); the factory name is the text after the last colon. `example`:
    the --model value the error shows (a factory of the kind of model the command takes)."""
    file_part, sep, name = spec.rpartition(":")
    if not sep or not file_part or not name.isidentifier():
        raise UserCodeError(
            f"--model {spec!r}: give FILE.py:FACTORY, a Python file and the name of the function in it that returns "
            f"the model (e.g. --model {example})"
        )
    path = Path(file_part).expanduser()
    if path.suffix != ".py":
        raise UserCodeError(f"--model {spec!r}: {path} is not a Python file (.py)")
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise UserCodeError(f"--model {spec!r}: {path} {where}")
    return path, name


def _user_location(exc: BaseException, path: Path) -> str:
    """Where in the user's file the exception was raised: 'FILE, line N, in FUNC: SOURCE' (its innermost frame in
    that file), followed by the innermost frame when that lies elsewhere."""
    resolved = path.resolve()
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == resolved:
        text = (exc.text or "").strip()
        return f"{path}, line {exc.lineno}" + (f": {text}" if text else "")
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if Path(f.filename).resolve() == resolved]
    if not own:
        return str(path)
    frame = own[-1]
    where = f"{path}, line {frame.lineno}, in {frame.name}" + (f": {frame.line.strip()}" if frame.line else "")
    last = frames[-1]
    if last is not frame:
        where += f"\n  (raised in {last.filename}, line {last.lineno}, in {last.name})"
    return where


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit (sys.exit({exc.code!r}))"
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


_SCRIPT_HINT = (
    "your code called sys.exit() (argparse does on a command line it rejects, and a file that parses arguments when "
    "loaded parses raise-eval's own); "
    "code that runs a script (argument parsing, training) belongs under `if __name__ == \"__main__\":`, and a "
    "factory should raise an exception"
)


def _fix_hint(exc: BaseException, where: str) -> str:
    return _SCRIPT_HINT if isinstance(exc, SystemExit) else f"the error is in your {where}; fix it there"


@contextmanager
def _folder_on_path(folder: Path):
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        try:
            sys.path.remove(entry)
        except ValueError:
            pass  # the user's code removed it itself


def load_module(path: Path, checks: tuple[Path, ...] = ()) -> ModuleType:
    """Execute the user's file as a module (registered in sys.modules, as dataclasses and pickle need); a refusal by
    one of `checks` (`ENERGY_CHECKS`) is one line."""
    name = f"raise_eval_user_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserCodeError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _folder_on_path(path.resolve().parent):
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        del sys.modules[name]
        _raise_refusal(e, path, checks, f"loading {path} failed:")
        raise UserCodeError(
            f"loading {path} failed: {_describe(e)}\n  at {_user_location(e, path)}\n"
            f"({_fix_hint(e, 'model file or what it imports')})"
        ) from e
    return module


def load_factory(
    spec: str, example: str = VAE_EXAMPLE, checks: tuple[Path, ...] = ()
) -> tuple[Callable[[], Any], Path]:
    """The factory function named by 'FILE.py:FACTORY' and the file's path; raises UserCodeError (`checks`: see
    `load_module`)."""
    path, name = parse_model_spec(spec, example)
    module = load_module(path, checks)
    factory = getattr(module, name, None)
    if factory is None:
        functions = sorted(
            n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__
        )
        found = f"it defines {', '.join(functions)}" if functions else "it defines no functions"
        raise UserCodeError(f"{path} has no {name!r} ({found}); name the function that returns the model")
    if not callable(factory):
        raise UserCodeError(f"{path}: {name} is a {type(factory).__name__}, not a function returning the model")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        required = [
            p.name
            for p in signature.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        if required:
            raise UserCodeError(
                f"{path}: {name}{signature} is called with no arguments; give its parameters "
                f"({', '.join(required)}) default values"
            )
    return factory, path


# raise-eval's modules that check what a factory builds (an energy tried on its probe batch): a ValueError raised in
# them is a refusal whose message already says what is wrong (and where in the energy), not a crash of raise-eval
ENERGY_CHECKS = tuple(Path(m.__file__).resolve() for m in (energy_module, energy_check))


def _refused_line(exc: BaseException, path: Path, checks: tuple[Path, ...]) -> Optional[traceback.FrameSummary]:
    """The line of the user's file whose call one of `checks` refused (a ValueError raised in one of them), or None
    for any other exception."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not isinstance(exc, ValueError) or not frames or Path(frames[-1].filename).resolve() not in checks:
        return None
    own = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
    return own[-1] if own else None


def _raise_refusal(exc: BaseException, path: Path, checks: tuple[Path, ...], what: str) -> None:
    """Raise a one-line UserCodeError, '<what> ValueError: <message> (refused at FILE, line N, in FUNC)', where `exc`
    is a refusal by one of `checks` of what the user's line built; return for any other exception."""
    refused = _refused_line(exc, path, checks)
    if refused is not None:
        message = " ".join(line.strip() for line in str(exc).strip().splitlines())
        raise UserCodeError(
            f"{what} {type(exc).__name__}: {message} (refused at {path}, line {refused.lineno}, in {refused.name})"
        ) from exc


def _call_factory(
    spec: str, example: str = VAE_EXAMPLE, checks: tuple[Path, ...] = ()
) -> tuple[Any, str, Path]:
    """(FACTORY() of 'FILE.py:FACTORY', the factory's name, the file); raises UserCodeError. A refusal by one of
    `checks` is one line: its message and the user's line that was refused."""
    factory, path = load_factory(spec, example, checks)
    name = spec.rpartition(":")[2]
    try:
        with _folder_on_path(path.resolve().parent):
            model = factory()
    except (Exception, SystemExit) as e:
        _raise_refusal(e, path, checks, f"{name}() in {path} raised")
        raise UserCodeError(
            f"{name}() in {path} raised {_describe(e)}\n  at {_user_location(e, path)}\n({_fix_hint(e, 'model code')})"
        ) from e
    return model, name, path


def build_user_energy(spec: str) -> EnergyModel:
    """Load 'FILE.py:FACTORY', call FACTORY() and check that it returned an `EnergyModel` (whose energy was tried
    when it was built: a broken energy is a UserCodeError naming its file and line); raises UserCodeError."""
    model, name, path = _call_factory(spec, ENERGY_EXAMPLE, ENERGY_CHECKS)
    if declared_family(model) != "energy":
        raise UserCodeError(
            f"{name}() in {path} returned a {type(model).__name__}, not an energy model; wrap your energy: return "
            "EnergyModel(energy, support=..., event_shape=...) (from raise_eval import EnergyModel)"
        )
    return model


def build_user_model(spec: str) -> DirectedLatentModel:
    """Load 'FILE.py:FACTORY', call FACTORY() and check that it returned a directed model; raises UserCodeError."""
    model, name, path = _call_factory(spec)
    if not isinstance(model, DirectedLatentModel):
        what = type(model).__name__
        hint = (
            "wrap your modules: return DecoderModel(decoder, latent_dim=..., likelihood='bernoulli', encoder=...) "
            "(from raise_eval import DecoderModel)"
        )
        raise UserCodeError(f"{name}() in {path} returned a {what}, not a directed model; {hint}")
    return model
