"""Settings declared once: each field of a protocol's settings value says its type, bound or choices, default, help
text and command-line flag in one `setting(...)` declaration, and is checked once, when the value is built.

A settings class is a frozen dataclass made with `@settings_class`; building one validates every field (and the
class's own `_validate` hook for what ties fields together) and normalizes what has several spellings ('8GB' ->
bytes, '30m' -> seconds, a list -> a tuple). Code that receives a settings value trusts it. A changed copy is
`value.replace(steps=4000)` (validated again), as TensorFlow Probability's `copy(**overrides)`.

Errors are `SettingsError`s that name fields, e.g. "steps must be an integer of at least 1, got 0". The command
line generates its parser from the same declarations (`raise_eval.cli.options`) and renders the same error with
flags: "--steps must be an integer of at least 1, got 0". A message that names several fields writes each as
`{field}` in its template.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
import operator
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from raise_eval.units import MAX_COUNT, format_size, parse_count, parse_duration, parse_size  # noqa: F401
from raise_eval.seeds import LARGEST_OFFSET

# torch.Generator.manual_seed takes -2^63 .. 2^64 - 1, and a run seeds its streams with seed .. seed + 6
# (`raise_eval.seeds`).
SEED_OFFSETS = LARGEST_OFFSET
SEED_RANGE = (-(2**63), 2**64 - 1 - SEED_OFFSETS)

# What a field changes, as its declaration's `numbers` says: "kept", what a resume file keeps (finished shards, the
# log f(v) estimates) and so the results; "result", only the results made from what is kept (e.g. the control
# variate's coefficient). None: not the numbers (threads, memory bounds, progress bars). The resume files'
# fingerprints are drawn from these declarations (`number_fields`).
NUMBERS = ("kept", "result")

KINDS = ("count", "counts", "number", "choice", "size", "duration", "flag", "seed", "path", "threads", "text", "any")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # a declaration's cli_default when the command takes the API's default

# The names of every settings class's declared fields (`settings_class` adds them): the words a message's
# template may write as `{field}`.
DECLARED_FIELDS: set[str] = set()


def render_names(template: str, names: Optional[dict[str, str]] = None) -> str:
    """`template` with each `{field}` written as `names[field]` (the field's own name when it has none there): the
    same message in the API's words or, with the command line's flags, in the command's. A `Named` message is
    rendered from its template."""
    names = names or {}
    template = getattr(template, "template", template)

    def field(match: re.Match) -> str:
        word = match.group(1)
        if word in names:
            return names[word]
        # Only a declared field is a placeholder: a user's text in the message (a path such as runs/{date}/x.npz)
        # keeps its braces.
        return word if word in DECLARED_FIELDS else match.group(0)

    return re.sub(r"\{(\w+)\}", field, template)


class Named(str):
    """A message that names settings: it reads with the fields' names (`str`), and keeps its template (`{field}`
    for each) so that a renderer can write the command line's flags instead (`render_names(message, flags)`)."""

    template: str

    def __new__(cls, template: str) -> Named:
        template = getattr(template, "template", template)
        obj = super().__new__(cls, render_names(template))
        obj.template = template
        return obj


class SettingsError(ValueError):
    """A setting (or a combination of settings) that cannot run. `template` names fields as `{field}`; `str()` fills
    them with the field names, `render(names)` with other names (the command line's flags).

    fields: the fields the message names, the first being the one to change.
    """

    def __init__(self, template: str, fields: tuple[str, ...] = ()):
        self.template = template
        self.fields = tuple(fields) or tuple(w for w in re.findall(r"\{(\w+)\}", template) if w in DECLARED_FIELDS)
        super().__init__(self.render({}))

    def render(self, names: Optional[dict[str, str]] = None) -> str:
        # the fields it names are placeholders even when no settings class declares them (a core function's
        # argument, e.g. num_steps, checked by `check_count`)
        return render_names(self.template, {**{f: f for f in self.fields}, **(names or {})})


