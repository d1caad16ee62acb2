"""What NCCL said it did: its debug output (NCCL_DEBUG=INFO) as the ranks wrote it, summarized.

A figure below expectation often has its cause in these lines: NCCL went through host memory
(SHM) or a socket where NVLink or PCIe peer access (P2P) was expected, an NCCL_* variable
disabled a path, or the communicator spanned more nodes than planned. This module reads one or
several ranks' output (other lines interleaved, any order, truncated files) into an `NcclLog`:

- the NCCL version(s), and the NCCL_* variables NCCL echoes as set ("... set by environment to");
- per communicator (merged across ranks by its commId): nranks, nNodes and localRanks where
  logged (NCCL >= 2.20), channel counts, the network plugin ("Using network IB");
- every connection line, e.g. `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`, as a transport
  kind (P2P, SHM, NET/<plugin>, COLLNET) and its variant (what follows: CUMEM/read,
  direct/direct, 0/GDRDMA), summed up per peer pair of each communicator.

Formats (NVIDIA/nccl src/transport/{p2p,shm,net,coll_net}.cc, src/init.cc): a line is
`host:pid:tid [cudaDev] NCCL INFO message`. The brackets after a rank in a connection line hold
the GPU's NVML index from 2.18.3 on, its PCI bus id (hex) before; bus ids are mapped back to GPUs
through the communicator's `Init START|COMPLETE` lines. A connection line does not name its
communicator: it is given to the newest communicator of the same process in which that process
holds the logging rank (the sender; the receiver for `[receive]`) and that has enough ranks;
connections set up lazily (NCCL_RUNTIME_CONNECT, send/recv) are thereby attributed as well as
the log allows. Lines of no interest are skipped, and an unfinished last line of a file is dropped.
"""
from __future__ import annotations

import gzip
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

# host:pid:tid [cudaDev] NCCL INFO msg; WARN lines put file:line before "NCCL". Anything before
# the host (a timestamp, a launcher's "[default0]:" tag) is ignored.
_LINE = re.compile(r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>-?\d+)\] "
                   r"(?:\S+:\d+ )?NCCL (?P<level>INFO|WARN) (?P<msg>.*)")
_VERSION = re.compile(r"\bNCCL version (\S+)")
_ENV = re.compile(r"^(NCCL_\w+) set (?:by environment )?to (.*)$")
_NETWORK = re.compile(r"^Using network (.+?)\s*$")
_INIT = re.compile(
    r"comm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda>-?\d+)"
    r"(?: nvmlDev (?P<nvml>-?\d+))? busId (?P<bus>[0-9a-fA-F]+)"
    r"(?: parent (?P<parent>\S+))?(?: splitCount (?P<split>\d+))?(?: color (?P<color>-?\d+))?"
    r"(?: key -?\d+)?(?: commId (?P<id>0x[0-9a-fA-F]+))?.*?-\s*Init (?P<phase>START|COMPLETE)")
_NODES = re.compile(r"^comm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) "
                    r"nNodes (?P<nnodes>\d+) localRanks (?P<local>\d+)")
_CHANNELS = re.compile(r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?"
                       r"(?:(?P<nvls>\d+) nvls channels, )?(?P<p2p>\d+) p2p channels, "
                       r"(?P<per_peer>\d+) p2p channels per peer")
_CONNECTION = re.compile(
    r"^Channel (?P<ch>\d+)(?:/(?P<ci>\d+))? : (?P<src>\d+)\[(?P<sdev>[0-9a-fA-F]+)\] -> "
    r"(?P<dst>\d+)\[(?P<ddev>[0-9a-fA-F]+)\](?: \[(?P<side>send|receive)\])? via (?P<how>\S.*?)\s*$")
_COLLNET = re.compile(r"^CollNet (?P<ch>\d+)/(?P<ci>\d+) : (?P<rank>\d+) \[(?P<side>send|receive)\] "
                      r"via COLLNET/(?P<how>\S.*?)\s*$")
_NET_HOW = re.compile(r"^NET/(?P<name>.+?)/(?P<rest>\d.*)$")
_MAX_WARNINGS = 20
_FIRST_NVML_FORMAT = (2, 18, 3)   # connection lines name GPUs by NVML index from this version on


