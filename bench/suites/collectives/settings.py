"""The collectives suite's settings (config section `collectives`): its ops (their names, from
their declarations in ops.py), dtypes, worlds of ranks, transport and apis."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from bench.config.settings import Choice, Launch, nonempty, positive, require
from bench.ops import choices, defaults
from bench.sizes import parse_size
from bench.suites.collectives.ops import OPS as DECLARED

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8, "int8": 1,
                 "uint8": 1}


OPS = {op.name: op for op in DECLARED}
CollectiveOp = Choice("CollectiveOp", choices(DECLARED))


DType = Choice("DType", [(name, name) for name in DTYPES])


class Transport(Choice):
    default = "default"
    socket = "socket"   # NCCL over sockets: the inter-node path on one box


class Api(Choice):
    torch = "torch"     # torch.distributed, what a PyTorch job calls
    nccl = "nccl"       # the NCCL library called directly: the floor under torch


@dataclass
class Settings:
    ops: List[CollectiveOp] = field(default_factory=lambda: [CollectiveOp(op) for op in defaults(DECLARED)])
    dtypes: List[DType] = field(default_factory=lambda: [DType.float32])
    # ranks on this node; [] (or auto) = one per GPU (2 on a CPU)
    nproc: List[int] = field(default_factory=list, metadata={"auto": "[]"})
    oversubscribe: bool = False                      # more ranks than CPU cores (slow); memory still caps them
    transport: Transport = Transport.default
    timeout_s: float = 300.0                         # a dead or hung rank ends the run after this long
    api: List[Api] = field(default_factory=lambda: list(Api))  # gloo (no GPU) runs torch only
    # The nccl api up to this size (null: every size). Above 16 MiB both apis time the same wire:
    # torch/nccl was 0.94-1.04 from 16 MiB to 4 GiB on 2x H200, so only torch runs there.
    nccl_max_size: Optional[str] = "16MiB"
    # The nccl api's launches (of timing.launch). A graph replays the same NCCL kernels whichever
    # api captured them, and held ops run them back to back whichever api queued them: torch/nccl
    # was 0.98-1.01 in graphs and 0.97-1.04 held (8 B-64 KiB, every op; docs/method.md), so by
    # default only the launch path (eager) tells the apis apart.
    nccl_launch: List[Launch] = field(default_factory=lambda: [Launch.eager])

    def __post_init__(self) -> None:
        nonempty("collectives.ops", self.ops)
        nonempty("collectives.api", self.api)
        nonempty("collectives.dtypes", self.dtypes)
        nonempty("collectives.nccl_launch", self.nccl_launch)
        for n in self.nproc:
            require(n >= 1, "collectives.nproc", n, "must be >= 1")
        positive("collectives.timeout_s", self.timeout_s)
        if self.nccl_max_size is not None:
            parse_size(self.nccl_max_size, "collectives.nccl_max_size")
