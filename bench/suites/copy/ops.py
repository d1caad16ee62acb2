"""The copy suite's ops, each declared once: what it moves and over which link, how it reads, its
share of link theory, how nvbandwidth names it, and for a copy within one GPU the views of its
buffers it copies between (as nvbandwidth declares a copy kind as one Testcase class).

Torch-free: a view is a function of the tensors measure.py hands it, so the reading face reads
these declarations without loading torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from bench.ops import HBM, PCIE, Op


@dataclass(frozen=True, kw_only=True)
class Copy(Op):
    """A copy op; within one GPU (`on_one_gpu`), the views of its two buffers (flat tensors of
    `element`-byte elements) it copies between; None: the buffers themselves."""

    views: Callable[[Any, Any], tuple[Any, Any]] | None = None
    element: int = 1      # bytes of the elements it copies; its sizes are whole elements


def transposed(dst, src) -> tuple[Any, Any]:
    """src as a rows x cols matrix, transposed into dst (cols x rows): a 2D strided copy, what
    `x.t().contiguous()` costs; about square, cols a power of two."""
    count = src.numel()
    cols = 1 << (count.bit_length() // 2)
    while count % cols:
        cols >>= 1
    rows = count // cols
    return dst.view(cols, rows), src.view(rows, cols).t()


# Shares of link theory (docs/judging.md): the median over the reference machines (H100, H200
# x1, H200 x2) at sizes from the plateau on (reading.py: PLATEAU, D2D_PLATEAU). Pinned copies
# 0.863-0.881 of PCIe, SM copies 0.782-0.824, bidir 0.67-0.80 (the H100 host the lowest), d2d
# 0.84-0.90 of HBM. Pageable copies (the host's memcpy: 0.12-0.27) and every GPU at once (the
# host's bridges) get none. Keyed by (memory, engine).
OPS = (
    Copy(name="h2d", order=10, link=PCIE, efficiency={("pinned", "ce"): 0.87, ("pinned", "sm"): 0.80},
         nvbandwidth=("host_to_device", "host_to_all")),
    Copy(name="d2h", order=20, link=PCIE, efficiency={("pinned", "ce"): 0.87, ("pinned", "sm"): 0.80},
         nvbandwidth=("device_to_host", "all_to_host")),
    Copy(name="bidir", order=40, link=PCIE, directions=2,
         efficiency={("pinned", "ce"): 0.78, ("pinned", "sm"): 0.61}, nvbandwidth=("host_bidirectional",)),
    Copy(name="d2d", order=50, link=HBM, on_one_gpu=True, efficiency={("device", "ce"): 0.85},
         nvbandwidth=("device_local_copy",)),
    # A transposing copy within one GPU through torch's copy kernel on the SMs (no measured share yet).
    Copy(name="d2d_transpose", order=55, link=HBM, on_one_gpu=True, default=False,
         views=transposed, element=4),
    # a GPU's dependent 8-byte loads from pinned host memory: a time per access
    Copy(name="latency", link=PCIE, bandwidth=False, nvbandwidth=("host_device_latency",)),
    Copy(name="h2h", order=60),
)
