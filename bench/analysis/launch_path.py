"""The launch path: a latency-bound figure of an eager launch on a GPU, and how it is judged.

Events around eager launches time the host's launch path as much as the link: a probe on a 2x
H200 host read 8 B host-to-device copies at 5.50, 5.39 and 3.43 µs in three processes, the same
copies held behind a spin kernel at 2.29, 2.25 and 2.30 (docs/judging.md). So a family is *the
launch path* where its points are latency-bound, launched eagerly on a GPU backend (cuda, nccl;
pageable copies included) and measure a transfer (a dependent load's time, the pointer chase,
is the device's). It is judged only against the spread of launch paths that healthy hosts of its
class show (expected.csv's `host_spread`, several runs of one host counting as one), never
against the run-to-run noise or its siblings; the link behind it is judged by the device-side
figures of the same op: its `held` and `graph` launches at latency-bound sizes and any launch at
bandwidth-bound sizes (`device_side`). A host-bound family (a launch path, a pageable copy) is
not called normal while such a figure of its op is low, and one whose own limit could not catch
a halved figure is judged where such a figure could (judge.py).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from bench.analysis.expected import Expected
from bench.analysis.noise import GPU_BACKENDS, family_sigma, run_noise
from bench.points import VARIANT_KEYS
from bench.suite_view import LATENCY_BOUND

DEVICE_LAUNCHES = ("graph", "held")   # launches whose ops the host cannot space out: the device's own time
MIN_HOSTS = 3        # a class standing on fewer hosts says so, and its launch paths are judged wider
FEW_HOSTS = 1.5      # that much wider
OTHER_HOSTS = 2.0    # a launch path's declared noise between hosts, where no class measured it
# A launch path's limit lies between these shares of its class's: no table of a few similar
# hosts narrows it past LAUNCH_FLOOR (healthy hosts' launch paths differ by up to 1.65x,
# docs/judging.md), and no spread between hosts widens it past LAUNCH_LOWEST (a launch path a
# quarter as fast as its class's is the host's fault, whatever the link).
LAUNCH_FLOOR = 0.55
LAUNCH_LOWEST = 0.25


def bounded(limit: float) -> float:
    """A launch path's limit (log of a share of its class's) kept within LAUNCH_LOWEST..LAUNCH_FLOOR."""
    return min(max(limit, math.log(LAUNCH_LOWEST)), math.log(LAUNCH_FLOOR))
# What the device-side figures of one op may differ in: how it was launched, through which api
# and engine, from which host memory (the link is the same).
_FREE = ("launch", "api", "engine", "memory")


def launch_path(key: Mapping, size_class: str, bandwidth: bool) -> bool:
    """Whether a family (its variant keys and size class; `bandwidth`: it has a bandwidth, not a
    dependent load's time) is a launch path."""
    return size_class == LATENCY_BOUND and key["launch"] == "eager" and bandwidth and key["backend"] in GPU_BACKENDS


def host_bound(key: Mapping, size_class: str, bandwidth: bool) -> bool:
    """A launch path, or a pageable copy (the host's memory copy sets it at any size)."""
    return launch_path(key, size_class, bandwidth) or (key["memory"] == "pageable" and key["backend"] in GPU_BACKENDS)


def device_side(key: Mapping, size_class: str) -> bool:
    """A figure the host's launch path cannot move: a GPU's held or graph launches at
    latency-bound sizes, any launch at bandwidth-bound sizes (pinned or device memory)."""
    if key["backend"] not in GPU_BACKENDS or key["memory"] == "pageable":
        return False
    return size_class == "bandwidth" or key["launch"] in DEVICE_LAUNCHES


def op_key(key: Mapping) -> tuple:
    """What a host-bound family shares with the device-side figures of its op: its variant but
    the launch, api, engine and host memory."""
    return tuple(str(key[k]) for k in VARIANT_KEYS if k not in _FREE)


def hosts_said(hosts: int) -> str:
    return f"{hosts} host{'s' * (hosts != 1)}"


def host_sigma(role: Mapping, sizes: Sequence[int], table: Expected, machine: str, declared: float,
               hosts: int) -> tuple[float, str]:
    """A launch path's sigma between healthy hosts of its class and where it came from: measured
    between the class's hosts (df: hosts - 1), moderated by the spread the other classes' hosts
    show in the role (else the declared latency noise x OTHER_HOSTS: hosts' launch paths differ)."""
    lo, hi = min(sizes), max(sizes)
    others = table.spreads(role, lo, hi, machine, between="hosts", others=True)
    if len(others):
        prior, said = run_noise(others), f"the other classes' hosts ({run_noise(others):.3f})"
    else:
        prior, said = declared * OTHER_HOSTS, f"declared {declared:.3f} x {OTHER_HOSTS}"
    own = table.spreads(role, lo, hi, machine, between="hosts")
    if len(own) and hosts > 1:
        measured = run_noise(own)
        return (family_sigma(prior, measured, hosts - 1),
                f"launch paths between {hosts_said(hosts)} of the class ({measured:.3f}), moderated by {said}")
    return prior, f"launch paths between hosts: {said}"


def between_hosts(role: Mapping, sizes: Sequence[int], table: Expected, machine: str, declared: float,
                  hosts: int) -> tuple[float, str]:
    """Any family's sigma between the class's healthy hosts, where it stands on two or more:
    measured (df: hosts - 1), moderated by the declared noise; NaN where not measured."""
    own = table.spreads(role, min(sizes), max(sizes), machine, between="hosts")
    if not (len(own) and hosts > 1):
        return math.nan, ""
    measured = run_noise(own)
    return family_sigma(declared, measured, hosts - 1), f"between {hosts_said(hosts)} of the class ({measured:.3f})"


def widened(sigma: float, hosts: int, said: str) -> tuple[float, str]:
    """A launch path's sigma where its class stands on fewer than MIN_HOSTS hosts: wider (a
    device-side figure is the device's, whichever host holds it)."""
    if hosts >= MIN_HOSTS or not math.isfinite(sigma):
        return sigma, said
    return sigma * FEW_HOSTS, f"{said}; the class stands on {hosts_said(hosts)}: x {FEW_HOSTS}"