@dataclass(frozen=True)
class Connection:
    """One connection line: data flows from src to dst on this channel."""

    channel: int
    conn_index: int          # NCCL's connIndex (0: rings and trees; 1: send/recv); 0 where not logged
    src_rank: int
    dst_rank: int | None     # None: a CollNet connection (to the network)
    src_dev: str             # as logged: an NVML index, or a PCI bus id before NCCL 2.18.3
    dst_dev: str
    transport: str           # P2P, SHM, NET/IB, NET/Socket, COLLNET, ...
    variant: str             # the rest: CUMEM/read, IPC, direct pointer, direct/direct, 0/GDRDMA
    side: str = ""           # 'send' or 'receive' where the line says ([send]/[receive])
    host: str = ""           # where the logging rank (the sender; the receiver for [receive]) runs


@dataclass
class RankInfo:
    rank: int
    host: str = ""
    pid: int = 0
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str = ""
    local_ranks: int | None = None   # ranks on this rank's node (NCCL >= 2.20)

    @property
    def gpu(self) -> int | None:
        """The GPU's index as NVML counts (CUDA's where NCCL logged no NVML index)."""
        return self.nvml_dev if self.nvml_dev is not None else self.cuda_dev


@dataclass
class PeerPair:
    """All connections from one rank to another in one communicator."""

    src_rank: int
    dst_rank: int | None
    src_gpu: int | None
    dst_gpu: int | None
    src_host: str
    dst_host: str
    transports: dict[str, list[str]]   # kind -> variants seen, sorted
    channels: int                      # distinct (channel, connIndex) pairs


@dataclass
class Comm:
    """One communicator, merged over the ranks whose output was read."""

    key: str                           # commId (0x...) where logged, else a name for its origin
    nranks: int | None = None
    nnodes: int | None = None
    channels: int | None = None        # collective channels
    p2p_channels: int | None = None
    p2p_channels_per_peer: int | None = None
    nvls_channels: int | None = None
    collnet_channels: int | None = None
    networks: list[str] = field(default_factory=list)   # network plugins its ranks used
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    connections: list[Connection] = field(default_factory=list)

    @property
    def network(self) -> str:
        return ", ".join(self.networks)

    @property
    def local_ranks(self) -> int | None:
        """Ranks per node where all logged ranks agree, else None (see RankInfo.local_ranks)."""
        values = {r.local_ranks for r in self.ranks.values() if r.local_ranks is not None}
        return values.pop() if len(values) == 1 else None

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.ranks.values() if r.host})

    def gpu_of(self, rank: int | None, dev: str, nvml_format: bool | None) -> int | None:
        """The GPU behind a connection line's `rank[dev]`."""
        info = self.ranks.get(rank) if rank is not None else None
        if nvml_format is None:   # version unknown: bus ids are hex and mostly longer than 2 digits
            nvml_format = len(dev) <= 2 and not (info and info.bus_id.lower() == dev.lower())
        if nvml_format and dev.isdigit():
            return int(dev)
        if info and info.bus_id.lower() == dev.lower():
            return info.gpu
        return None

    def pairs(self, nvml_format: bool | None = None) -> list[PeerPair]:
        """Connections summed up per (src rank, dst rank)."""
        grouped: dict[tuple, list[Connection]] = defaultdict(list)
        for c in self.connections:
            grouped[(c.src_rank, -1 if c.dst_rank is None else c.dst_rank)].append(c)
        out = []
        for (src, _), conns in sorted(grouped.items()):
            first = conns[0]
            kinds: dict[str, set[str]] = defaultdict(set)
            for c in conns:
                kinds[c.transport].add(c.variant)
            dst = first.dst_rank
            logged_at = {c.side == "receive": c.host for c in conns}   # receiver's side -> host
            out.append(PeerPair(
                src_rank=src, dst_rank=dst,
                src_gpu=self.gpu_of(src, first.src_dev, nvml_format),
                dst_gpu=self.gpu_of(dst, first.dst_dev, nvml_format) if dst is not None else None,
                src_host=self.ranks[src].host if src in self.ranks else logged_at.get(False, ""),
                dst_host=self.ranks[dst].host if dst in self.ranks else logged_at.get(True, ""),
                transports={k: sorted(v) for k, v in sorted(kinds.items())},
                channels=len({(c.channel, c.conn_index) for c in conns})))
        return out


