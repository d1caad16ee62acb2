"""Why a figure is low: rules checked against what a run recorded, each named only where it applies.

A rule looks at the link a family crosses and at the facts of its run: meta.json's machine
description (NVML's PCIe readings, peer access, the link matrix and NUMA affinity of
`nvidia-smi topo -m`, the NCCL_* environment), its telemetry (bench/driver/telemetry.py's
summarize(): other processes, utilization, clock-event reasons, the PCIe link while busy, MIG),
the rows' notes (where host memory was placed), NCCL's own log lines from the ranks
(RUN/ranks/*.log, bench/analysis/ncclog.py: the transport per peer pair, variables it echoed) and,
for a launch path (launch_path.py), the host: its pace (host_pace_s) against the class's healthy
hosts' (paces.csv), the CPU time other processes took and the load (telemetry's `host`).
`explain()` returns the causes found, or one sentence naming what was checked and found nothing.
A cause is named only where it can explain the drop: a PCIe link running below its slot only
where that link cannot carry more than was measured; a clock-event reason only in more of the
samples than healthy runs of the machine class show it (clocks.csv, made with expected.csv).
"""
from __future__ import annotations

import csv
import functools
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

from bench.analysis import ncclog
from bench.links import nvlink_links, pcie_gbps
from bench.ops import NVLINK, PCIE
from bench.sizes import format_size
from bench.suite_view import Catalog, view

CLOCKS = Path(__file__).with_name("clocks.csv")   # per class and reason: the largest share healthy runs showed
PACES = Path(__file__).with_name("paces.csv")     # per class and healthy host: its usual pace (host_pace_s)
CLOCK_MARGIN = 0.10      # a reason counts in this much more of the samples than healthy runs show
UNKNOWN_CLOCKS = 0.5     # where no healthy run of the class says: in more than half the samples
EXPLAINS = 1.05          # a link explains a drop where the figure is no more than this over what it carries

# NCCL variables that can hold NCCL below what the machine gives, and what each does when set.
NCCL_LIMITS = {
    "NCCL_MAX_NCHANNELS": "at most {} channel(s)", "NCCL_MIN_NCHANNELS": "at least {} channel(s)",
    "NCCL_PROTO": "protocols limited to {}", "NCCL_ALGO": "algorithms limited to {}",
    "NCCL_P2P_DISABLE": "no peer-to-peer transport", "NCCL_SHM_DISABLE": "no shared-memory transport",
    "NCCL_IB_DISABLE": "no InfiniBand", "NCCL_NET": "network forced to {}", "NCCL_BUFFSIZE": "buffers of {} bytes",
    "NCCL_NTHREADS": "{} threads per channel", "NCCL_P2P_LEVEL": "peer-to-peer only up to topology level {}",
    "NCCL_SOCKET_NTHREADS": "{} socket threads", "NCCL_NSOCKS_PERTHREAD": "{} sockets per thread",
    "NCCL_GRAPH_MIXING_SUPPORT": "graph replays wait on NCCL's support for mixing them with eager launches "
                                 "(xferbench sets 0 unless told)",
}
# Limit only when on.
_SWITCHES = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_GRAPH_MIXING_SUPPORT")
# What collectives.transport=socket sets in its ranks on purpose (bench/suites/collectives/points.py).
_SOCKET_MODE = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET")
_TOPOLOGY = {
    "PIX": "are joined through one PCIe switch (PIX), not NVLink",
    "PXB": "cross several PCIe bridges (PXB), not NVLink",
    "PHB": "cross the PCIe host bridge (PHB), not NVLink",
    "NODE": "cross PCIe host bridges within a NUMA node (NODE), not NVLink",
    "SYS": "cross the link between CPU sockets (SYS), not NVLink",
}
_QUIET_CLOCKS = ("idle", "applications clocks")   # clocks down for no work, or as set: not a slowdown
_NODE_NOTE = re.compile(r"host memory on NUMA node (\d+)")


