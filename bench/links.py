"""What the links can carry: PCIe and NVLink rates from their generation and width, and HBM's.
Pure arithmetic, shared by the suites, the plan and the analysis (an op's bus factor is its
declaration's: bench/ops.py)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Mapping

from bench.pairs import link_class

NVLINK_LINK_GBPS = 25.0   # one NVLink (gen 3 or 4) link, one direction


def pcie_gbps(gen, width) -> float:
    """Theoretical PCIe bandwidth per direction in GB/s: gen3 x16 15.75, gen4 31.5, gen5 63.0.

    Gen1/2 use 8b/10b encoding (0.25, 0.5 GB/s a lane); gen3 on 128b/130b at 8 GT/s, and each
    later generation doubles the rate. NaN when either is unknown.
    """
    try:
        gen, width = int(gen), int(width)
    except (TypeError, ValueError):
        return math.nan
    if gen <= 0 or width <= 0:
        return math.nan
    lane = {1: 0.25, 2: 0.5}.get(gen, 8 * 128 / 130 / 8 * 2 ** (gen - 3))
    return lane * width


def hbm_gbps(mem_clock_mhz, bus_width_bits) -> float:
    """Device memory's theoretical bandwidth in GB/s, reads and writes together: two transfers a
    clock (NVML's memory clock) over the bus width (H100 SXM: 2619 MHz x 5120 bits = 3352; H200:
    3201 MHz x 6144 bits = 4917). NaN when either is unknown."""
    try:
        clock, width = float(mem_clock_mhz), float(bus_width_bits)
    except (TypeError, ValueError):
        return math.nan
    return 2 * clock * 1e6 * width / 8 / 1e9 if clock > 0 and width > 0 else math.nan


def nvlink_links(link_class: str) -> int | None:
    """The NVLink count in an `nvidia-smi topo -m` class ('NV18' -> 18); None for any other class."""
    match = re.fullmatch(r"NV(\d+)", link_class or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Speeds:
    """A machine's links as models read them: PCIe to the host, NVLink between GPUs, and the link
    class of each GPU pair ('i,j' -> NV18, PIX, SYS: nvidia-smi topo -m)."""

    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink_gbps_per_gpu: float | None = None      # the conf/instance entry's, one direction
    classes: Mapping[str, str] = field(default_factory=dict)

    def pcie(self) -> float:
        """PCIe per direction, GB/s; gen 4 x16 where unknown."""
        return pcie_gbps(self.pcie_gen or 4, self.pcie_width or 16)

    def nvlink(self, link_class: str = "") -> float | None:
        """NVLink per direction, GB/s: the pair's class (NV18: 18 links), else the instance entry's
        figure, else the fewest links of any pair; None without NVLink."""
        links = nvlink_links(link_class)
        if links:
            return links * NVLINK_LINK_GBPS
        if self.nvlink_gbps_per_gpu:
            return self.nvlink_gbps_per_gpu
        counts = [n for n in map(nvlink_links, self.classes.values()) if n]
        return min(counts) * NVLINK_LINK_GBPS if counts else None

    def pair(self, src: str, dst: str) -> str:
        """The link class between two GPUs named 'cuda:i'; '' where either end is not one GPU."""
        ends = [re.fullmatch(r"cuda:(\d+)", d) for d in (src, dst)]
        if not all(ends) or src == dst:
            return ""
        return link_class(self.classes, int(ends[0].group(1)), int(ends[1].group(1)))
