"""What a file actually is, for one-line errors when a checkpoint or data file is not what its name says."""

from __future__ import annotations

import zipfile
from pathlib import Path

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"  # a zip archive with no members is only its end record (e.g. numpy.savez(path))


def describe(path: Path) -> str:
    """A few words on what `path` holds: empty, a text file (with its first characters), a zip archive, ..."""
    size = path.stat().st_size
    if size == 0:
        return "an empty file (0 bytes)"
    with open(path, "rb") as f:
        head = f.read(256)
    if head.startswith(ZIP_MAGIC):
        return f"a zip archive of {size} bytes" + ("" if zipfile.is_zipfile(path) else ", truncated or corrupt")
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


def check_magic(path: Path, kind: str) -> None:
    """Raise ValueError with a one-line message unless `path` looks like `kind` ('npz', 'npy' or 'pt')."""
    expected = {
        "npz": (ZIP_MAGIC, "a NumPy .npz archive (numpy.savez)"),
        "pt": (ZIP_MAGIC, "a file written by torch.save"),
        "npy": (NPY_MAGIC, "a NumPy .npy file (numpy.save)"),
    }[kind]
    magic, what = expected
    with open(path, "rb") as f:
        head = f.read(len(magic))
    if kind == "pt" and head[:1] == b"\x80":
        return  # torch.save's legacy (pre-1.6) format: a plain pickle stream
    if head != magic or (magic == ZIP_MAGIC and not zipfile.is_zipfile(path)):
        raise ValueError(f"{path} is {describe(path)}; expected {what}")
