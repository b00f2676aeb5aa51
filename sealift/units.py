"""Byte sizes: parsing what users type and printing what people read."""

from __future__ import annotations

import re

from sealift.errors import InputError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, *, what: str = "size") -> int:
    """Parse ``25GiB``, ``4G``, ``1000000`` into bytes; reject anything else rather than guess."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise InputError(
            f"{what} {text!r} is not a size",
            hint="use a number with an optional unit: 25GiB, 4G, 700MiB, 1000000",
        )
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise InputError(f"{what} {text!r} must be larger than zero", hint="e.g. 25GiB")
    return value


def format_bytes(count: float) -> str:
    """Human-readable binary size, e.g. ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h)\s*$")


def parse_duration(text: str, *, what: str = "duration") -> int:
    """Parse ``90s``, ``15m``, ``2h`` into seconds; anything else is refused, never guessed."""
    match = _DURATION.match(text)
    if not match or int(match.group(1)) <= 0:
        raise InputError(
            f"{what} {text!r} is not a duration", hint="use seconds, minutes or hours: 90s, 15m, 2h"
        )
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]
