"""The overlap suite's vocabulary, torch-free: its settings (config section `overlap`), its ops,
the parts of a pair's rows, and a pair's product."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from bench.config.settings import Choice, HostMemory, nonempty, positive, require
from bench.ops import Op, choices, reduce_bus
from bench.sizes import parse_size

SYNCS = ("device", "item", "event", "stream")
PAIR_OPS = ("h2d", "d2h", "peer", "all_reduce")
PAIR_PARTS = ("copy_alone", "compute_alone", "copy_during_compute", "compute_during_copy", "serial",
              "one_stream", "total")


# Its ops, declared once (bench/ops.py): all_reduce's bus bandwidth as nccl-tests counts it.
ALL_REDUCE = Op(name="all_reduce", bus=reduce_bus)
OPS = (Op(name="h2d"), Op(name="d2h"), Op(name="peer"), ALL_REDUCE, Op(name="sync"), Op(name="make_tensor"))
OverlapOp = Choice("OverlapOp", choices(OPS))


@dataclass
class Settings:
    ops: List[OverlapOp] = field(default_factory=lambda: list(OverlapOp))
    memory: List[HostMemory] = field(default_factory=lambda: list(HostMemory))  # host copies, make_tensor
    sizes: List[str] = field(default_factory=lambda: ["256MiB"])  # the transfer (all_reduce message) of a pair
    matmul: int = 8192            # n of the bf16 product (n x n) @ (n x n) beside each transfer
    sync_matmul: int = 2048       # n of the product that keeps the GPU busy in the busy sync steps
    make_sizes: List[str] = field(default_factory=lambda: ["4KiB", "1MiB", "64MiB"])
    timeout_s: float = 300.0      # with all_reduce's ranks: a dead or hung rank ends the run after this long

    def __post_init__(self) -> None:
        nonempty("overlap.ops", self.ops)
        nonempty("overlap.memory", self.memory)
        nonempty("overlap.sizes", self.sizes)
        nonempty("overlap.make_sizes", self.make_sizes)
        for key in ("sizes", "make_sizes"):
            for size in getattr(self, key):
                parse_size(size, f"overlap.{key}")
        for key in ("matmul", "sync_matmul"):
            require(getattr(self, key) >= 16, f"overlap.{key}", getattr(self, key), "must be >= 16")
        positive("overlap.timeout_s", self.timeout_s)


@dataclass(frozen=True)
class Product:
    """A pair's product: the bf16 (n x n) @ (n x n) beside the transfer (its mode reads mm<n>)."""

    matmul: int

    @property
    def flops(self) -> float:
        return 2.0 * self.matmul ** 3


def largest(sizes: list[str]) -> int:
    return max(parse_size(s) for s in sizes)