@dataclass(frozen=True)
class HostRecord:
    """What a run recorded of its host, for a launch path's cause."""

    pace_s: float = math.nan             # its usual pace (expected.usual_pace); NaN: not read
    healthy_paces: tuple[float, ...] = ()   # the class's healthy hosts' usual paces (paces.csv)
    telemetry: Mapping | None = None     # meta.telemetry.host (load, CPU time); None: not recorded


@dataclass
class Facts:
    """What one run recorded that can explain a low figure."""

    env: dict[str, str]                  # NCCL_* as the run's environment and NCCL's log said
    links: Mapping[str, str]             # 'i,j' -> NV18, PHB, SYS
    p2p: list[list[bool]]                # peer access, [i][j]
    gpus: list[dict]                     # meta.system.gpus (NVML at the start)
    telemetry: list[dict] | None         # meta.telemetry's GPUs; None: not recorded
    gpu_nodes: dict[int, int] = field(default_factory=dict)   # GPU -> its NUMA node (NVML's, else topo -m)
    nccl: ncclog.NcclLog | None = None   # None: no NCCL log in the run folder
    clock_baseline: Mapping[str, float] | None = None   # reason -> healthy runs' largest share; None: unknown
    host: HostRecord = field(default_factory=HostRecord)

    def telemetry_of(self, gpu: int) -> dict | None:
        return next((g for g in self.telemetry or [] if g.get("index") == gpu), None)

    def nvml(self, gpu: int) -> dict:
        return next((g for g in self.gpus if g.get("index") == gpu), {})


def _gpu_nodes(topology: str) -> dict[int, int]:
    """GPU -> NUMA node from `nvidia-smi topo -m`'s NUMA Affinity column."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in topology.splitlines()]
    header = next((line.split("\t") for line in lines if "NUMA Affinity" in line), None)
    if header is None:
        return {}
    # Rows start with their name (GPU0); the header has a blank cell above it, or none.
    column = [h.strip() for h in header].index("NUMA Affinity") + (1 if header[0].strip() else 0)
    nodes = {}
    for line in lines:
        cells = line.split("\t")
        found = re.fullmatch(r"GPU(\d+)", cells[0].strip())
        if found and len(cells) > column and cells[column].strip().isdigit():
            nodes[int(found.group(1))] = int(cells[column])
    return nodes


def _shipped_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a table scripts/make_expected.py ships beside this module; none where it is absent."""
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


@functools.cache
def _clock_table() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for row in _shipped_rows(CLOCKS):
        out.setdefault(row["machine"], {})[row["reason"]] = float(row["share"])
    return out


@functools.cache
def _pace_table() -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    for row in _shipped_rows(PACES):
        out[row["machine"]] = (*out.get(row["machine"], ()), float(row["pace_s"]))
    return out


def healthy_paces(machine: str) -> tuple[float, ...]:
    """The usual paces of the class's healthy hosts (one each; () where none read its pace)."""
    return _pace_table().get(machine, ())


def healthy_clocks(machine: str) -> dict[str, float] | None:
    """The clock-event reasons healthy runs of this class showed, with their largest share of
    samples ({}: none showed any); None where the class has no healthy run with telemetry."""
    return _clock_table().get(machine)


def facts(meta: Mapping, run_dir: str | Path | None = None,
          clock_baseline: Mapping[str, float] | None = None, host: HostRecord | None = None) -> Facts:
    """A run's facts from its meta.json and, where given, its folder's NCCL logs, the clock
    reasons healthy runs of its class show and its host's pace against theirs (`host`, whose
    telemetry is read here)."""
    system = meta.get("system") or {}
    log = ncclog.parse_run_dir(run_dir) if run_dir is not None else None
    if log is not None and not log.sources:
        log = None
    env = {k: str(v) for k, v in (system.get("env") or {}).items() if k.startswith("NCCL_")}
    env.update(log.env if log else {})
    telemetry = meta.get("telemetry") or {}
    gpus = system.get("gpus") or []
    nodes = _gpu_nodes(system.get("topology") or "")
    nodes.update({g["index"]: g["numa_node"] for g in gpus if isinstance(g.get("numa_node"), int) and g["numa_node"] >= 0})
    host = replace(host or HostRecord(), telemetry=telemetry.get("host"))
    return Facts(env, system.get("links") or {}, system.get("p2p_access") or [], gpus,
                 telemetry.get("gpus") if telemetry.get("available") else None, nodes, log,
                 None if clock_baseline is None else {k: v for k, v in clock_baseline.items() if k != "-"}, host)


