"""Each point of a run and what a healthy machine of its kind delivers there, in order: the
expectation table's curve of its class; where the class has none, link theory times the share
the other classes reach (bandwidth-bound sizes) or the time they take (other sizes); and the
limit of the link it crossed as the run recorded it. Points that measured the host, or were
recorded by methods since changed, are set aside with why (bench/analysis/judge.py judges them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import pandas as pd

from bench.analysis import causes
from bench.analysis.compare import size_classes
from bench.analysis.expected import Expected, Learned, alternatives, machine_class, machine_row, pair_class, roles
from bench.analysis.launch_path import MIN_HOSTS, hosts_said
from bench.analysis.noise import GPU_BACKENDS
from bench.analysis.records import records
from bench.analysis.verdicts import HOST_OWN, RESIDENT, short_number
from bench.links import pcie_gbps
from bench.ops import NVLINK, PCIE, Op
from bench.points import ALL, ROLE_KEYS, VARIANT_KEYS
from bench.suite_view import LATENCY_BOUND, Catalog, view
from bench.sizes import format_size

HOST_SLOW = "it ran while the host was slow (host_pace_s, in all its trials but one at most): it measured the host's mood"
OLDER = "made by an older xferbench (schema {}): its methods have changed since; run it again to judge it"
OLDEST_JUDGED = 2   # schema 1's graph timings have changed since


def _older(meta: Mapping) -> str:
    """Why a run is too old to judge, or ''."""
    schema = meta.get("schema_version")
    return OLDER.format(schema) if isinstance(schema, int) and schema < OLDEST_JUDGED else ""


def _theory(catalog: Catalog, point: dict) -> tuple[float, float, str] | None:
    try:
        found = view(catalog, point["suite"]).expectation(point)
    except (KeyError, TypeError, ValueError):   # a hook that cannot read this machine's columns
        return None
    if found is None:
        return None
    gbps, share, link = found
    return (float(gbps), float(share), str(link)) if float(gbps) > 0 else None


@dataclass
class JudgedPoint:
    """One point of the run, what a healthy machine delivers there and where that came from."""
    variant: tuple
    role: tuple
    size: int
    size_class: str
    y: float
    value: float                  # median bandwidth (GB/s), or time per op where it has none
    bandwidth: bool
    y_expected: float = math.nan
    runs: int = 0                 # healthy runs behind y_expected (0: theory, or other classes)
    hosts: int = 0                # the healthy hosts those runs came from
    curve_role: dict | None = None   # the table's role that gave it (its class's)
    learned: Learned | None = None   # the other classes that gave it
    source: str = ""
    physical: float = math.nan    # the link's limit in GB/s, as the run recorded it
    physical_link: str = ""
    reason: str = ""              # why no expectation
    # Where the class has no reference: what other classes of its GPU model take at a GPU's own
    # copy (its memory, no link between): a record of that model far below the figure is wrong.
    model_y: float = math.nan
    model_source: str = ""
    in_cache: bool = False        # an on-GPU copy the L2 holds (cache.py): no plateau of device memory
    host_slow: bool = False       # it ran while the host was slow (results.slow_throughout)
    on_ramp: bool = False         # its expectation interpolated along the reference's ramp (Curve.on_ramp)
    set_aside: bool = False       # judged by nothing: it measured the host, or by a method since changed


def _reference(point: JudgedPoint, role: dict, table: Expected, machine: str) -> str:
    """Fills in the class's expectation from the table; '' or why there is none."""
    if machine not in table.origins:
        return f"no reference for machine class {machine}"
    found = [(r, c) for r in alternatives(role) if (c := table.curve(machine, r)) is not None]
    if not found:
        return f"no reference for this variant on {machine}"
    match = next(((r, c) for r, c in found if c.covers(point.size)), None)
    if match is None:
        lo, hi = min(int(c.sizes[0]) for _, c in found), max(int(c.sizes[-1]) for _, c in found)
        has = format_size(lo) if lo == hi else f"{format_size(lo)}-{format_size(hi)}"
        return f"no reference at these sizes (it has {has})"
    point.curve_role, curve = match
    log_time, point.runs = curve.at(point.size)
    point.hosts, point.on_ramp = curve.hosts_at(point.size), curve.on_ramp(point.size)
    point.y_expected = -log_time
    point.size_class = curve.size_class(point.size) if point.bandwidth else LATENCY_BOUND
    few = f" from {hosts_said(point.hosts)}" if point.hosts < MIN_HOSTS else ""
    point.source = f"{table.origins[machine]} {curve.instances}, {point.runs} healthy run{'s' * (point.runs != 1)}{few}"
    return ""


def _learned(point: JudgedPoint, role: dict, table: Expected, machine: str, theory, own_class: str) -> str:
    """Where the class has no reference: theory times the share the other classes reach (the
    suite's declared share where none has the role) at bandwidth-bound sizes, else the time the
    other classes take; '' or why neither."""
    if theory and point.bandwidth and own_class == "bandwidth":
        gbps, declared_share, link = theory
        learned = table.learned_share(machine, role, point.size)
        share = learned.value if learned else declared_share
        if not share > 0:
            return "no other class has this variant, nor a declared share of its link"
        point.y_expected = point.y - math.log(point.value / (gbps * share))
        point.learned = learned
        whose = learned.source if learned else "declared by the suite"
        point.source = f"theory: {link} = {short_number(gbps)} GB/s x {share:.2f} ({whose})"
        return ""
    if point.bandwidth and own_class == "bandwidth":   # another GPU's time is no measure of this one's link
        return "no link theory for this GPU's variant"
    learned = table.learned_time(machine, role, point.size)
    if learned is None:
        return "no other class has this variant at this size" + ("" if theory else ", nor link theory")
    point.y_expected, point.learned = -learned.value, learned
    point.size_class = own_class if point.bandwidth else LATENCY_BOUND
    point.source = f"the time {learned.source} take"
    return ""


