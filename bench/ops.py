"""An op, declared once beside its suite: what it moves, how it reads, how other tools name it.

Each suite lists its ops (`SuiteView.ops`, in its folder's `ops.py`): one `Op` each, or an
instance of the suite's own subclass, which adds how the op is launched and checked (as
nccl-tests declares a collective as one `testColl` record, and nvbandwidth a copy kind as one
`Testcase` class). Everything outside the suite -- the settings' choices, the plan, the
expectations and causes, the cache marks, the figures' order, the importers, scaling -- reads
these declarations, through the catalog (`bench.suite_view`) or the registry, and names no op.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

Catalog = Mapping[str, Any]   # suite name -> its SuiteView (bench.suite_view.Catalog), whose `ops` these are


# busbw / algbw for n ranks, nccl-tests' definitions (its doc/PERFORMANCE.md)
def reduce_bus(n: int) -> float:
    """all_reduce: each rank's data crosses the links twice, less its own share."""
    return 2 * (n - 1) / n


def split_bus(n: int) -> float:
    """all_gather, reduce_scatter, all_to_all(v): every rank's share but its own crosses the links."""
    return (n - 1) / n


def whole_bus(n: int) -> float:
    """broadcast, reduce, sendrecv, and every op of one GPU or a pair: the message crosses once."""
    return 1.0


# The links an op's figure is bounded by (its `link`): a suite's link_limit and expectation name
# what they carry; the analysis reads the kind.
PCIE, NVLINK, HBM = "PCIe", "NVLink", "HBM"


@dataclass(frozen=True, kw_only=True)
class Op:
    """One op of a suite: the values of the results' `op` column it writes, and what they mean."""

    name: str
    order: int | None = None         # its place among every suite's ops in figures (None: after those placed)
    bus: Callable[[int], float] = whole_bus   # busbw / algbw for n ranks
    split: bool = False              # its message S is divided among the ranks (each moves S / n)
    directions: int = 1              # directions its bytes move at once (bidir: 2): its figure per direction is 1/this
    link: str = ""                   # PCIE, NVLINK, HBM: what bounds it; '' where no link does
    # The share of link theory a healthy machine reaches at bandwidth-bound sizes: one figure, or
    # by the suite's variant values (copy: (memory, engine)); its basis is in docs/judging.md.
    efficiency: float | Mapping[tuple[str, ...], float] = math.nan
    bandwidth: bool = True           # False: a time per access (a dependent load), no bandwidth
    on_one_gpu: bool = False         # source and destination on one GPU: in or near L2 below its size (cache.py)
    default: bool = True             # in its suite's default sweep
    nccl_tests: str = ""             # nccl-tests' name of it (all_reduce for all_reduce_perf): the importer's key
    nvbandwidth: tuple[str, ...] = ()   # nvbandwidth's testcase kinds it reads as (bench/importers/nvbandwidth.py)

    def bus_factor(self, n: int) -> float:
        """busbw / algbw for n ranks; 0 for one rank, which moves nothing between GPUs (nccl-tests'
        all_reduce formula gives 0 too)."""
        return 0.0 if n == 1 else self.bus(n)

    def share(self, *variant: str) -> float:
        """The efficiency of this op (of its variant, where the suite keys it so); NaN where none."""
        if isinstance(self.efficiency, Mapping):
            return self.efficiency.get(tuple(variant), math.nan)
        return self.efficiency


def choices(ops: tuple[Op, ...]) -> list[tuple[str, str]]:
    """(member, value) of a suite's op names, for its settings' `Choice` enum."""
    return [(op.name, op.name) for op in ops]


def defaults(ops: tuple[Op, ...]) -> list[str]:
    """The names of the ops a suite measures by default."""
    return [op.name for op in ops if op.default]


def every(catalog: Catalog) -> Iterator[tuple[str, Op]]:
    """(suite name, op) of every op the catalog's suites declare."""
    for name, suite in catalog.items():
        for op in suite.ops:
            yield name, op


def op_order(catalog: Catalog) -> list[str]:
    """Op names in the order figures and tables show them (the ops that declare an order)."""
    placed = sorted(((op.order, op.name) for _, op in every(catalog) if op.order is not None))
    return list(dict.fromkeys(name for _, name in placed))


def named(catalog: Catalog, field: str) -> dict[str, tuple[str, Op]]:
    """Another tool's name of each op (`field`: nccl_tests) -> (suite, op)."""
    return {getattr(op, field): (suite, op) for suite, op in every(catalog) if getattr(op, field)}