def recorded_pcie(f: Facts, gpu: int) -> tuple[int | None, int | None, str]:
    """A GPU's PCIe link as the run recorded it: (generation, width, when) at its lowest while
    busy, else its slot's maximum (an idle link steps down: NVML's reading at the start is no
    link state)."""
    seen, nvml = (f.telemetry_of(gpu) or {}).get("pcie") or {}, f.nvml(gpu)
    if seen.get("busy_samples") and seen.get("gen_min_busy") and seen.get("width_min_busy"):
        return seen["gen_min_busy"], seen["width_min_busy"], f"for GPU {gpu} while busy"
    gen, width = seen.get("gen_max") or nvml.get("pcie_gen_max"), seen.get("width_max") or nvml.get("pcie_width_max")
    return gen, width, f"for GPU {gpu}'s slot"


def peer_pair(src: str, dst: str) -> tuple[int, int] | None:
    a, b = gpu_of(src), gpu_of(dst)
    return (a, b) if a is not None and b is not None and a != b else None


def peer_access_off(f: Facts, i: int, j: int) -> bool:
    """Peer access between two GPUs recorded off (either way); False where not recorded."""
    if i >= len(f.p2p) or j >= len(f.p2p) or j >= len(f.p2p[i]) or i >= len(f.p2p[j]):
        return False
    return not (f.p2p[i][j] and f.p2p[j][i])


@dataclass(frozen=True)
class Subject:
    """What a family crosses: its GPUs and pairs, and which links and software are in the way."""

    gpus: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]
    pcie: bool           # the host link (host copies, staged copies, peers without NVLink)
    host_memory: bool    # data in host memory (where it lives matters)
    nccl: bool
    world_size: int
    nnodes: int
    mode: str
    numa: str
    notes: tuple[str, ...] = ()
    gbps: float = math.nan   # what the family measured at its plateau, one direction (NaN: a time)
    launch_path: bool = False   # a latency-bound eager transfer: the host's launch path (launch_path.py)


def gpu_of(end: str) -> int | None:
    """The GPU index of a point's end 'cuda:i'; None for host, all or ''."""
    found = re.fullmatch(r"cuda:(\d+)", str(end))
    return int(found.group(1)) if found else None


def subject(key: Mapping, links: Mapping[str, str], catalog: Catalog, notes: tuple[str, ...] = (),
            gbps: float = math.nan, launch_path: bool = False) -> Subject:
    """The Subject of a family's variant (its POINT_KEYS but the size), its measured GB/s (per
    direction: of an op moving both ways at once, halved here; else of host copies of every GPU
    at once, per GPU) and whether it is a launch path; its op as its suite declares it (the catalog)."""
    op, mode, n = view(catalog, key["suite"]).op(key["op"]), key["mode"], int(key["world_size"])
    src, dst = str(key["src"]), str(key["dst"])
    nccl = key["backend"] == "nccl"
    if nccl or "all" in (src, dst):
        gpus = tuple(range(n)) if int(key["nnodes"]) == 1 else ()
    else:
        gpus = tuple(sorted({g for g in (gpu_of(src), gpu_of(dst)) if g is not None}))
    peer = nccl or (op.link == NVLINK and mode != "staged")   # between GPUs, unless staged through the host
    if not peer:
        pairs: tuple = ()
    elif nccl or "all" in (src, dst):
        one = gpu_of(src) if gpu_of(src) is not None else gpu_of(dst)
        pairs = tuple((i, j) for i in gpus for j in gpus if i < j and (one is None or one in (i, j)))
    else:
        pairs = (tuple(gpus),) if len(gpus) == 2 else ()
    host = "host" in (src, dst) or mode == "staged"
    kinds = [links.get(f"{i},{j}") or links.get(f"{j},{i}") or "" for i, j in pairs]
    no_nvlink = any(kind and not nvlink_links(kind) for kind in kinds)   # unknown: not assumed PCIe
    every_gpu = "all" in (src, dst) and op.link == PCIE   # host copies of every GPU at once: per GPU
    per_direction = gbps / op.directions if op.directions > 1 else gbps / n if every_gpu else gbps
    return Subject(gpus, pairs, pcie=host or (peer and no_nvlink), host_memory=host, nccl=nccl,
                   world_size=n, nnodes=int(key["nnodes"]), mode=mode, numa=str(key.get("numa", "")), notes=notes,
                   gbps=per_direction, launch_path=launch_path)