@dataclass(frozen=True)
class Setting:
    """The declaration of one field (see `setting`)."""

    kind: str
    default: Any
    help: str
    flag: Optional[str] = None
    short: tuple[str, ...] = ()
    least: Optional[float] = None
    most: Optional[float] = None
    strictly: bool = False  # least and most are open bounds
    choices: tuple[str, ...] = ()
    words: tuple[str, ...] = ()  # for a number: words it also takes, e.g. ('optimal',)
    none: Optional[str] = None  # what None means; None: the field cannot be None
    metavar: Optional[str] = None
    group: Optional[str] = None
    why: str = ""  # why the bound, e.g. 'a standard error needs two'
    cli_default: Any = UNSET  # where the command differs from the API (progress bars)
    check: Optional[Callable[[Any], Any]] = None  # kind 'any': returns the value or raises SettingsError
    numbers: Optional[str] = None  # whether the field changes the numbers: one of NUMBERS, or None (it does not)
    name: str = ""  # filled in by `settings_class`

    @property
    def default_text(self) -> str:
        default = self.default if self.cli_default is UNSET else self.cli_default
        if default is None:
            return self.none or "none"
        if self.kind == "counts":
            return " ".join(str(v) for v in default)
        if isinstance(default, bool):
            return "on" if default else "off"
        if self.kind == "size" and isinstance(default, int):
            return f"{default:,} bytes"
        return str(default)


def setting(default: Any, help: str, *, kind: str, **declaration) -> Any:
    """A dataclass field declared with its kind, default and help (and `flag`, `least`, `most`, `choices`, ...: see
    `Setting`). Use inside a `@settings_class`."""
    if kind not in KINDS:
        raise TypeError(f"unknown kind of setting {kind!r}")
    if declaration.get("numbers") not in (None, *NUMBERS):
        raise TypeError(f"numbers must be one of {', '.join(NUMBERS)} or None, got {declaration['numbers']!r}")
    spec = Setting(kind=kind, default=default, help=help, **declaration)
    factory_default = isinstance(default, (list, dict, set))
    if factory_default:
        raise TypeError("a setting's default must be immutable (use a tuple)")
    return dataclasses.field(default=default, metadata={"setting": spec})


THREADS_HELP = (
    "torch threads (default: auto, the cores no other process is using right now; results are bit-identical for "
    "the same seed, device, dtype and thread count)"
)


def progress_setting() -> Any:
    """The `progress` field every protocol has: tqdm bars on stderr, off in the API, on in the command."""
    return setting(
        False, "tqdm progress bars (stderr)", kind="flag", flag="--no-progress", cli_default=True, group="run"
    )


def threads_setting() -> Any:
    """The `threads` field every protocol has: torch threads for the call ('auto': the idle cores)."""
    return setting(
        "auto", THREADS_HELP, kind="threads", none="torch's setting", flag="--threads", metavar="N", group="run"
    )


def declarations(cls_or_value) -> Iterator[Setting]:
    """The `Setting` of every declared field of a settings class (or value), in order."""
    for f in dataclasses.fields(cls_or_value):
        spec = f.metadata.get("setting")
        if spec is not None:
            yield spec


def number_fields(cls_or_value, *, kept_only: bool = False) -> tuple[str, ...]:
    """The names of the fields whose declaration says they change the numbers (`Setting.numbers`), in order; with
    `kept_only`, those that change what a resume file keeps."""
    wanted = ("kept",) if kept_only else NUMBERS
    return tuple(spec.name for spec in declarations(cls_or_value) if spec.numbers in wanted)


def settings_class(cls):
    """Make `cls` a frozen settings dataclass: every `setting(...)` field is checked and normalized when a value is
    built, then `cls._validate(self)` (if defined) checks what ties fields together."""

    def __post_init__(self) -> None:
        for spec in declarations(self):
            object.__setattr__(self, spec.name, normalize(spec, getattr(self, spec.name)))
        hook = getattr(self, "_validate", None)
        if hook is not None:
            hook()

    def replace(self, **changes):
        """A copy with `changes`, validated again (an unknown field: SettingsError naming it)."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise SettingsError(f"{type(self).__name__} has no setting {', '.join(unknown)}", ())
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The fields as plain values (nested settings as dicts), for reports and fingerprints."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.as_dict() if hasattr(value, "as_dict") and dataclasses.is_dataclass(value) else value
        return out

    # Set before the dataclass is made: its __init__ calls __post_init__ only if the class has one by then.
    cls.__post_init__ = __post_init__
    cls.replace = replace
    cls.as_dict = as_dict
    cls = dataclass(frozen=True)(cls)
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("setting")
        if spec is not None:
            object.__setattr__(spec, "name", f.name)
            DECLARED_FIELDS.add(f.name)
    return cls


def with_overrides(cls, settings, overrides: dict[str, Any]):
    """`settings` (default: `cls()`) with the keyword `overrides` of an API function; an unknown keyword is a
    TypeError, as Python's own for a misspelled argument."""
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise TypeError(f"unexpected keyword argument{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
                        f"(the settings are {cls.__name__}'s fields)")  # fmt: skip
    base = cls() if settings is None else settings
    return base.replace(**overrides) if overrides else base


