"""Quantities as people write them: whole numbers in scientific notation ('1e6'), sizes ('8GB', '1.5GiB'), durations
('90s', '30m', '1.5h'). The settings read their fields' text through these (`raise_eval.settings`)."""

from __future__ import annotations

import decimal
import math
import re

MAX_COUNT = 2**63 - 1  # a count beyond an int64 cannot index a tensor (and overflows a float's exact range)

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
}
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_count(text: str) -> int:
    """A whole number written as digits or in scientific notation ('1e6', '1_000'); ValueError otherwise. The
    bounds are the settings' to check, so that 1e12 reaches the check that says what it would cost."""
    try:
        value = decimal.Decimal(str(text).strip().replace("_", ""))
    except decimal.InvalidOperation:
        raise ValueError(f"{text!r} is not a whole number") from None
    if not value.is_finite() or value != value.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number")
    if value.adjusted() > 1000:  # far beyond any bound; not worth building the integer
        raise ValueError(f"{text!r} is beyond any run")
    return int(value)


def parse_size(text: str) -> int:
    """Bytes in a size such as '512MB', '8GB', '1.5GiB' or '1000000' (decimal kB/MB/GB/TB, binary KiB/MiB/GiB/TiB,
    case-insensitive)."""
    # Signed, so that "-1GB" is told it is not positive rather than not a size.
    m = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size; write e.g. 512MB, 8GB or 1.5GiB")
    value = float(m.group(1)) * _SIZE_UNITS[unit]
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"{text!r} is not a positive size; write e.g. 512MB, 8GB or 1.5GiB")
    if value > MAX_COUNT:
        raise ValueError(f"{text!r} is beyond any machine's memory; write e.g. 512MB, 8GB or 1.5GiB")
    return int(value)


def format_size(n: float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as `parse_size` reads them)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def format_duration(seconds: float) -> str:
    """'42 s', '21 min', '5.2 h', '3.1 days'."""
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


def parse_duration(text: str) -> float:
    """Seconds in '90', '90s', '30m', '1.5h'; ValueError saying the accepted forms."""
    t = str(text).strip().lower()
    try:
        value = float(t[:-1]) * _DURATION_UNITS[t[-1]] if t and t[-1] in _DURATION_UNITS else float(t)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a duration; write seconds (90, 90s), minutes (30m) or hours (1.5h)"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{text!r}: the duration must be a finite positive number")
    return value