# ---- the rules: each (name, applies to, check) -> sentences ----------------------------------

def _pcie(f: Facts, s: Subject) -> list[str]:
    out = []
    for gpu in s.gpus:
        seen, nvml = (f.telemetry_of(gpu) or {}).get("pcie") or {}, f.nvml(gpu)
        gen_max = seen.get("gen_max") or nvml.get("pcie_gen_max")
        width_max = seen.get("width_max") or nvml.get("pcie_width_max")
        if seen.get("busy_samples"):
            gen, width, when = seen.get("gen_min_busy"), seen.get("width_min_busy"), "while busy"
        else:   # no readings while busy: NVML's at the start, when an idle link may have stepped down
            gen, width = nvml.get("pcie_gen_current"), nvml.get("pcie_width_current")
            when = "when the run started (an idle link also steps down; no reading while busy)"
        carries = pcie_gbps(gen, width)
        explains = not math.isfinite(s.gbps) or not carries > 0 or s.gbps <= EXPLAINS * carries
        if gen and width and gen_max and width_max and (gen < gen_max or width < width_max) and explains:
            out.append(f"GPU {gpu}'s PCIe link ran at Gen{gen} x{width} {when}, below its Gen{gen_max} x{width_max} "
                       f"(it carries {carries:.1f} GB/s a direction)")
        gpu_max = seen.get("gen_gpu_max") or nvml.get("pcie_gen_gpu_max")
        if gpu_max and gen_max and gpu_max > gen_max:
            slot = pcie_gbps(gen_max, width_max)
            out.append(f"GPU {gpu}'s PCIe link runs at Gen{gen_max}, below the Gen{gpu_max} the GPU supports: its "
                       f"slot allows at most Gen{gen_max} (it carries {slot:.1f} GB/s a direction)")
    return out


def _numa(f: Facts, s: Subject) -> list[str]:
    if s.numa == "remote":
        return ["host memory on a remote NUMA node (numa=remote)"]
    out = []
    for note in s.notes:
        placed = _NODE_NOTE.search(note)
        for gpu in s.gpus:
            if placed and gpu in f.gpu_nodes and int(placed.group(1)) != f.gpu_nodes[gpu]:
                out.append(f"host memory on NUMA node {placed.group(1)}, GPU {gpu}'s is node {f.gpu_nodes[gpu]}")
    return sorted(set(out))


def _peer_access(f: Facts, s: Subject) -> list[str]:
    """Peer access off between a pair, where staging through host memory (the GPUs' PCIe links)
    can carry what was measured: a figure above that contradicts the record instead."""
    out = []
    for i, j in s.pairs:
        if peer_access_off(f, i, j):
            carries = min((c for k in (i, j) if (c := pcie_gbps(*recorded_pcie(f, k)[:2])) > 0), default=math.nan)
            if s.gbps > EXPLAINS * carries:   # NaN either side: not shown to be beyond it
                continue
            out.append(f"peer access between GPU {i} and {j} is off: their traffic is staged through host memory")
    return out


def limiting_env(env: Mapping[str, str]) -> list[str]:
    """The NCCL_LIMITS variables set in an environment ('NCCL_PROTO=Simple'); a switch only when on."""
    return [f"{name}={env[name]}" for name in NCCL_LIMITS
            if name in env and not (name in _SWITCHES and str(env[name]).strip() in ("", "0"))]


