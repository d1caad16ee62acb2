"""The p2p suite's ops, each declared once: what it moves, how it reads, its share of link theory
(by mode and engine) and how nvbandwidth names it."""
from __future__ import annotations

from bench.ops import NVLINK, Op

# Shares of link theory (docs/judging.md), from 256 MiB on, 2x H200 over NV18: peer copies
# 0.86-0.88 of NVLink one way, 0.82-0.85 both ways; SM kernels 0.81 and 0.74; all_to_one and
# one_to_all 0.86 (ce) and 0.82 (sm); staged through the host 0.43-0.44 of PCIe. Keyed by
# (mode, engine).
OPS = (
    Op(name="uni", order=30, link=NVLINK, nvbandwidth=("device_to_device",),
       efficiency={("peer", "ce"): 0.86, ("peer", "sm"): 0.81, ("staged", "ce"): 0.43}),
    Op(name="bidir", order=40, link=NVLINK, directions=2, nvbandwidth=("device_to_device_bidirectional",),
       efficiency={("peer", "ce"): 0.82, ("peer", "sm"): 0.74, ("staged", "ce"): 0.43}),
    Op(name="all_to_one", link=NVLINK, nvbandwidth=("all_to_one",), efficiency={("peer", "ce"): 0.86, ("peer", "sm"): 0.82}),
    Op(name="one_to_all", link=NVLINK, nvbandwidth=("one_to_all",), efficiency={("peer", "ce"): 0.86, ("peer", "sm"): 0.82}),
    # dst's dependent 8-byte loads of src's memory: a time per access
    Op(name="latency", link=NVLINK, bandwidth=False, nvbandwidth=("device_to_device_latency",)),
)
