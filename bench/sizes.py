"""Byte sizes: parse "4KiB"/"1GiB"/"512", format them back, and build sweeps (x2 steps, or a ladder)."""
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


_STEP = re.compile(r"^\s*([^:]+?)\s*:\s*x(\d+)\s*$")


def parse_steps(steps: list[str], key: str = "ladder") -> list[tuple[int, int]]:
    """["1MiB:x2", "16MiB:x4"] -> [(1048576, 2), (16777216, 4)], sorted; ConfigError naming `key` otherwise."""
    parsed = []
    for item in steps:
        match = _STEP.match(str(item))
        if not match or int(match.group(2)) < 2:
            raise ConfigError(f"{key}: {item!r} is not SIZE:xFACTOR with a factor >= 2 (e.g. 1MiB:x2)")
        parsed.append((parse_size(match.group(1), key), int(match.group(2))))
    return sorted(parsed)


def ladder(min_size: str | int, max_size: str | int, factor: int = 2, steps: list[str] = ()) -> list[int]:
    """A sweep whose step changes with size: each "SIZE:xF" in `steps` steps by F from SIZE on.

    Each step is at least `factor` (so sizes.factor=4 still coarsens every range), every size
    named in `steps` that lies inside the range is measured (a step never jumps over it), and
    max ends the list. Without steps this is sweep(min, max, factor).
    """
    starts = parse_steps(steps)
    if not starts:
        return sweep(min_size, max_size, factor)
    lo, hi = parse_size(min_size, "sizes.min"), parse_size(max_size, "sizes.max")
    if lo > hi:
        raise ConfigError(f"sizes.min={format_size(lo)} is larger than sizes.max={format_size(hi)}")
    sizes = [lo]
    while True:
        size = sizes[-1]
        named = [f for start, f in starts if start <= size]
        step = max(factor, named[-1]) if named else factor
        nxt = min([size * step] + [start for start, _ in starts if size < start])
        if nxt > hi:
            break
        sizes.append(nxt)
    if sizes[-1] != hi:
        sizes.append(hi)
    return sizes


# Whole-machine sizes: the largest up to 256 MiB (on the committed 2x H200 runs copies there move
# within 2% of their 1 GiB rate, at a quarter of the time), then every x16 step below it down to
# 1 MiB (below it the host's enqueue rate, not the link, sets the pace).
MACHINE_MAX_BYTES = 256 << 20
MACHINE_STEP = 16
MACHINE_MIN_BYTES = 1 << 20


def machine_sizes(sizes: list[int]) -> list[int]:
    """The sweep's sizes that whole-machine points (every GPU at once, SM copies) use: its largest
    up to MACHINE_MAX_BYTES, then each size at least MACHINE_STEP times below the last one kept,
    down to MACHINE_MIN_BYTES (4 KiB to 1 GiB: 1 MiB, 16 MiB, 256 MiB)."""
    kept = [max((s for s in sizes if s <= MACHINE_MAX_BYTES), default=min(sizes))]
    for size in sorted(sizes, reverse=True):
        if MACHINE_MIN_BYTES <= size <= kept[-1] // MACHINE_STEP:
            kept.append(size)
    return sorted(kept)
