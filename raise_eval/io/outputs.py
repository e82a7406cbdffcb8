"""Output files that cost no one their work: what a command will write is checked before any computation.

`check_outputs` refuses, with one line naming the option, the path and the fix:

- an output that is an input of the run (the checkpoint, the data, ...), however it is spelled: paths are compared
  resolved, and with os.path.samefile when both exist (symbolic and hard links). Never allowed;
- two outputs naming the same file;
- an existing file that raise-eval did not write (`written_by_raise_eval`), unless `overwrite` is true. A resume
  file is never replaced, since the run reads it back: a foreign one is to be deleted or named otherwise. A
  "protected" output (a trained checkpoint, a training history: hours of work whoever wrote them) is replaced only
  with `overwrite`.

raise-eval marks what it writes: every JSON document carries "tool": "raise-eval" (`raise_eval.io.results.dump_json`;
documents written before the mark are recognized by their keys), every plot the metadata of `plot_metadata`, and
resume files have their own format keys (`raise_eval.runtime.resume`; a certified run's JSON,
`raise_eval.certification`).

What a path may be (`check_output_path`, called by `check_outputs` and, before any work, by the command line): a
regular file or nothing yet, in an existing folder where raise-eval can create files, with names the file system
accepts. A folder, a named pipe (FIFO), a device, a socket, a symbolic link loop or a name longer than the file
system allows (NAME_MAX, usually 255 bytes) is refused with one line naming the option and the fix: raise-eval
replaces its outputs whole (below), which would put a regular file where the pipe or device was. The null device
(`/dev/null`, or a link to it) is read as "no output": nothing is written there and the caller says so.

How every output is written, whole or not at all, is `raise_eval.io.writing`'s (`write_file`, `save_figure`).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from raise_eval._version import __version__

PathLike = Union[str, os.PathLike]
TOOL = "raise-eval"  # the "tool" key of every JSON document raise-eval writes (`raise_eval.io.results.dump_json`)
# The "format" of a resume file `raise_eval.runtime.resume` writes, and those it reads: format 1 (finished shards
# only) is format 2 without a shard in progress.
RESUME_FORMAT = 2
RESUME_READABLE_FORMATS = (1, 2)
KINDS = ("json", "plot", "resume", "protected")
# The top-level keys of the JSON documents raise-eval wrote before they carried "tool": evaluate, a certified run,
# bdmc.
_UNMARKED_DOCUMENTS = (
    {"complete", "log_z", "log_likelihood", "settings"},
    {"verdict", "history", "tolerance"},
    {"settings", "simulated"},
)
_PLOT_MARK = TOOL.encode()
_MARK_WINDOW = 1 << 16  # bytes read at each end of a plot: PNG, SVG and JPEG mark the head, PDF its trailer
_LARGEST_DOCUMENT = 1 << 28  # raise-eval's JSON documents are far smaller; a larger file is not one of them


class OutputError(ValueError):
    """An output path that would cost work (an input, a duplicate, a file raise-eval did not write) or that cannot
    hold a file (a folder, a pipe, a device, a symbolic link loop, a name too long); refused before any work."""


class OutputWriteError(OSError):
    """A result that could not be written (a full disk, an I/O error, ...): nothing partial was left at `path`.

    `kept` is the file in the system's temporary folder that holds the result instead (None when it could not be
    kept there either, or was not asked to be); `text` is the content when it is text (JSON, CSV), for the caller
    to print whole when `kept` is None. The message says all of this in one line."""

    def __init__(self, message: str, path: str, kept: Optional[str] = None, text: Optional[str] = None):
        super().__init__(message)
        self.path, self.kept, self.text = path, kept, text

    def __str__(self) -> str:
        return self.args[0]


class OutputWarning(UserWarning):
    """A save that failed while a run went on (a resume file, a certified run's progress file): the run keeps its
    results in memory; what the file lacks is said in the message."""


@dataclass(frozen=True)
class Output:
    """A file a command writes: `option` names it for the user (e.g. '--json'), `kind` is one of KINDS."""

    option: str
    path: Optional[PathLike]
    kind: str


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether two paths name one file: os.path.samefile when both exist (links, other spellings), else the
    resolved paths."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    # os.path.realpath, not Path.resolve: a symbolic link loop stays a path instead of raising RuntimeError.
    return os.path.realpath(a) == os.path.realpath(b)


def plot_metadata(path: PathLike) -> dict:
    """Keyword arguments of matplotlib's savefig that mark a plot as raise-eval's (see `written_by_raise_eval`)."""
    mark = f"{TOOL} {__version__}"
    suffix = Path(path).suffix.lower()
    if suffix in (".jpg", ".jpeg"):
        return {"pil_kwargs": {"comment": mark.encode()}}
    if suffix == ".png":
        return {"metadata": {"Software": mark}}
    if suffix in (".pdf", ".svg", ".ps", ".eps"):
        return {"metadata": {"Creator": mark}}
    return {}


def written_by_raise_eval(path: PathLike, kind: str) -> bool:
    """Whether the existing file `path` is a `kind` file that raise-eval wrote: a JSON document, a plot, or a
    resume file (a raise-eval resume file, or a certified run's JSON)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    path = Path(path)
    # a protected output counts as foreign whoever wrote it; anything but a regular file is never opened (reading a
    # named pipe or a device would block or never end)
    if kind == "protected" or not path.is_file():
        return False
    if kind == "plot":
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(_MARK_WINDOW)
            f.seek(max(0, size - _MARK_WINDOW))
            tail = f.read()
        return _PLOT_MARK in head or _PLOT_MARK in tail
    doc = _json_document(path)
    if kind == "json":
        return isinstance(doc, dict) and (
            doc.get("tool") == TOOL or any(keys <= doc.keys() for keys in _UNMARKED_DOCUMENTS)
        )
    if isinstance(doc, dict):  # a certified run's resume file (raise_eval.certify)
        return {"format", "fingerprint", "history"} <= doc.keys()
    return _is_resume_file(path)


def check_outputs(
    outputs: Iterable[Output], inputs: Iterable[tuple[str, Optional[PathLike]]] = (), *, overwrite: bool = False
) -> None:
    """Refuse (OutputError, one line) an output that is an input, two outputs naming one file, or an existing file
    that raise-eval did not write unless `overwrite`, and every path `check_output_path` refuses (see the module
    docstring). `inputs` are (what, path) pairs, e.g. ("the checkpoint", "model.pt") or ("--data", "test.npy"); None
    paths, and outputs on the null device (nothing is written there), are skipped."""
    outputs = [o for o in outputs if o.path]
    for out in outputs:
        if out.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {out.kind!r}")
    outputs = [o for o in outputs if check_output_path(o.path, o.option)]  # the null device: nothing written
    inputs = [(what, p) for what, p in inputs if p]
    for i, out in enumerate(outputs):
        for what, source in inputs:
            if same_file(out.path, source):
                raise OutputError(
                    f"{out.option} {out.path} is {what} ({source}), an input of this run: writing it would destroy "
                    "it; name another file (nothing was computed)"
                )
        for other in outputs[:i]:
            if same_file(out.path, other.path):
                raise OutputError(
                    f"{other.option} and {out.option} both name {out.path}: one would overwrite the other; give them "
                    "different files (nothing was computed)"
                )
        path = Path(out.path)
        if not path.is_file() or written_by_raise_eval(path, out.kind):
            continue
        from raise_eval.models.io.files import describe

        if out.kind == "resume":
            raise OutputError(
                f"{out.option} {out.path} exists and is not a raise-eval resume file ({describe(path)}): the run "
                "would read it back and then replace it; name another file, or delete it to start over (nothing "
                "was computed)"
            )
        if not overwrite:
            why = "exists" if out.kind == "protected" else "exists and was not written by raise-eval"
            raise OutputError(
                f"{out.option} {out.path} {why} ({describe(path)}); name another file, or pass --overwrite to replace "
                "it (nothing was computed)"
            )


# ------------------------------------------------------------------ what a path may be

_DEFAULT_NAME_MAX = 255  # bytes per name on Linux, macOS and Windows file systems
_DEFAULT_PATH_MAX = 4096
_NOT_A_FILE = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def is_null_device(path: PathLike) -> bool:
    """Whether `path` is the null device (os.devnull, a link to it, or a device node of the same kind)."""
    try:
        st, null = os.stat(path), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev


def check_output_path(path: PathLike, option: str = "the output") -> bool:
    """Check, before any work, that `path` can take an output of `option` (e.g. '--json'): absent or a regular file
    (through symbolic links), in an existing folder where raise-eval can create files, its names within the file
    system's limits. Returns False when `path` is the null device (the caller writes nothing and says so), True
    otherwise; raises OutputError (one line naming the option, the path and the fix) for anything else."""
    text = os.fspath(path)
    shown = f"{option} {text}"
    if text == "-":  # the convention for standard output, which carries the table: never a file named '-'
        raise OutputError(
            f"{shown}: raise-eval writes its outputs to files, not to standard output (which carries the table); give "
            "a file name, e.g. result.json, or ./- for a file named '-' (nothing was computed)"
        )
    _check_name_lengths(text, shown)
    try:
        st = os.stat(text)  # follows symbolic links, as writing would
    except FileNotFoundError:
        st = None  # absent, or a link to a file not there yet: written where the link points
    except OSError as e:
        raise OutputError(f"{shown} {_stat_failure(text, e)} (nothing was computed)") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if is_null_device(text):
            return False
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{shown} is a folder; give a file name (nothing was computed)")
        what = _NOT_A_FILE.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise OutputError(
            f"{shown} is {what}: raise-eval writes its outputs as regular files, replacing what is at the path, which "
            "would remove it; name a regular file (nothing was computed)"
        )
    target = os.path.realpath(text)
    _check_name_lengths(target, shown)  # a link may point to a longer name
    # The folder the file will be written in (the link's target's, for a link), as the user wrote it when it is no link.
    folder = os.path.dirname(target) if os.path.islink(text) else (os.path.dirname(text) or ".")
    try:
        folder_mode = os.stat(folder).st_mode
    except FileNotFoundError:
        raise OutputError(
            f"{shown}: the folder {folder} does not exist; create it first (nothing was computed)"
        ) from None
    except OSError as e:
        raise OutputError(f"{shown}: its folder {folder} {_stat_failure(folder, e)} (nothing was computed)") from None
    if not stat.S_ISDIR(folder_mode):
        raise OutputError(f"{shown}: {folder} is not a folder (nothing was computed)")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{shown}: the folder {folder} is not writable (nothing was computed)")
    # What os.access cannot tell (/proc, read-only mounts, root): create the very temporary file the write will use.
    try:
        probe = _create_temporary(Path(target))
        os.remove(probe)
    except OSError as e:
        raise OutputError(
            f"{shown}: cannot write in the folder {folder} ({_cause(e)}); choose another folder (nothing was computed)"
        ) from None
    return True


def _name_max(folder: str) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no such folder, or a platform without pathconf
        return _DEFAULT_NAME_MAX


# The temporary file of a write (`raise_eval.io.writing.write_file`), here so that `check_output_path` can probe
# with the very file the write will create.
def _temporary_name(target: Path) -> Path:
    """A hidden name next to `target` for its temporary file: '.<name>.<pid>.<random>.tmp', the name cut so that
    the whole fits the folder's NAME_MAX (a legal 255-byte name must still be writable)."""
    tag = f".{os.getpid()}.{secrets.token_hex(4)}.tmp"
    limit = _name_max(str(target.parent))
    stem = "." + target.name
    while len(os.fsencode(stem + tag)) > limit:
        stem = stem[:-1]
    return target.parent / (stem + tag)


def _create_temporary(target: Path) -> Path:
    """Create (exclusively) an empty temporary file for `target`, with the mode the umask gives a new file."""
    for _ in range(10):
        tmp = _temporary_name(target)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "could not find a free temporary name", str(target.parent))


def _existing_folder(path: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def _check_name_lengths(path: str, shown: str) -> None:
    limit = _name_max(_existing_folder(path))
    for name in Path(path).parts:
        size = len(os.fsencode(name))
        if size > limit:
            raise OutputError(
                f"{_short(shown)}: the name {_short(name, 30)!r} is {size} bytes long, and the file system allows at "
                f"most {limit} bytes per name; choose a shorter name (nothing was computed)"
            )
    size = len(os.fsencode(os.path.abspath(path)))
    if size > _DEFAULT_PATH_MAX:
        raise OutputError(
            f"{_short(shown)}: the path is {size} bytes long, more than the {_DEFAULT_PATH_MAX} the system allows; "
            "choose a shorter path (nothing was computed)"
        )


def _stat_failure(path: str, e: OSError) -> str:
    """Why `path` cannot be looked at, as a clause after its name: a link loop, a name too long, a file where a
    folder is expected, no permission."""
    if e.errno == errno.ELOOP:
        from raise_eval.models.io.files import link_chain  # only now: importing the models imports torch

        return f"is a symbolic link loop ({link_chain(path)}); remove the links or name another file"
    if e.errno == errno.ENAMETOOLONG:
        return "has a name longer than the file system allows; choose a shorter name"
    if e.errno == errno.ENOTDIR:
        return "has a file where a folder should be; name a file in a folder"
    return f"cannot be looked at ({_cause(e)}); name another file"


def _cause(e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno in errno.errorcode:
        return f"{e.strerror or os.strerror(e.errno)} [{errno.errorcode[e.errno]}]"
    first = str(e).strip().splitlines()
    return f"{type(e).__name__}: {first[0][:200]}" if first else type(e).__name__


def _short(text: str, width: int = 60) -> str:
    """`text` cut in the middle to `width` characters, for messages about very long names."""
    return text if len(text) <= width else f"{text[: width // 2 - 2]}...{text[-(width // 2 - 1):]}"


def _json_document(path: Path):
    """The parsed JSON of `path`, or None when it is not JSON (or too large to be one of raise-eval's)."""
    if path.stat().st_size > _LARGEST_DOCUMENT:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


def _is_resume_file(path: Path) -> bool:
    """Whether `path` is a resume file of `raise_eval.runtime.resume` (its tensors memory-mapped, not read)."""
    import torch

    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - whatever it is, it is not a resume file
        return False
    return isinstance(loaded, dict) and loaded.get("format") in RESUME_READABLE_FORMATS and "shards" in loaded


__all__ = [
    "KINDS",
    "Output",
    "OutputError",
    "OutputWarning",
    "OutputWriteError",
    "check_output_path",
    "check_outputs",
    "is_null_device",
    "plot_metadata",
    "same_file",
    "written_by_raise_eval",
]