@dataclass
class NcclLog:
    """What the ranks' NCCL output said: see the module's docstring."""

    versions: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    comms: list[Comm] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)   # NCCL WARN messages, first few, distinct
    sources: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        return ", ".join(self.versions)

    def nvml_format(self) -> bool | None:
        """Whether connection lines name GPUs by NVML index (True) or bus id; None: unknown."""
        parsed = [_version_tuple(v) for v in self.versions]
        known = [v for v in parsed if v is not None]
        if not known:
            return None
        return min(known) >= _FIRST_NVML_FORMAT

    def pairs(self) -> list[tuple[Comm, PeerPair]]:
        nvml = self.nvml_format()
        return [(comm, pair) for comm in self.comms for pair in comm.pairs(nvml)]

    def describe_pairs(self) -> list[str]:
        """One line per peer pair over all communicators: 'GPU 0 -> GPU 1: SHM (direct/direct)'."""
        merged: dict[tuple, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        multi_host = len({h for c in self.comms for h in c.hosts}) > 1
        for _, p in self.pairs():
            src = _endpoint(multi_host, p.src_host, p.src_gpu, p.src_rank)
            dst = _endpoint(multi_host, p.dst_host, p.dst_gpu, p.dst_rank)
            for kind, variants in p.transports.items():
                merged[(src, dst)][kind].update(variants)
        lines = []
        for (src, dst), kinds in sorted(merged.items(), key=lambda item: (_sort_key(item[0][0]),
                                                                           _sort_key(item[0][1]))):
            said = "; ".join(f"{k} ({', '.join(sorted(v))})" if v - {""} else k for k, v in sorted(kinds.items()))
            lines.append(f"{src} -> {dst}: {said}")
        return lines

    def to_dict(self) -> dict:
        """Plain JSON-ready data (for meta.json): everything but the channel-level connections."""
        nvml = self.nvml_format()
        return {
            "version": self.version,
            "env": dict(sorted(self.env.items())),
            "comms": [{
                "id": c.key, "nranks": c.nranks, "nnodes": c.nnodes, "local_ranks": c.local_ranks,
                "hosts": c.hosts, "channels": c.channels, "p2p_channels": c.p2p_channels,
                "p2p_channels_per_peer": c.p2p_channels_per_peer, "nvls_channels": c.nvls_channels,
                "collnet_channels": c.collnet_channels, "network": c.network,
                "ranks": {str(r): {"host": i.host, "gpu": i.gpu, "bus_id": i.bus_id}
                          for r, i in sorted(c.ranks.items())},
                "pairs": [{"src_rank": p.src_rank, "dst_rank": p.dst_rank, "src_gpu": p.src_gpu,
                           "dst_gpu": p.dst_gpu, "transports": p.transports, "channels": p.channels}
                          for p in c.pairs(nvml)],
            } for c in self.comms],
            "pairs": self.describe_pairs(),
            "warnings": list(self.warnings),
            "sources": list(self.sources),
        }


def _endpoint(multi_host: bool, host: str, gpu: int | None, rank: int | None) -> str:
    if rank is None:
        return "network"
    if gpu is None:
        return f"{host} rank {rank}" if multi_host and host else f"rank {rank}"
    if multi_host:   # a GPU index alone would not say which node
        return f"{host} GPU {gpu}" if host else f"rank {rank} (GPU {gpu})"
    return f"GPU {gpu}"


def _sort_key(endpoint: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", endpoint))


def _version_tuple(version: str) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else None


def _transport(how: str) -> tuple[str, str]:
    """'P2P/CUMEM/read' -> ('P2P', 'CUMEM/read'); 'NET/IB/0/GDRDMA' -> ('NET/IB', '0/GDRDMA')."""
    net = _NET_HOW.match(how)
    if net:
        return f"NET/{net['name']}", net["rest"]
    kind, _, rest = how.partition("/")
    return kind, rest


@dataclass
class _Opened:
    """A communicator as one process saw it: its pointer and rank there, the thread that set it
    up, and the key it is merged under."""

    ptr: str
    rank: int
    nranks: int
    tid: int
    key: str


_Proc = tuple[str, int]   # (host, pid): one process's output


class _Parser:
    """Reads lines of any number of processes into communicators keyed across files."""

    def __init__(self) -> None:
        self.log = NcclLog()
        self.comms: dict[str, Comm] = {}
        self.opened: dict[_Proc, list[_Opened]] = defaultdict(list)
        self.pending_network: dict[_Proc, str] = {}
        self.waiting_for_network: dict[_Proc, str] = {}   # key of a comm started with none said yet
        self.handlers = ((_INIT, self._init), (_NODES, self._nodes), (_CHANNELS, self._channels),
                         (_ENV, self._env), (_NETWORK, self._network), (_VERSION, self._version))

    def comm(self, key: str) -> Comm:
        if key not in self.comms:
            self.comms[key] = Comm(key)
            self.log.comms.append(self.comms[key])
        return self.comms[key]

    def feed(self, line: str) -> None:
        m = _LINE.search(line)
        if not m:
            bare = _VERSION.match(line.strip())   # NCCL_DEBUG=VERSION prints the bare string
            if bare:
                self._version(("", 0), 0, bare)
            return
        msg, proc, tid = m["msg"].rstrip(), (m["host"], int(m["pid"])), int(m["tid"])
        if m["level"] == "WARN":
            if msg not in self.log.warnings and len(self.log.warnings) < _MAX_WARNINGS:
                self.log.warnings.append(msg)
        elif _CONNECTION.match(msg):
            self._connection(proc, _CONNECTION.match(msg))
        elif _COLLNET.match(msg):
            self._collnet(proc, _COLLNET.match(msg))
        else:
            for pattern, handler in self.handlers:
                found = pattern.search(msg)
                if found:
                    handler(proc, tid, found)
                    return

    def _version(self, proc: _Proc, tid: int, m: re.Match) -> None:
        if m.group(1) not in self.log.versions:
            self.log.versions.append(m.group(1))

    def _env(self, proc: _Proc, tid: int, m: re.Match) -> None:
        value = m.group(2).strip()
        # NCCL's integer parameters print as "%lld."
        self.log.env[m.group(1)] = value[:-1] if value.endswith(".") else value

    def _network(self, proc: _Proc, tid: int, m: re.Match) -> None:
        waiting = self.waiting_for_network.pop(proc, None)
        if waiting is not None:   # older NCCL says it after the communicator's Init START
            _add_network(self.comms[waiting], m.group(1))
        else:                     # newer NCCL just before
            self.pending_network[proc] = m.group(1)

    def _key(self, proc: _Proc, m: re.Match) -> str:
        if m["id"]:
            return m["id"].lower()
        parent = next((o for o in self.opened[proc] if o.ptr == m["parent"]), None)
        if parent is not None and m["split"] is not None:   # NCCL >= 2.24 logs no commId for splits
            return f"{parent.key}/split{m['split']}/color{m['color']}"
        return f"{proc[0]}:{proc[1]}:{m['ptr']}"   # one process's communicator: not merged

    def _init(self, proc: _Proc, tid: int, m: re.Match) -> None:
        opened = next((o for o in self.opened[proc] if o.ptr == m["ptr"]), None)
        if opened is None:
            opened = _Opened(m["ptr"], int(m["rank"]), int(m["nranks"]), tid, self._key(proc, m))
            self.opened[proc].append(opened)
            network = self.pending_network.pop(proc, None)
            if network:
                _add_network(self.comm(opened.key), network)
            elif m["phase"] == "START":
                self.waiting_for_network[proc] = opened.key
        comm = self.comm(opened.key)
        comm.nranks = int(m["nranks"])
        info = comm.ranks.setdefault(opened.rank, RankInfo(opened.rank))
        info.host, info.pid, info.cuda_dev, info.bus_id = proc[0], proc[1], int(m["cuda"]), m["bus"]
        if m["nvml"] is not None:
            info.nvml_dev = int(m["nvml"])

    def _nodes(self, proc: _Proc, tid: int, m: re.Match) -> None:
        opened = next((o for o in reversed(self.opened[proc]) if o.ptr == m["ptr"]), None)
        if opened is None:
            return
        comm = self.comms[opened.key]
        comm.nnodes = int(m["nnodes"])
        rank = int(m["rank"])
        comm.ranks.setdefault(rank, RankInfo(rank, host=proc[0], pid=proc[1])).local_ranks = int(m["local"])

    def _channels(self, proc: _Proc, tid: int, m: re.Match) -> None:
        # Said at the end of a communicator's init, by the thread running it: its newest one there.
        opened = self.opened[proc]
        same_thread = [o for o in opened if o.tid == tid]
        if not opened:
            return
        comm = self.comms[(same_thread or opened)[-1].key]
        comm.channels, comm.p2p_channels = int(m["coll"]), int(m["p2p"])
        comm.p2p_channels_per_peer = int(m["per_peer"])
        comm.nvls_channels = int(m["nvls"]) if m["nvls"] else None
        comm.collnet_channels = int(m["collnet"]) if m["collnet"] else None

    def _owner(self, proc: _Proc, logging_rank: int, highest_rank: int) -> Comm:
        for o in reversed(self.opened[proc]):
            if o.rank == logging_rank and o.nranks > highest_rank:
                return self.comms[o.key]
        return self.comm("")   # no communicator of this process fits: kept, unattributed

    def _connection(self, proc: _Proc, m: re.Match) -> None:
        src, dst, side = int(m["src"]), int(m["dst"]), m["side"] or ""
        transport, variant = _transport(m["how"])
        comm = self._owner(proc, dst if side == "receive" else src, max(src, dst))
        comm.connections.append(Connection(
            channel=int(m["ch"]), conn_index=int(m["ci"] or 0), src_rank=src, dst_rank=dst,
            src_dev=m["sdev"], dst_dev=m["ddev"], transport=transport, variant=variant, side=side,
            host=proc[0]))

    def _collnet(self, proc: _Proc, m: re.Match) -> None:
        rank = int(m["rank"])
        comm = self._owner(proc, rank, rank)
        info = comm.ranks.get(rank)
        dev = "" if info is None or info.gpu is None else str(info.gpu)
        comm.connections.append(Connection(
            channel=int(m["ch"]), conn_index=int(m["ci"]), src_rank=rank, dst_rank=None, src_dev=dev,
            dst_dev="", transport="COLLNET", variant=m["how"], side=m["side"], host=proc[0]))


def _add_network(comm: Comm, name: str) -> None:
    if name not in comm.networks:
        comm.networks.append(name)


def parse_lines(lines: Iterable[str]) -> NcclLog:
    """Parse NCCL output lines (one or several processes, other output mixed in)."""
    parser = _Parser()
    for line in lines:
        parser.feed(line)
    return parser.log


def _complete_lines(path: Path) -> list[str]:
    if path.suffix == ".gz":   # committed runs keep their ranks' output compressed (NCCL's INFO lines repeat)
        with gzip.open(path, "rt", errors="replace") as f:
            text = f.read()
    else:
        text = path.read_text(errors="replace")
    lines = text.split("\n")
    return lines[:-1]   # after the last newline: '' or an unfinished line of a cut-off file


def parse_files(paths: Iterable[Path | str]) -> NcclLog:
    """Parse several ranks' output files into one summary (communicators merged by commId)."""
    parser = _Parser()
    for path in paths:
        path = Path(path)
        try:
            lines = _complete_lines(path)
        except OSError:
            continue   # a rank's file that cannot be read adds nothing
        parser.log.sources.append(str(path))
        for line in lines:
            parser.feed(line)
    return parser.log


def parse_run_dir(run_dir: Path | str) -> NcclLog:
    """Every `*.log` (or `*.log.gz`) under RUN/ranks/ (each spawned rank's stdout and stderr), in
    rank order."""
    ranks = Path(run_dir) / "ranks"
    logs = [*ranks.glob("*.log"), *ranks.glob("*.log.gz")]
    return parse_files(sorted(logs, key=lambda p: _sort_key(p.name)))
