"""The `raise-eval` command line: a module per subcommand (evaluate.py, bdmc.py, trajectory.py), their options
generated from the settings' declarations (options.py), what they share (common.py). Only this package turns field
names into flags and errors into exit statuses; it may import everything else, and nothing imports it.

To add a subcommand: a module with `add_parser(sub)` (its options from the declarations of the settings it builds,
`parser.set_defaults(run=..., names=...)`) and `run(args) -> exit status`, listed in SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys
import warnings

import torch

from raise_eval._version import __version__
from raise_eval.annealing import NonFiniteLogWeightError
from raise_eval.cli import bdmc, evaluate, trajectory
from raise_eval.cli.options import attach_dash_values, die
from raise_eval.io.datasets import DataError
from raise_eval.io.outputs import OutputWarning, OutputWriteError
from raise_eval.io.user_model import UserCodeError
from raise_eval.models import native
from raise_eval.runtime.distributed import shutdown as shutdown_process_group
from raise_eval.settings import SettingsError, render_names

SUBCOMMANDS = (evaluate, bdmc, trajectory)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raise-eval",
        description="Log-likelihoods of deep generative models that can be trusted: AIS, RAISE and BDMC.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"raise-eval {__version__} (torch {torch.__version__}, Python {sys.version.split()[0]})",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in SUBCOMMANDS:
        command.add_parser(sub)
    # No abbreviated options: argparse would take --ais-chain for --ais-chains silently (and a shortened option could
    # come to mean another one as options are added); an unknown option is refused with the nearest one (`_parse`).
    for command_parser in {id(p): p for p in sub.choices.values()}.values():
        command_parser.allow_abbrev = False
    return parser


def _on_sigterm(signum, frame) -> None:
    """SIGTERM (a scheduler's stop, `kill`) is handled as Ctrl-C: the table of what finished is printed and the JSON
    and resume file keep it. It goes through the current Ctrl-C handler, so a save in progress finishes first."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    raise KeyboardInterrupt  # Ctrl-C ignored (a background job): SIGTERM still stops, keeping what finished


_default_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """raise-eval's own warnings (a save that failed while the run went on) as one line, without a source line, the
    settings it names written as flags."""
    if issubclass(category, OutputWarning):
        text = message.args[0] if isinstance(message, Warning) and message.args else message
        names = {**bdmc.FLAGS, **evaluate.FLAGS}
        print(f"raise-eval: warning: {render_names(text, names)}", file=sys.stderr if file is None else file)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def _parse(parser: argparse.ArgumentParser, argv: list) -> argparse.Namespace:
    """`parser.parse_args(argv)`, but an unknown option is refused by its command's parser (its usage, not the
    top level's) with the command's nearest options: `--stpes` -> did you mean --steps?"""
    args, extras = parser.parse_known_args(argv)
    if not extras:
        return args
    command = next(a for a in parser._subparsers._group_actions if isinstance(a, argparse._SubParsersAction))
    sub = command.choices[args.command]
    known = [o for action in sub._actions for o in action.option_strings if o.startswith("--")]
    hints = []
    for extra in extras:
        close = difflib.get_close_matches(extra.split("=", 1)[0], known, n=1, cutoff=0.7)
        hints.append(f"{extra} (did you mean {close[0]}?)" if close and extra.startswith("-") else extra)
    sub.error(f"unrecognized arguments: {' '.join(hints)}")


def main(argv=None) -> int:
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    parser = build_parser()
    args = _parse(parser, attach_dash_values(parser, list(sys.argv[1:] if argv is None else argv)))
    warnings.showwarning = _show_warning
    # A C kernel compiled (not found in the cache) says so on stderr, as the progress bars do (rank 0 of torchrun's)
    announce = vars(args).get("progress", True) and os.environ.get("RANK", "0") in ("", "0")
    try:
        with native.announcing_compiles(announce):
            code = args.run(args)
        if args.command == "evaluate" and code in (0, evaluate.EXIT_OPEN):
            shutdown_process_group()  # a finished run (not Ctrl-C): leave a torchrun process group cleanly
        return code
    except SettingsError as e:
        die(e.render(args.names))
    except (DataError, FileNotFoundError, ValueError, NotImplementedError, UserCodeError) as e:
        die(str(e))
    except NonFiniteLogWeightError as e:  # where no partial report is kept (trajectory, a timing probe)
        print(f"raise-eval: error: {e}", file=sys.stderr)
        return 1
    except OutputWriteError as e:  # a result computed but not written: where it is kept, or the JSON itself
        print(f"raise-eval: error: {e}", file=sys.stderr)
        if e.kept is None and e.text is not None:
            print(e.text, end="")
        return 1
    except KeyboardInterrupt:
        # Ctrl-C outside the stages that keep partial results (loading, bdmc): a clean exit, no traceback.
        print("raise-eval: interrupted", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