def _nccl_env(f: Facts, s: Subject) -> list[str]:
    out = []
    set_by_mode = s.mode == "socket"
    for setting in limiting_env(f.env):
        name, value = setting.split("=", 1)
        if not (set_by_mode and name in _SOCKET_MODE):
            out.append(f"{setting}: {NCCL_LIMITS[name].format(value)}")
    if set_by_mode:
        out.append("collectives.transport=socket sets NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE and "
                   "NCCL_NET=Socket on purpose: NCCL over sockets, as between nodes")
    return out


def _transport(f: Facts, s: Subject) -> list[str]:
    seen: dict[tuple[int, int], set[str]] = {}
    for comm, pair in f.nccl.pairs():
        if comm.nranks not in (None, s.world_size) or pair.src_gpu is None or pair.dst_gpu is None:
            continue
        ends = tuple(sorted((pair.src_gpu, pair.dst_gpu)))
        if ends in s.pairs:
            seen.setdefault(ends, set()).update(pair.transports)
    out = []
    for (i, j), kinds in sorted(seen.items()):
        direct = nvlink_links(f.links.get(f"{i},{j}") or "") or (i < len(f.p2p) and j < len(f.p2p[i]) and f.p2p[i][j])
        if "P2P" not in kinds and direct:
            out.append(f"NCCL went through {', '.join(sorted(kinds))} between GPU {i} and {j}")
    return out


def _topology(f: Facts, s: Subject) -> list[str]:
    out = []
    for i, j in s.pairs:
        kind = f.links.get(f"{i},{j}") or f.links.get(f"{j},{i}") or ""
        if kind in _TOPOLOGY:
            out.append(f"GPU {i} and {j} {_TOPOLOGY[kind]}")
    return out


def _gib(nbytes) -> str:
    return f", up to {format_size(int(nbytes))}" if nbytes else ""


def _percent(utilization: Mapping | None) -> str:
    return "?" if not utilization or utilization.get("gpu") is None else f"{utilization['gpu']}%"


def _others(f: Facts, s: Subject) -> list[str]:
    out = []
    for gpu in s.gpus:
        seen = f.telemetry_of(gpu) or {}
        use = seen.get("utilization") or {}
        for p in seen.get("other_processes") or []:
            name = f" ({p['name']})" if p.get("name") else ""
            out.append(f"another process on GPU {gpu}: pid {p['pid']}{name}, seen {p['first_seen_s']:g}-"
                       f"{p['last_seen_s']:g} s into the run{_gib(p.get('max_memory_bytes'))}; GPU utilization "
                       f"{_percent(use.get('before'))} before the run, {_percent(use.get('after'))} after")
    return out


def _clock_counts(f: Facts, name: str, share: float) -> bool:
    """A reason counts above what healthy runs of the class show (by CLOCK_MARGIN), or, where
    the class has no healthy run with telemetry, in more than UNKNOWN_CLOCKS of the samples."""
    if f.clock_baseline is None:
        return share > UNKNOWN_CLOCKS
    return share > f.clock_baseline.get(name, 0.0) + CLOCK_MARGIN


def _clocks(f: Facts, s: Subject) -> list[str]:
    out = []
    for gpu in s.gpus:
        shares = ((f.telemetry_of(gpu) or {}).get("clock_reasons") or {}).get("fraction") or {}
        held = [f"{name} in {share:.0%} of samples" + (f" (healthy runs of this class: up to "
                                                        f"{f.clock_baseline.get(name, 0):.0%})" if f.clock_baseline
                                                        is not None else "")
                for name, share in shares.items() if name not in _QUIET_CLOCKS and _clock_counts(f, name, share)]
        if held:
            out.append(f"GPU {gpu}'s clocks were held down during the run: {', '.join(held)}")
    return out


def _mig(f: Facts, s: Subject) -> list[str]:
    return [f"MIG is on for GPU {gpu}: the run had a slice of it" for gpu in s.gpus
            if (f.telemetry_of(gpu) or {}).get("mig") == "on"]


