"""The command line's options, generated from the settings' declarations (`raise_eval.settings`): each declared
field with a flag becomes one option whose help, metavar and default text come from its declaration. The parser
hands the text on as typed; the settings read it (a count may be written 1e6) and check it, once, when built, and
their errors name fields, which `SettingsError.render` writes as the flags the user typed."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Iterable, Optional

from raise_eval.settings import UNSET, Setting, SettingsError, build, declarations


def _help(spec: Setting) -> str:
    text = spec.help
    if spec.kind == "flag" and spec.cli_default is True:  # a --no-X option
        return text.replace("%", "%%") + " are shown unless this is given"
    default = spec.default_text
    if spec.kind == "flag" or (spec.default is None and spec.none is None):  # a switch, or required
        return text.replace("%", "%%")
    if "(default" in text:  # the help states its default in its own words
        return text.replace("%", "%%")
    return f"{text} (default: {default})".replace("%", "%%")


def add_options(parser: argparse.ArgumentParser, cls, *, exclude: Iterable[str] = (), groups: Optional[dict] = None,
                descriptions: Optional[dict[str, str]] = None) -> None:  # fmt: skip
    """Add an option for every declared field of `cls` that has a flag (not in `exclude`), in argparse groups by
    the declarations' `group` (`groups` keeps the groups made so far, so that classes share them)."""
    groups = {} if groups is None else groups
    descriptions = descriptions or {}
    for spec in declarations(cls):
        if spec.flag is None or spec.name in exclude:
            continue
        target = parser
        if spec.group:
            if spec.group not in groups:
                groups[spec.group] = parser.add_argument_group(spec.group, descriptions.get(spec.group))
            target = groups[spec.group]
        if not spec.flag.startswith("-"):  # a positional argument
            nargs = "?" if spec.none is not None else None
            target.add_argument(spec.name, metavar=spec.metavar or spec.name.upper(), nargs=nargs, help=_help(spec),
                                default=argparse.SUPPRESS)  # fmt: skip
            continue
        kw: dict[str, Any] = {"dest": spec.name, "default": argparse.SUPPRESS, "help": _help(spec)}
        if spec.kind == "flag":
            kw["action"] = "store_false" if spec.cli_default is True else "store_true"
        else:  # the text as typed: the settings read it (a count may be written 1e6) and check it
            kw["metavar"] = spec.metavar or ("{" + ",".join(spec.choices) + "}" if spec.choices else None)
            if spec.kind == "counts":
                kw["nargs"] = "+"
        target.add_argument(spec.flag, *spec.short, **kw)


def add_subcommand(sub, name: str, *, help: str, description: str, epilog: str, options, run,
                   descriptions: Optional[dict[str, str]] = None) -> argparse.ArgumentParser:  # fmt: skip
    """A subcommand whose options are the declarations of `options`, a list of settings classes or (class, fields to
    leave out) pairs; `run(args)` runs it, and its errors name the options' flags."""
    parser = sub.add_parser(name, help=help, description=description, epilog=epilog,
                            formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    groups: dict = {}
    classes = [entry if isinstance(entry, tuple) else (entry, ()) for entry in options]
    for cls, exclude in classes:
        add_options(parser, cls, exclude=exclude, groups=groups, descriptions=descriptions)
    parser.set_defaults(run=run, names=flags(*(cls for cls, _ in classes)))
    return parser


def flags(*classes) -> dict[str, str]:
    """{field: flag} of the declared fields of `classes` that have an option."""
    out = {}
    for cls in classes:
        for spec in declarations(cls):
            if spec.flag is not None:
                out[spec.name] = spec.flag if spec.flag.startswith("-") else (spec.metavar or spec.name.upper())
    return out


def given(args: argparse.Namespace, cls) -> dict[str, Any]:
    """The fields of `cls` given on the command line (with the command's own defaults where it differs)."""
    values = vars(args)
    out = {}
    for spec in declarations(cls):
        if spec.name in values:
            out[spec.name] = values[spec.name]
        elif spec.flag is not None and spec.cli_default is not UNSET:
            out[spec.name] = spec.cli_default
    return out


def settings_from(args: argparse.Namespace, cls, **extra):
    """`cls` built from the options given (SettingsError naming fields when a value cannot be)."""
    return build(cls, {**given(args, cls), **extra})


def die(message: str) -> None:
    print(f"raise-eval: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def note(message: str) -> None:
    print(f"raise-eval: note: {message}", file=sys.stderr)


def fail(error: SettingsError, names: dict[str, str]) -> None:
    """Exit 2 with `error` written in the command's words."""
    die(error.render(names))


# A value that starts with '-' but is not a plain negative number ('-1GB', '-5m', '-1e3'): argparse takes it for an
# option and says only "expected one argument".
_DASH_VALUE = re.compile(r"-\.?\d")
# Options whose values may start with '-': an alphabet's symbols begin with the gap ('--alphabet -ACGT').
_SYMBOL_OPTIONS = ("--alphabet",)


def attach_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--max-memory -1GB` read as `--max-memory=-1GB`, for every option that takes one value, so that the option's
    own check says what is wrong with the value; and `--alphabet -ACGT` as `--alphabet=-ACGT` (any value after it
    that starts with a single '-' and is not an option)."""
    takes_value, options = set(), set()
    parsers = [parser]
    while parsers:
        for action in parsers.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            else:
                options.update(action.option_strings)
                if action.option_strings and action.nargs is None:
                    takes_value.update(action.option_strings)
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--":  # what follows is positional
            return out + argv[i:]
        symbols = argv[i] in _SYMBOL_OPTIONS and i + 1 < len(argv) and argv[i + 1][:1] == "-" \
            and not argv[i + 1].startswith("--") and argv[i + 1] not in options  # fmt: skip
        if symbols or (argv[i] in takes_value and i + 1 < len(argv) and _DASH_VALUE.match(argv[i + 1])):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out