def _same_gpu(point: JudgedPoint, role: dict, table: Expected, machine: str) -> None:
    """Fills in what other classes of the point's GPU model take, for a GPU's copy to itself."""
    if not (point.bandwidth and role["src"] == role["dst"] == "gpu" and not role["link"]):
        return
    learned = table.learned_time(machine, role, point.size, same_gpu=True)
    if learned is not None:
        point.model_y, point.model_source = -learned.value, ", ".join(learned.classes)


def _recorded_limit(f: causes.Facts, record: dict, theory, op: Op) -> tuple[float, str]:
    """What the link this point crossed could carry as the run recorded it (GB/s, its name):
    a host copy's PCIe link at its generation and width while busy (else its slot's); a peer copy
    between GPUs with peer access recorded off, PCIe through the host; else the link theory.
    `op`: the point's op as its suite declares it."""
    src, dst = str(record["src"]), str(record["dst"])
    both = op.directions
    gpu = causes.gpu_of(dst if src == "host" else src)
    if "host" in (src, dst) and gpu is not None and op.link == PCIE:
        gen, width, when = causes.recorded_pcie(f, gpu)
        gbps = pcie_gbps(gen, width)
        if gbps > 0:
            return gbps * both, f"PCIe Gen{gen} x{width} as recorded {when}"
    through = _through_host(f, record, op)
    if through is not None:
        gen, width, _ = causes.recorded_pcie(f, through)
        gbps = pcie_gbps(gen, width)
        if gbps > 0:
            return gbps * both, f"PCIe Gen{gen} x{width} through the host, as peer access is recorded off"
    return (theory[0], theory[2]) if theory else (math.nan, "")


def _through_host(f: causes.Facts, record: dict, op: Op) -> int | None:
    """The GPU whose PCIe link carries a peer copy's traffic when peer access is recorded off for
    every pair it crosses (staged through host memory), or None: a pair's first GPU; every GPU
    to or from one GPU (all_to_one, one_to_all), that one GPU's."""
    src, dst = str(record["src"]), str(record["dst"])
    if op.link != NVLINK or record["mode"] != "peer":
        return None
    if pair := causes.peer_pair(src, dst):
        return pair[0] if causes.peer_access_off(f, *pair) else None
    one = causes.gpu_of(src) if causes.gpu_of(src) is not None else causes.gpu_of(dst)
    others = [k for k in range(int(record["world_size"])) if k != one]
    if ALL in (src, dst) and one is not None and others and all(causes.peer_access_off(f, one, k) for k in others):
        return one
    return None


def judged_points(levels: pd.DataFrame, meta: Mapping, catalog: Catalog, table: Expected,
                  in_cache: frozenset, facts: causes.Facts) -> list[JudgedPoint]:
    """Each point of a run's levels (compare.point_levels) with its expectation, the link limit
    it was recorded under, or why it has none; `in_cache`: the (op, src, size)s the L2 holds."""
    machine = machine_class(meta).key
    links = (meta.get("system") or {}).get("links") or {}
    role_rows = records(roles(levels, links))
    own = size_classes(levels)   # where no reference curve says
    hooks = machine_row(meta)
    older = _older(meta)
    out = []
    for record, role, own_class in zip(records(levels), role_rows, own):
        bandwidth = record["metric"] != "time_s"
        point = JudgedPoint(tuple(record[k] for k in VARIANT_KEYS), tuple(role[k] for k in ROLE_KEYS),
                      int(record["size_bytes"]), own_class, float(record["y"]), float(record["value"]), bandwidth)
        pair = pair_class(links, record["src"], record["dst"])
        theory = _theory(catalog, {**hooks, **record, "link_class": "" if pair == "?" else pair})
        # A copy the GPU's L2 holds is rightly above HBM's limit: not a figure to hold against it.
        point.in_cache = (record["op"], record["src"], record["size_bytes"]) in in_cache
        if bandwidth and not point.in_cache:
            declared = view(catalog, record["suite"]).op(record["op"])
            point.physical, point.physical_link = _recorded_limit(facts, record, theory, declared)
        point.reason = _reference(point, role, table, machine)
        if point.reason:
            _same_gpu(point, role, table, machine)
            why = _learned(point, role, table, machine, theory, own_class)
            point.reason = f"{point.reason}; {why}" if why else ""
        # A copy the L2 holds reads the cache's state from one run to the next: the gate does not gate it either.
        resident = RESIDENT if record["cache_resident"] and point.size_class == "bandwidth" else ""
        # On a host backend a latency-bound point measured while the host was slow measured
        # its mood. A GPU's is judged: a launch path against the spread of hosts, moods and all
        # (its cause then says so), a device-side figure the device's whatever the host.
        point.host_slow = bool(record["host_slow"])
        moody = point.host_slow and point.size_class == LATENCY_BOUND and record["backend"] not in GPU_BACKENDS
        aside = (older or resident or (HOST_OWN if record["op"] in view(catalog, record["suite"]).host_own else "")
                 or (HOST_SLOW if moody else ""))
        if aside:
            point.y_expected, point.reason, point.set_aside = math.nan, aside, True
        out.append(point)
    return out

