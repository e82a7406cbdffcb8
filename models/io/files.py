"""What a file actually is, for one-line errors when a checkpoint or data file is not what its name says."""

from __future__ import annotations

import errno
import os
import pickletools
import stat
import zipfile
from pathlib import Path
from typing import Optional

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"  # a zip archive with no members is only its end record (e.g. numpy.savez(path))
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the first object torch.save's legacy (pre-1.6) format pickles
_SPECIAL = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def link_chain(path, limit: int = 8) -> str:
    """'a -> b -> a': the symbolic links followed from `path` until one repeats (a loop) or `limit` links."""
    chain, current, seen = [os.fspath(path)], os.fspath(path), set()
    for _ in range(limit):
        seen.add(os.path.abspath(current))
        try:
            target = os.readlink(current)
        except OSError:
            break
        chain.append(target)
        current = os.path.join(os.path.dirname(current), target)
        if os.path.abspath(current) in seen:
            return " -> ".join(chain)
    return " -> ".join(chain) + (" -> ..." if os.path.islink(current) else "")


def why_unusable(path) -> Optional[str]:
    """Why `path` cannot be read as a file, as a clause after its name ('does not exist', 'is a symbolic link loop
    (a -> b -> a)', 'is a broken symbolic link to x', 'is a folder', ...), or None for a regular file."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"is a symbolic link loop ({link_chain(path)})"
        if e.errno == errno.ENAMETOOLONG:
            return "has a name longer than the file system allows"
        if e.errno == errno.EACCES:
            return "cannot be reached (permission denied on a folder of its path)"
        if e.errno == errno.ENOTDIR:
            return "does not exist (a part of its path is a file, not a folder)"
        if os.path.islink(path):
            return f"is a broken symbolic link ({link_chain(path)}, which does not exist)"
        return "does not exist"
    if stat.S_ISREG(st.st_mode):
        return None
    return f"is {_special(path, st)}, not a file"


def _special(path: str, st: os.stat_result) -> str:
    what = _SPECIAL.get(stat.S_IFMT(st.st_mode), "not a regular file")
    if os.path.islink(path):
        return f"a symbolic link to {os.path.realpath(path)}, {what}"
    return what


def describe(path: Path) -> str:
    """A few words on what `path` holds: empty, a text file (with its first characters), a zip archive, a device
    (never read: a pipe would block, /dev/zero never ends), ..."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        return _special(os.fspath(path), st)
    size = st.st_size
    if size == 0:
        return "an empty file (0 bytes)"
    with open(path, "rb") as f:
        head = f.read(256)
    if head.startswith(ZIP_MAGIC):
        if not zipfile.is_zipfile(path):
            return f"a zip archive of {size} bytes, truncated or corrupt"
        kind = zip_kind(path)
        if kind == "npz":
            return f"a NumPy .npz archive of {size} bytes (numpy.savez)"
        if kind == "pt":
            return f"a file of {size} bytes written by torch.save"
        return f"a zip archive of {size} bytes"
    if head[:1] == b"\x80":
        return pickle_kind(path, size)
    if head.startswith(EMPTY_ZIP_MAGIC):
        return "an empty zip archive (no arrays in it; numpy.savez(path) with no arrays writes one)"
    if head.startswith(NPY_MAGIC):
        return f"a NumPy .npy array file of {size} bytes"
    if head.startswith(b"MATLAB"):
        return "a MATLAB .mat file"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return f"binary data of {size} bytes"
    if any(ord(c) < 32 and c not in "\t\n\r\f" for c in text):  # control characters: valid UTF-8, but not text
        return f"binary data of {size} bytes"
    first = text.strip().splitlines()[0][:40] if text.strip() else ""
    return f"a text file of {size} bytes starting {first!r}"


def zip_kind(path: Path) -> str:
    """'npz' (only .npy members, as numpy.savez writes), 'pt' (torch.save's archive: a folder with data.pkl) or
    'zip' (anything else) for a readable zip archive."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    if names and all(n.endswith(".npy") and "/" not in n for n in names):
        return "npz"
    if any(n.endswith("/data.pkl") for n in names):
        return "pt"
    return "zip"


def pickle_kind(path: Path, size: int) -> str:
    """What a file starting with a pickle protocol byte is: torch.save's legacy format (its first object is
    torch's magic number), or a plain Python pickle (pickle.dump). Only the opcodes are read (pickletools):
    nothing is unpickled."""
    try:
        with open(path, "rb") as f:
            for i, (op, arg, _) in enumerate(pickletools.genops(f)):
                if op.name in ("LONG1", "LONG4", "LONG", "INT") and arg == TORCH_LEGACY_MAGIC:
                    return f"a file of {size} bytes written by torch.save (its legacy format)"
                if i >= 3:
                    break
    except Exception:  # noqa: BLE001 - not even a pickle stream
        return f"binary data of {size} bytes"
    return f"a plain Python pickle of {size} bytes (pickle.dump), not a file written by torch.save or numpy"


def check_magic(path: Path, kind: str) -> None:
    """Raise ValueError with a one-line message unless `path` is a regular file that looks like `kind` ('npz', 'npy'
    or 'pt'): a device or a pipe, a plain pickle named .pt, an .npz named .pt (or a .pt named .npz) are named as
    such."""
    expected = {
        "npz": (ZIP_MAGIC, "a NumPy .npz archive (numpy.savez)"),
        "pt": (ZIP_MAGIC, "a file written by torch.save"),
        "npy": (NPY_MAGIC, "a NumPy .npy file (numpy.save)"),
    }[kind]
    magic, what = expected
    unusable = why_unusable(path)
    if unusable is not None:
        raise ValueError(f"{path} {unusable}; expected {what}")
    with open(path, "rb") as f:
        head = f.read(len(magic))
    if kind == "pt" and head[:1] == b"\x80":
        found = pickle_kind(path, os.stat(path).st_size)
        if found.endswith("(its legacy format)"):
            return  # torch.save's legacy (pre-1.6) format: a pickle stream that begins with torch's magic number
        raise ValueError(
            f"{path} is {found}; expected {what}. raise-eval never unpickles arbitrary objects (that can run any "
            "code): save the model with raise_eval.save_checkpoint, or its arrays with numpy.savez as an .npz"
        )
    if head != magic or (magic == ZIP_MAGIC and not zipfile.is_zipfile(path)):
        raise ValueError(f"{path} is {describe(path)}; expected {what}")
    if magic == ZIP_MAGIC:
        found = zip_kind(path)
        if kind == "pt" and found == "npz":
            raise ValueError(
                f"{path} is {describe(path)} named .pt; rename it to .npz (load_checkpoint reads a file by its "
                "suffix)"
            )
        if kind == "npz" and found == "pt":
            raise ValueError(
                f"{path} is {describe(path)} named .npz; rename it to .pt (load_checkpoint reads a file by its suffix)"
            )
