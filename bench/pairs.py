"""Which GPU pairs P2P measures at which size, by default: a sweep that grows with the link classes,
not with the square of the GPU count.

Every ordered pair is measured at the matrix sizes (the suite's smallest, and its largest
whole-machine size: the latency and bandwidth matrices); the other sizes are measured on one pair
per distinct link class of `nvidia-smi topo -m` (NV18, PIX, PXB, PHB, NODE, SYS, ...), since
pairs joined the same way draw the same curve. On 8 NVSwitch GPUs that is 56 pairs at two sizes
and 1 pair at the rest, instead of 56 pairs at every size. Pure functions of the link matrix: the
planner uses them on machines that are not this one.
"""
from __future__ import annotations

from typing import Iterable

Pair = tuple[int, int]
UNKNOWN = "?"   # a pair the link matrix does not name (no nvidia-smi): one class of its own


def all_pairs(n: int) -> list[Pair]:
    return [(i, j) for i in range(n) for j in range(n) if i != j]


def link_class(links: dict[str, str], i: int, j: int) -> str:
    """The link between GPUs i and j as `system.link_matrix` names it ('i,j' -> 'NV18')."""
    return links.get(f"{i},{j}") or links.get(f"{j},{i}") or UNKNOWN


def class_representatives(n: int, links: dict[str, str]) -> dict[str, Pair]:
    """One pair per link class: the first in (src, dst) order, so runs on alike machines agree."""
    chosen: dict[str, Pair] = {}
    for i, j in all_pairs(n):
        chosen.setdefault(link_class(links, i, j), (i, j))
    return chosen


def class_pairs(n: int, links: dict[str, str]) -> list[Pair]:
    """One pair per link class, in (src, dst) order: what a curve per kind of link needs."""
    return sorted(class_representatives(n, links).values())


def pairs_at_size(size: int, matrix_sizes: Iterable[int], n: int, links: dict[str, str]) -> list[Pair]:
    """The ordered pairs measured at `size`: all of them at the matrix sizes, else one per link class."""
    return all_pairs(n) if size in matrix_sizes else class_pairs(n, links)
