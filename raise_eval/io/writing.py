"""Writing an output whole or not at all (`write_file`, `save_figure`; the JSON documents, the plots, the resume
files and the monitor's history all go through it): into a temporary file in the same folder (a hidden name made
from the file's own, cut to fit the folder's NAME_MAX), flushed to disk, then renamed over the file (os.replace), so
that a reader or a crash sees the old file or the new one, never part of one. When the write fails (a full disk, an
I/O error, a file system gone read-only) the temporary file is removed, the file at the path is left as it was, the
content is written instead to a file in the system's temporary folder (tempfile.gettempdir()) when the caller asks
for it, and `OutputWriteError` says both. What a path may be is `raise_eval.io.outputs.check_output_path`'s.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Optional, Union

from raise_eval.io.outputs import (
    _NOT_A_FILE,
    OutputError,
    OutputWriteError,
    PathLike,
    _cause,
    _create_temporary,
    _name_max,
    _stat_failure,
    is_null_device,
    plot_metadata,
)


def _keep_mode(tmp: Path, target: Path) -> None:
    """Give the written temporary file the mode of the file it replaces (set last: a read-only mode would stop a
    writer that opens the file by its name)."""
    try:
        os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
    except FileNotFoundError:
        pass  # a new file: the umask's mode


def _write_all(f, data: bytes) -> None:
    """Write `data` to the open binary file `f` (one place, so that tests can make it fail part-way)."""
    f.write(data)


def _write_content(path: str, content: Union[bytes, Callable[[str], None]]) -> None:
    if callable(content):
        content(path)
    else:
        with open(path, "wb") as f:
            _write_all(f, content)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # on disk before the rename: a crash leaves the old file or the new one, never an empty one
    finally:
        os.close(fd)


def _failure(e: BaseException, folder: str) -> str:
    """Why a write failed. A full file system is named as such: torch.save reports it as a RuntimeError about
    positions in its zip archive."""
    if isinstance(e, OSError) and e.errno in errno.errorcode:
        return _cause(e)
    try:
        vfs = os.statvfs(folder)
        free = vfs.f_bavail * vfs.f_frsize
    except (OSError, AttributeError):
        free = None
    if free is not None and free < (1 << 20):
        return f"no space left on device: its file system has {free:,} bytes free"
    return _cause(e)


def _keep_elsewhere(content, target: Path) -> tuple[Optional[str], Optional[str]]:
    """Write `content` to a new file in the system's temporary folder: (its path, None) or (None, why not)."""
    folder = tempfile.gettempdir()
    suffix = "-" + target.name
    while len(os.fsencode(suffix)) > _name_max(folder) - 32:
        suffix = suffix[1:]
    try:
        fd, kept = tempfile.mkstemp(prefix="raise-eval-", suffix=suffix, dir=folder)
        os.close(fd)
    except OSError as e:
        return None, f"{folder}: {_cause(e)}"
    try:
        _write_content(kept, content)
    except Exception as e:  # noqa: BLE001 - whatever failed, say it and leave nothing behind
        _remove_quietly(kept)
        return None, f"{kept}: {_failure(e, folder)}"
    return kept, None


def _remove_quietly(path) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def write_file(
    path: PathLike,
    content: Union[str, bytes, Callable[[str], None]],
    *,
    what: str = "the result",
    keep_on_failure: bool = True,
) -> Optional[Path]:
    """Write `content` to `path` whole or not at all (see the module docstring) and return the path written
    (symbolic links followed), or None when `path` is the null device (nothing is written).

    content: text (written as UTF-8), bytes, or a function that writes the whole file at the path it is given
        (e.g. lambda p: torch.save(obj, p)); it may be called twice (the second time to keep the result elsewhere).
    what: what the content is, for the message ('the JSON', 'the plot').
    keep_on_failure: on a failed write, write `content` to a file in the system's temporary folder and name it in
        the error.

    Raises OutputError, before writing, when `path` exists and is not a regular file (a folder, a pipe, a device:
    never replaced), or is a symbolic link loop; OutputWriteError when the write fails (the temporary file removed,
    the file at `path` as it was)."""
    text = content if isinstance(content, str) else None
    data: Union[bytes, Callable[[str], None]] = content.encode("utf-8") if isinstance(content, str) else content
    shown = os.fspath(path)
    try:
        st = os.stat(shown)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"cannot write {shown}: it {_stat_failure(shown, e)}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if is_null_device(shown):
            return None
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else _NOT_A_FILE.get(stat.S_IFMT(st.st_mode), "not a file")
        raise OutputError(f"cannot write {shown}: it is {kind}, which raise-eval never replaces; name a regular file")
    target = Path(os.path.realpath(shown))  # through a symbolic link, as open(path, "w") would write
    existed = st is not None
    tmp: Optional[Path] = None
    try:
        tmp = _create_temporary(target)
        _write_content(str(tmp), data)
        _keep_mode(tmp, target)
        os.replace(tmp, target)
        tmp = None
    except Exception as e:  # noqa: BLE001 - a failed write of any kind: clean up, keep the result, say so
        if tmp is not None:
            _remove_quietly(tmp)
        state = f"{shown} is unchanged" if existed else f"no file was left at {shown}"
        message = f"could not write {shown} ({_failure(e, str(target.parent))}); {state}"
        kept = None
        if keep_on_failure:
            kept, why_not = _keep_elsewhere(data, target)
            if kept is not None:
                message += f"; {what} is kept in {kept}"
            else:
                message += f"; keeping {what} in the temporary folder failed too ({why_not})"
        raise OutputWriteError(message, shown, kept, text) from e
    except BaseException:  # Ctrl-C during the write: no temporary file left behind
        if tmp is not None:
            _remove_quietly(tmp)
        raise
    return target


# matplotlib's formats by suffix: the temporary file's name ends in .tmp, so the format is given explicitly.
_FIGURE_FORMATS = {
    ".png": "png", ".pdf": "pdf", ".svg": "svg", ".jpg": "jpg", ".jpeg": "jpeg", ".eps": "eps", ".ps": "ps",
}  # fmt: skip


def save_figure(fig, path: PathLike, **savefig_kwargs) -> Optional[Path]:
    """fig.savefig to `path` through `write_file` (whole or not at all; kept in the temporary folder on failure),
    marked as raise-eval's (`plot_metadata`); the format from the suffix (PNG when unknown)."""
    fmt = _FIGURE_FORMATS.get(Path(path).suffix.lower(), "png")
    kwargs = {**plot_metadata(path), **savefig_kwargs}
    return write_file(path, lambda p: fig.savefig(p, format=fmt, **kwargs), what="the plot")
