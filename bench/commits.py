"""The journal's commit record: samples.commit holds one line per finished point, the journal's
(samples.csv's) length and CRC-32 after that point, so readers and writers take the journal up
to the last point it holds whole. bench/journal.py writes the lines; bench/results.py reads by them.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Commit:
    """One line of samples.commit: the journal whole through one point."""

    end: int        # the journal's length after the point
    crc: int        # CRC-32 of the journal's first `end` bytes
    line_end: int   # the commit file's length through this commit's line


def commit_line(end: int, crc: int) -> bytes:
    """The line that commits the journal's first `end` bytes, of CRC-32 `crc`."""
    return f"{end} {crc:08x}\n".encode()


def _parse(line: bytes) -> tuple[int, int]:
    """A commit line's (end, crc); ValueError for a line that is not one."""
    end, crc = (int(x, base) for x, base in zip(line.split(b" "), (10, 16), strict=True))
    return end, crc


def last_commit(journal: bytes, commits: Path) -> Commit | None:
    """The last commit the journal holds whole: a point torn by a full disk or a kill, or cut off
    by hand, ends past it. None without a commit file, or with one that does not describe this
    journal (a CSV rewritten by another tool): the journal is then read by whole lines."""
    if not commits.exists():
        return None
    last, line_end = None, 0
    for line in commits.read_bytes().split(b"\n")[:-1]:  # a torn last line was never a commit
        line_end += len(line) + 1
        try:
            end, crc = _parse(line)
        except ValueError:
            return None
        if end > len(journal):
            break
        last = Commit(end, crc, line_end)
    if last is None or zlib.crc32(journal[:last.end]) != last.crc:
        return None
    return last


def edited_at(journal: bytes, commits: Path) -> int | None:
    """The first line of the journal that its commit record does not vouch for, where the record
    exists and its checksums no longer match (rows changed after they were written); else None."""
    try:
        lines = commits.read_bytes().split(b"\n")[:-1]
    except FileNotFoundError:
        return None
    good = 0
    for line in lines:
        try:
            end, crc = _parse(line)
        except ValueError:
            return None   # not a commit record of this tool: read by whole lines
        if end > len(journal):
            return None   # a point torn by a kill or a full disk: cut back, not an edit
        if zlib.crc32(journal[:end]) != crc:
            return max(2, journal[:good].count(b"\n") + 1)   # the header is line 1: rows from 2 on
        good = end
    return None