def _microseconds(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"


def _pace(h: HostRecord) -> str:
    if not math.isfinite(h.pace_s):
        return "its pace was not read (host_pace_s: recorded before xferbench read it)"
    said = f"its pace (host_pace_s, its usual reading) {_microseconds(h.pace_s)}"
    if not h.healthy_paces:
        return f"{said}; the class's healthy runs read none to hold it against"
    lo, hi = min(h.healthy_paces), max(h.healthy_paces)
    span = _microseconds(lo) if lo == hi else f"{_microseconds(lo)}-{_microseconds(hi)}"
    hosts = f"{len(h.healthy_paces)} healthy host{'s' * (len(h.healthy_paces) != 1)}"
    versus = f"{h.pace_s / hi:.2f}x the slowest of" if h.pace_s > hi else "within"
    return f"{said}, {versus} the class's {hosts} ({span})"


_UNRECORDED_CPU = "the CPU time other processes took and the load were not recorded in this run"


def _cpu(host: Mapping | None) -> str:
    if not host:
        return _UNRECORDED_CPU
    cpu, load, share = host.get("cpu_s") or {}, host.get("load_avg_1m") or {}, host.get("others_share")
    parts = []
    if cpu.get("others") is not None:
        of = f" ({share:.0%} of its {host.get('cpus')} CPUs' time)" if share is not None else ""
        parts.append(f"other processes took {cpu['others']:.1f} CPU-s during the run{of}")
    if cpu.get("steal") is not None:
        parts.append(f"the hypervisor took {cpu['steal']:.1f} CPU-s (steal)")
    if load.get("max") is not None:
        parts.append(f"load average up to {load['max']:.1f} on {host.get('cpus')} CPUs")
    return "; ".join(parts) or _UNRECORDED_CPU


def _host(f: Facts, s: Subject) -> list[str]:
    """A launch path names its host: what sets it is the host as much as the link."""
    return [f"the launch path is the host's: {_pace(f.host)}; {_cpu(f.host.telemetry)}"]


@dataclass(frozen=True)
class Rule:
    name: str                                    # what it checks, for 'no cause found among: ...'
    applies: Callable[[Subject], bool]
    check: Callable[[Facts, Subject], list[str]]
    needs: Callable[[Facts], bool] = lambda f: True   # False: the run did not record what it reads


RULES = (
    Rule("the PCIe link's generation and width", lambda s: s.pcie and bool(s.gpus), _pcie),
    Rule("where host memory lives (NUMA)", lambda s: s.host_memory, _numa),
    Rule("peer access", lambda s: bool(s.pairs), _peer_access, lambda f: bool(f.p2p)),
    Rule("NCCL's environment", lambda s: s.nccl, _nccl_env),
    Rule("the transport NCCL used", lambda s: s.nccl and bool(s.pairs) and s.nnodes == 1, _transport,
         lambda f: f.nccl is not None),
    Rule("the pair's topology", lambda s: bool(s.pairs), _topology, lambda f: bool(f.links)),
    Rule("other processes on the GPU", lambda s: bool(s.gpus), _others, lambda f: f.telemetry is not None),
    Rule("clock-event reasons", lambda s: bool(s.gpus), _clocks, lambda f: f.telemetry is not None),
    Rule("MIG", lambda s: bool(s.gpus), _mig, lambda f: f.telemetry is not None),
    Rule("the host (its pace, the CPU time other processes took, the load)", lambda s: s.launch_path, _host),
)


def explain(f: Facts, s: Subject) -> list[str]:
    """The causes found for a low figure of this subject; else one sentence: what was checked
    and found nothing, and what the run did not record."""
    causes, checked, unrecorded = [], [], []
    for rule in RULES:
        if not rule.applies(s):
            continue
        if not rule.needs(f):
            unrecorded.append(rule.name)
            continue
        checked.append(rule.name)
        causes += rule.check(f, s)
    if causes:
        return causes
    said = f"no cause found among: {', '.join(checked)}" if checked else "no cause could be checked"
    return [said + (f" (not recorded in this run: {', '.join(unrecorded)})" if unrecorded else "")]
