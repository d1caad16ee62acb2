"""Byte sizes: parse "4KiB"/"1GiB"/"512", format them back, and build x2 sweeps."""
from __future__ import annotations

import re

from bench import ConfigError

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "tb": 1000**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int, key: str = "size") -> int:
    """Bytes in `text` ("4KiB", "1GiB", "1.5MB", 4096); ConfigError naming `key` otherwise."""
    if isinstance(text, bool):
        raise ConfigError(f"{key}={text!r}: not a size (use e.g. 4KiB, 1GiB, 4096)")
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        unit = match.group(2).lower() if match else None
        if not match or unit not in _UNITS:
            raise ConfigError(f"{key}={text!r}: not a size (use e.g. 4KiB, 1GiB, 4096)")
        value = float(match.group(1)) * _UNITS[unit]
        if value != int(value):
            raise ConfigError(f"{key}={text!r}: not a whole number of bytes")
        value = int(value)
    if value <= 0:
        raise ConfigError(f"{key}={text!r}: must be positive")
    return value


def format_size(n: int) -> str:
    """Shortest exact binary spelling: 4096 -> '4KiB', 1536 -> '1536B'."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def sweep(min_size: str | int, max_size: str | int, factor: int = 2) -> list[int]:
    """min, min*factor, ... up to and including max (max itself always ends the list)."""
    lo, hi = parse_size(min_size, "sizes.min"), parse_size(max_size, "sizes.max")
    if lo > hi:
        raise ConfigError(f"sizes.min={format_size(lo)} is larger than sizes.max={format_size(hi)}")
    if not isinstance(factor, int) or factor < 2:
        raise ConfigError(f"sizes.factor={factor!r}: must be an integer >= 2")
    sizes = [lo]
    while sizes[-1] * factor <= hi:
        sizes.append(sizes[-1] * factor)
    if sizes[-1] != hi:
        sizes.append(hi)
    return sizes