def build(cls, values: dict[str, Any]):
    """`cls(**values)`, with an unknown key reported as a SettingsError naming it (not a TypeError)."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise SettingsError(
            f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} ({cls.__name__} takes "
            f"{', '.join(sorted(known))})",
            (),
        )
    return cls(**values)


# ----------------------------------------------------------------------------------------------------- checks
def _fail(spec: Setting, what: str, value: Any) -> SettingsError:
    shown = repr(value)
    return SettingsError(f"{{{spec.name}}} must be {what}, got {shown}", (spec.name,))


def _bounds_text(spec: Setting, noun: str) -> str:
    least, most = spec.least, spec.most
    if spec.strictly and least is not None and most is not None:
        return f"{noun} strictly between {least:g} and {most:g}" + (f" ({spec.why})" if spec.why else "")
    parts = []
    if least is not None:
        parts.append(f"{'above' if spec.strictly else 'of at least'} {least:g}")
    if most is not None and (spec.kind != "count" or most < MAX_COUNT):
        parts.append(
            f"{'below' if spec.strictly else 'at most'} {most:,}" if spec.kind == "count" else f"at most {most:g}"
        )
    text = f"{noun} {' and '.join(parts)}" if parts else noun
    return text + (f" ({spec.why})" if spec.why else "")


def _in_bounds(spec: Setting, x: float) -> bool:
    if spec.least is not None and (x <= spec.least if spec.strictly else x < spec.least):
        return False
    return not (spec.most is not None and (x >= spec.most if spec.strictly else x > spec.most))


def _count(spec: Setting, value: Any) -> int:
    if isinstance(value, bool):
        raise _fail(spec, _bounds_text(spec, "an integer"), value)
    if isinstance(value, str):  # as typed: digits, or a whole number in scientific notation (1e6)
        try:
            value = parse_count(value)
        except ValueError:
            raise _fail(spec, _bounds_text(spec, "an integer"), value) from None
    try:
        n = operator.index(value)
    except TypeError:
        raise _fail(spec, _bounds_text(spec, "an integer"), value) from None
    most = MAX_COUNT if spec.most is None else spec.most
    if n > MAX_COUNT:
        raise SettingsError(
            f"{{{spec.name}}} must be an integer of at most {most:,} (a count beyond any run), got {_short(n)}",
            (spec.name,),
        )
    if not _in_bounds(spec, n):
        raise _fail(spec, _bounds_text(spec, "an integer"), n)
    return n


def _short(n: int) -> str:
    """An integer as typed, or in scientific notation when it is too long to read (10^400: '1e+400')."""
    text = str(n)
    return text if len(text) <= 24 else f"{decimal.Decimal(n):.3e}"


def _from_text(spec: Setting, value: Any, parse: Callable[[str], Any], expected: str) -> Any:
    """A value typed as text (the command line's), read by `parse`; other values pass through."""
    if not isinstance(value, str):
        return value
    try:
        return parse(value)
    except ValueError:
        raise _fail(spec, expected, value) from None


def _text_form(spec: Setting, value: Any, parse: Callable[[str], Any]) -> Any:
    """A size or a duration written as text ('8GB', '30m'), read by `parse` whose error says the accepted forms."""
    try:
        return parse(value)
    except ValueError as e:
        raise SettingsError(f"{{{spec.name}}}: {e}", (spec.name,)) from None


def _real(spec: Setting, value: Any, expected: str) -> float:
    """A finite real number (Python, NumPy or torch scalar) within the declared bounds."""
    if isinstance(value, bool):
        raise _fail(spec, expected, value)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise _fail(spec, expected, value) from None
    if not math.isfinite(x) or not _in_bounds(spec, x):
        raise _fail(spec, expected, value)
    return value if isinstance(value, (int, float)) else x


def _seed(spec: Setting, value: Any) -> int:
    value = _from_text(spec, value, parse_count, _expected(spec))
    if isinstance(value, bool):
        raise _fail(spec, _expected(spec), value)
    try:
        n = operator.index(value)
    except TypeError:
        raise _fail(spec, _expected(spec), value) from None
    if not SEED_RANGE[0] <= n <= SEED_RANGE[1]:
        raise _fail(spec, _expected(spec), n)
    return n


def _threads(spec: Setting, value: Any):
    # None (leave torch's setting) is the API's third choice; a command line can only write text.
    expected = "'auto' or a positive integer" if isinstance(value, str) else "'auto', a positive integer or None"
    if value == "auto":
        return value
    value = _from_text(spec, value, parse_count, expected)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(spec, expected, value)
    if value > _MOST_THREADS:  # torch's thread count is a C int; no machine has this many cores
        raise _fail(spec, f"a thread count of at most {_MOST_THREADS}", value)
    return value


_MOST_THREADS = 1 << 16


def _counts(spec: Setting, value: Any) -> tuple[int, ...]:
    values = [value] if isinstance(value, (int, str)) and not isinstance(value, bool) else value
    try:
        values = tuple(values)
    except TypeError:
        raise _fail(spec, _expected(spec), value) from None
    if not values:
        raise _fail(spec, _expected(spec), value)
    return tuple(_count(spec, v) for v in values)


def _number(spec: Setting, value: Any):
    if isinstance(value, str) and value in spec.words:
        return value
    value = _from_text(spec, value, float, _expected(spec))
    return _real(spec, value, _expected(spec))


def _choice(spec: Setting, value: Any) -> str:
    if not isinstance(value, str) or value not in spec.choices:
        raise _fail(spec, _expected(spec), value)
    return value


def _size(spec: Setting, value: Any) -> int:
    return _text_form(spec, value, parse_size) if isinstance(value, str) else _count(spec, value)


def _duration(spec: Setting, value: Any) -> float:
    if isinstance(value, str):
        return _text_form(spec, value, parse_duration)
    expected = "a positive number of seconds (or a duration such as '30m')"
    seconds = float(_real(spec, value, expected))
    if seconds <= 0:
        raise _fail(spec, expected, value)
    return seconds


def _typed(kind: type, expected: str, convert: Callable[[Any], Any] = lambda v: v):
    def read(spec: Setting, value: Any):
        if not isinstance(value, kind) or (kind is str and not value):
            raise _fail(spec, expected, value)
        return convert(value)

    return read


_READERS: dict[str, Callable[[Setting, Any], Any]] = {
    "count": _count,
    "counts": _counts,
    "number": _number,
    "choice": _choice,
    "size": _size,
    "duration": _duration,
    "flag": _typed(bool, "True or False"),
    "seed": _seed,
    "path": _typed((str, os.PathLike), "a file name", os.fspath),
    "threads": _threads,
    "text": _typed(str, "a string"),
    "any": lambda spec, value: value if spec.check is None else spec.check(value),
}


def normalize(spec: Setting, value: Any) -> Any:
    """The checked, normalized value of one field (SettingsError naming the field when it cannot be)."""
    if value is None:
        if spec.none is None:  # None is a value only where the declaration says what it means
            raise _fail(spec, _expected(spec), value)
        return None
    return _READERS[spec.kind](spec, value)


def check_count(name: str, value: Any, least: int = 1) -> int:
    """The guard of a core function on an integer argument, for callers that do not go through a settings value
    (e.g. `ais(path, betas, num_chains)` called directly): SettingsError naming the argument. Text is refused here:
    only settings values read what was typed."""
    spec = Setting("count", None, "", least=least, name=name)
    if isinstance(value, str):
        raise _fail(spec, _bounds_text(spec, "an integer"), value)
    return _count(spec, value)


def _expected(spec: Setting) -> str:
    if spec.kind == "number":
        words = " or ".join(repr(w) for w in spec.words)
        text = _bounds_text(spec, "a finite number")
        return f"{text}{' or ' + words if words else ''}"
    if spec.kind == "counts":
        return _bounds_text(spec, "one or more integers")
    if spec.kind == "seed":
        return (
            f"an integer from {SEED_RANGE[0]} to {SEED_RANGE[1]} (the run seeds generators with seed to seed + "
            f"{SEED_OFFSETS})"
        )
    if spec.kind == "count":
        return _bounds_text(spec, "an integer")
    if spec.kind == "path":
        return "a file name"
    if spec.kind == "choice":
        return f"one of {', '.join(spec.choices)}"
    if spec.kind == "duration":
        return "a positive number of seconds (or a duration such as '30m')"
    return f"a valid {spec.kind}"


__all__ = [
    "MAX_COUNT",
    "Named",
    "SEED_RANGE",
    "Setting",
    "SettingsError",
    "build",
    "check_count",
    "declarations",
    "format_size",
    "normalize",
    "number_fields",
    "parse_count",
    "parse_duration",
    "parse_size",
    "render_names",
    "setting",
    "settings_class",
]
