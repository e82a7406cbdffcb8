"""A minimal reader for MATLAB level-5 MAT-files (MATLAB 5 to 7.x, compressed or not): numeric arrays only.

Enough for RBMs saved by Salakhutdinov's MATLAB code (`save file vishid hidbiases visbiases ...`) without
depending on scipy. Non-numeric variables (cells, structs, strings) are reported by name and skipped. MATLAB 7.3
files are HDF5 and are refused with a message saying how to convert them.

Format (MathWorks, "MAT-File Format", level 5): a 128-byte header ending in a 2-byte endian indicator 'IM'/'MI',
then data elements, each an 8-byte tag (type, byte count) or a 4-byte "small element" tag, padded to 8 bytes;
miCOMPRESSED elements hold a zlib stream of one element; miMATRIX elements hold array flags, dimensions, the
name and the (column-major) real and imaginary parts.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Union

import numpy as np

MI_INT8, MI_UINT8, MI_INT16, MI_UINT16, MI_INT32, MI_UINT32 = 1, 2, 3, 4, 5, 6
MI_SINGLE, MI_DOUBLE, MI_INT64, MI_UINT64, MI_MATRIX, MI_COMPRESSED = 7, 9, 12, 13, 14, 15
_MI_DTYPES = {
    MI_INT8: "i1",
    MI_UINT8: "u1",
    MI_INT16: "i2",
    MI_UINT16: "u2",
    MI_INT32: "i4",
    MI_UINT32: "u4",
    MI_SINGLE: "f4",
    MI_DOUBLE: "f8",
    MI_INT64: "i8",
    MI_UINT64: "u8",
}
# mxCLASS -> numpy dtype of the array as MATLAB sees it (the stored type may be narrower)
_MX_CLASSES = {6: "f8", 7: "f4", 8: "i1", 9: "u1", 10: "i2", 11: "u2", 12: "i4", 13: "u4", 14: "i8", 15: "u8"}
_MX_NAMES = {1: "cell", 2: "struct", 3: "object", 4: "char", 5: "sparse"}


class MatFileError(ValueError):
    """A file this reader cannot use; the message says why and what to do."""


def read_mat(path: Union[str, Path]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read the numeric variables of a level-5 MAT-file.

    Returns:
        (arrays, skipped): arrays by variable name (numpy, MATLAB's shape), and the names of variables that
        were not numeric arrays with their MATLAB class.
    """
    data = Path(path).read_bytes()
    if data[:10] == b"MATLAB 7.3" or data[512:520] == b"\x89HDF\r\n\x1a\n":
        raise MatFileError(
            f"{path} is a MATLAB 7.3 (HDF5) file, which this reader does not support; in MATLAB re-save it "
            "with save(..., '-v7'), or export W, vbias and hbias to an .npz file"
        )
    if len(data) < 128 or data[126:128] not in (b"IM", b"MI"):
        raise MatFileError(f"{path} is not a level-5 MAT-file (MATLAB 5 or later); re-save it with '-v7'")
    endian = "<" if data[126:128] == b"IM" else ">"
    arrays: dict[str, np.ndarray] = {}
    skipped: dict[str, str] = {}
    pos = 128
    while pos + 8 <= len(data):
        mtype, payload, pos = _read_element(data, pos, endian)
        if mtype == MI_COMPRESSED:
            try:
                inner = zlib.decompress(payload)
            except zlib.error as e:
                raise MatFileError(f"{path}: corrupt compressed variable ({e})") from None
            mtype, payload, _ = _read_element(inner, 0, endian)
        if mtype == MI_MATRIX:
            name, value, kind = _read_matrix(payload, endian)
            if value is None:
                skipped[name] = kind
            else:
                arrays[name] = value
    return arrays, skipped


def _read_element(buf: bytes, pos: int, endian: str) -> tuple[int, bytes, int]:
    """(type, payload, next position) of the data element at `pos`."""
    first, second = struct.unpack_from(endian + "II", buf, pos)
    if first >> 16:  # small data element: 2-byte count, 2-byte type, data in the next 4 bytes
        mtype, nbytes = first & 0xFFFF, first >> 16
        return mtype, buf[pos + 4 : pos + 4 + nbytes], pos + 8
    mtype, nbytes = first, second
    start = pos + 8
    if start + nbytes > len(buf):
        raise MatFileError("truncated MAT-file: a data element runs past the end of the file")
    end = start + nbytes
    if mtype != MI_COMPRESSED:
        end += (-nbytes) % 8  # padding to a 64-bit boundary
    return mtype, buf[start : start + nbytes], end


def _read_matrix(payload: bytes, endian: str):
    """(name, array or None, MATLAB class name) of an miMATRIX element."""
    pos = 0
    _, flags_bytes, pos = _read_element(payload, pos, endian)
    flags = struct.unpack(endian + "I", flags_bytes[:4])[0]
    mx_class, is_complex = flags & 0xFF, bool(flags & 0x800)
    _, dims_bytes, pos = _read_element(payload, pos, endian)
    dims = tuple(int(d) for d in np.frombuffer(dims_bytes, dtype=endian + "i4"))
    _, name_bytes, pos = _read_element(payload, pos, endian)
    name = name_bytes.decode("ascii", errors="replace")
    if mx_class not in _MX_CLASSES:
        return name, None, _MX_NAMES.get(mx_class, f"class {mx_class}")
    if is_complex:
        return name, None, "complex"
    mtype, real, pos = _read_element(payload, pos, endian)
    if mtype not in _MI_DTYPES:
        return name, None, f"stored type {mtype}"
    values = np.frombuffer(real, dtype=endian + _MI_DTYPES[mtype]).astype(_MX_CLASSES[mx_class])
    if values.size != int(np.prod(dims)):
        raise MatFileError(f"variable {name!r}: {values.size} values for dimensions {dims}")
    return name, values.reshape(dims, order="F"), _MX_NAMES.get(mx_class, "numeric")
