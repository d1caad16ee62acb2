"""Peer-to-peer copies between GPU pairs, every GPU with one GPU at once, and peer load latency.

For each selected ordered pair (src, dst): one-way copies (op 'uni') and copies both ways at
once (op 'bidir', one row per direction plus their sum), either direct (mode 'peer': a
device-to-device copy, over NVLink or PCIe with peer access) or staged through pinned host
memory (mode 'staged': device->host then host->device, what a machine without P2P does).
Direct copies run on the copy engines (engine 'ce') or as a Triton kernel on the source GPU's
SMs storing into the peer's memory (engine 'sm', nvbandwidth's write; at the whole-machine sizes
of bench.sizes.machine_sizes). Timing uses CUDA events on the source GPU; the other GPU's
work joins its stream.

Concurrent peer traffic, for each GPU j as 'the one' (mode peer, whole-machine sizes; the largest
with pairs=auto):
all_to_one: every other GPU writes into j at once (src 'all', dst cuda:j); one_to_all: every
other GPU reads from j at once (src cuda:j, dst 'all'; with engine ce, j's copy engines push,
since torch runs a copy between GPUs on the source's stream; with sm, each reader's kernel
loads). One row per peer (part cuda:i) and the total, started together and timed as the copy
suite's 'all' points are (bench.measure.lanes.Together).

latency: for each selected pair (pairs=auto: one per link class), dst's SMs chase pointers
through a 2 MiB ring in src's memory (seconds per dependent load in time_s, no bandwidth).

Every point's destination is compared with the source after timing (latency: the chase's end).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, List

from bench import ConfigError, lazy
from bench.suite_view import Metric
from bench.analysis.tables import CONCURRENT_COLUMNS, format_concurrent, latency_table, median_by
from bench.points import AT_ONCE_KEYS
from bench.config.settings import Choice, Engine, SizeRange, nonempty, require
from bench.links import NVLINK_LINK_GBPS, Speeds, nvlink_links, pcie_gbps
from bench.measure import kernels, timing
from bench.measure.chase import NOTE as LATENCY_NOTE
from bench.measure.chase import RING_BYTES, Chase
from bench.measure.checks import same_data
from bench.measure.lanes import Lane, SpanClock, Streams, Together, sync_all
from bench.measure.memory import check_fits
from bench.measure.timing import EventClock
from bench.pairs import class_pairs, pairs_at_size
from bench.results import Sample, usable_rows
from bench.sizes import machine_sizes
from bench.contract import ALL, Context, Overhead, Point, Suite, counts_at_once, trial_rows

np = lazy.module("numpy")
pd = lazy.module("pandas")
torch = lazy.module("torch")

class P2POp(Choice):
    uni = "uni"
    bidir = "bidir"
    all_to_one = "all_to_one"
    one_to_all = "one_to_all"
    latency = "latency"


PAIR_OPS = ("uni", "bidir")
CONCURRENT_OPS = ("all_to_one", "one_to_all")


class P2PMode(Choice):
    peer = "peer"
    staged = "staged"


_PAIRS_HELP = "use auto, all, ring, or a list of [src, dst] pairs like [[0,1],[1,0]]"


@dataclass
class Settings:
    # auto | all | ring | [[src, dst], ...]: one of two shapes, so it is checked here rather than typed.
    # auto: every ordered pair at the smallest and the largest whole-machine size, one pair per link
    # class at the others (see points())
    pairs: Any = "auto"
    ops: List[P2POp] = field(default_factory=lambda: list(P2POp))
    modes: List[P2PMode] = field(default_factory=lambda: list(P2PMode))
    engine: List[Engine] = field(default_factory=lambda: list(Engine))
    # GPU counts of all_to_one and one_to_all (the first N GPUs); [] (or auto): every GPU. Counts
    # above the machine's are capped to it, so [2,4,8] scales as far as the machine goes.
    together: List[int] = field(default_factory=list, metadata={"auto": "[]"})

    def __post_init__(self) -> None:
        for n in self.together:
            require(n >= 2, "p2p.together", n, "a count of GPUs at once must be >= 2")
        nonempty("p2p.ops", self.ops)
        nonempty("p2p.modes", self.modes)
        nonempty("p2p.engine", self.engine)
        if isinstance(self.pairs, str):
            if self.pairs not in ("auto", "all", "ring"):
                raise ConfigError(f"p2p.pairs={self.pairs!r} is unknown; {_PAIRS_HELP}")
            return
        try:
            self.pairs = [[int(x) for x in item] for item in self.pairs]
        except (TypeError, ValueError):
            raise ConfigError(f"p2p.pairs={self.pairs!r}: {_PAIRS_HELP}") from None
        for item in self.pairs:
            if len(item) != 2 or item[0] == item[1] or min(item) < 0:
                raise ConfigError(f"p2p.pairs: {item} is not a pair of two different GPU indices")
        nonempty("p2p.pairs", self.pairs)


def select_pairs(spec: str | list, n: int) -> list[tuple[int, int]]:
    """'all' ordered pairs, a 'ring' (i -> i+1), or an explicit list of [src, dst]."""
    if spec in ("auto", "all"):  # auto: every pair at the matrix sizes; points() picks the rest
        return [(i, j) for i in range(n) for j in range(n) if i != j]
    if spec == "ring":
        return [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1), (1, 0)][: 2 if n == 2 else 0]
    pairs = [(int(i), int(j)) for i, j in spec]
    for i, j in pairs:
        if i == j or not (0 <= i < n and 0 <= j < n):
            raise ConfigError(f"p2p.pairs: [{i}, {j}] needs two different GPUs among 0..{n - 1}")
    return pairs


class P2PState:
    """One run's buffers and streams, made as points need them: per GPU its largest-size src
    (random bytes, seeded per GPU so that one GPU's data cannot pass for another's), dst and
    gather (a slot per peer, for all_to_one); pinned host staging per direction; a stream per
    GPU and direction; pointer-chase rings; the lanes' streams."""

    def __init__(self, ctx: Context) -> None:
        self.size, self.gpus = max(ctx.sizes), ctx.gpu_count
        self.lanes = Streams(ctx.gpu_count)
        self._buffers: dict[tuple[str, int | None], object] = {}
        self._streams: dict[tuple[int, str], object] = {}
        self._rings: dict[int, object] = {}

    def buffer(self, name: str, device: int | None):
        key = (name, device)
        if key not in self._buffers:
            if device is None:
                buf = torch.empty(self.size, dtype=torch.uint8, pin_memory=True)
            elif name == "src":
                seeded = torch.Generator(device=f"cuda:{device}").manual_seed(device + 1)
                buf = torch.randint(0, 256, (self.size,), dtype=torch.uint8, device=f"cuda:{device}", generator=seeded)
            else:
                slots = self.gpus - 1 if name == "gather" else 1
                buf = torch.empty(self.size * slots, dtype=torch.uint8, device=f"cuda:{device}")
            self._buffers[key] = buf
        return self._buffers[key]

    def stream(self, device: int, direction: str):
        """A stream per GPU and direction: the two legs of a bidirectional copy share none."""
        if (device, direction) not in self._streams:
            self._streams[device, direction] = torch.cuda.Stream(device=device)
        return self._streams[device, direction]

    def ring(self, gpu: int):
        if gpu not in self._rings:
            self._rings[gpu] = kernels.make_ring(RING_BYTES, device=f"cuda:{gpu}")
        return self._rings[gpu]


def sweep(s: Settings, ctx: Context) -> list[Point]:
    """With pairs=auto: CE copies of every pair at the matrix sizes and of one pair per link class
    at the others; SM copies and latency on one pair per link class (a property of the link, and
    on 8 GPUs 56 pairs each); concurrent ops at the largest whole-machine size, bandwidth being
    their question. Otherwise every selected pair at every size."""
    pairs, auto = select_pairs(s.pairs, ctx.gpu_count), s.pairs == "auto"
    links = dict(ctx.links)
    machine = machine_sizes(ctx.sizes)
    matrix = (min(ctx.sizes), max(machine))
    per_link = class_pairs(ctx.gpu_count, links) if auto else pairs
    ops, modes, engines = ([str(x) for x in values] for values in (s.ops, s.modes, s.engine))
    name = P2P.name
    out = [Point(name, "latency", RING_BYTES, memory="device", mode="peer", backend="cuda", src=f"cuda:{i}",
                 dst=f"cuda:{j}", engine="sm") for i, j in per_link if "latency" in ops]
    for size in ctx.sizes:
        here = pairs_at_size(size, matrix, ctx.gpu_count, links) if auto else pairs
        for i, j in here:
            for op in (o for o in ops if o in PAIR_OPS):
                if op == "bidir" and (j, i) in here and j < i:
                    continue  # i<->j at once is one measurement, whichever way it is named
                for mode in modes:
                    for engine in engines:
                        if engine == "sm" and (mode != "peer" or size not in machine or (i, j) not in per_link):
                            continue  # a kernel copies directly, at whole-machine sizes
                        out.append(Point(name, op, size, memory="device", mode=mode, backend="cuda",
                                         src=f"cuda:{i}", dst=f"cuda:{j}", engine=engine))
        if (size == max(machine) if auto else size in machine) and "peer" in modes:
            out += [Point(name, op, size, memory="device", mode="peer", backend="cuda", world_size=count,
                          engine=engine, **_ends(op, f"cuda:{j}"))
                    for count in counts_at_once(s.together, ctx.gpu_count) for op in ops if op in CONCURRENT_OPS
                    for j in range(count) for engine in engines]
    return out


def _ends(op: str, one: str) -> dict[str, str]:
    """src and dst of a concurrent op: every other GPU ('all') into or out of the one GPU."""
    return {"src": ALL, "dst": one} if op == "all_to_one" else {"src": one, "dst": ALL}


def _copy_once(dst, src, staging, s_src, s_dst, copy) -> None:
    """One copy src -> dst, direct (with `copy`) or via `staging`; it ends on the source GPU's stream."""
    if staging is None:
        with torch.cuda.stream(s_src):
            copy(dst, src)
        return
    with torch.cuda.stream(s_src):
        staging.copy_(src, non_blocking=True)
    s_dst.wait_stream(s_src)
    with torch.cuda.stream(s_dst):
        dst.copy_(staging, non_blocking=True)
    s_src.wait_stream(s_dst)  # the next copy into `staging` waits for this one to be read


def _enqueue(legs: list[tuple], n: int) -> dict:
    """All legs at once, each on its source GPU's stream, forked from and joined to the current one.

    The first copy of each leg is enqueued, then the rest of each, so a second leg starts one
    launch after the first rather than after all of the first's n launches: the span of a
    bidirectional copy is its two directions side by side, not one direction's head start."""
    cur = torch.cuda.current_stream()
    start = torch.cuda.Event(enable_timing=True)
    start.record(cur)
    parts = {}
    for name, (_, _, _, s_src, _, _) in legs:
        s_src.wait_event(start)
        begin = torch.cuda.Event(enable_timing=True)
        begin.record(s_src)
        parts[name] = [begin]
    for count in (min(n, 1), n - 1):
        for _, leg in legs:
            for _ in range(count):
                _copy_once(*leg)
    for name, (_, _, _, s_src, _, _) in legs:
        end = torch.cuda.Event(enable_timing=True)
        end.record(s_src)
        parts[name] = (parts[name][0], end)
    # Join only once every leg is enqueued: torch orders a cross-GPU copy after the destination
    # GPU's current stream, so an early join would queue the reverse leg behind the forward one.
    for _, (_, _, _, s_src, _, _) in legs:
        cur.wait_stream(s_src)
    return parts if len(legs) > 1 else {}


def _gpu(name: str) -> int:
    return int(name.split(":")[1])


def _no_peer_access(workers_and_peers) -> str:
    """Why SM kernels cannot run: the first (worker, peer) without peer access, or ''."""
    for worker, peer in workers_and_peers:
        if not torch.cuda.can_device_access_peer(worker, peer):
            return f"cuda:{worker} has no peer access to cuda:{peer}: its SMs cannot reach that memory"
    return ""


def _measure_pair(point: Point, ctx: Context, state: P2PState) -> list[Sample]:
    i, j, n = _gpu(point.src), _gpu(point.dst), point.size_bytes
    directions = [("fwd", i, j)] + ([("rev", j, i)] if point.op == "bidir" else [])
    if point.engine == "sm" and (why := _no_peer_access((a, b) for _, a, b in directions)):
        return [point.skipped(why)]
    copy = kernels.sm_copy if point.engine == "sm" else kernels.ce_copy   # sm: the source GPU's kernel pushes
    legs, checks = [], []
    for name, a, b in directions:
        dst, src = state.buffer("dst", b)[:n], state.buffer("src", a)[:n]
        staging = state.buffer(f"host_{name}", None)[:n] if point.mode == "staged" else None
        dst.zero_()
        legs.append((name, (dst, src, staging, state.stream(a, name), state.stream(b, name), copy)))
        checks.append((dst, src))
    note = ""
    if point.mode == "peer" and point.engine != "sm" and not torch.cuda.can_device_access_peer(i, j):
        note = "no peer access between these GPUs: the driver staged the copy"
    with torch.cuda.device(i):
        trials = timing.measure(partial(_enqueue, legs), EventClock(), ctx.timing)
        torch.cuda.synchronize(i)
        torch.cuda.synchronize(j)
    verified = all(same_data(dst, src) for dst, src in checks)
    return trial_rows(point, trials, n * len(directions), 1.0, verified, note)


def _ce_peer(dst, src, barrier, n: int) -> None:
    """n copies on the source GPU's current stream. torch joins a copy between GPUs with the
    destination GPU's current stream at both ends; a stream of the lane's own there (`barrier`)
    keeps the lanes into one GPU from waiting on each other through it."""
    with torch.cuda.stream(barrier):
        for _ in range(n):
            dst.copy_(src, non_blocking=True)


def _lane(point: Point, streams: Streams, gpus: int, k: int, reader: int, writer: int, dst, src) -> Lane:
    """The k-th peer's lane: CE copies on the source GPU's stream, SM copies by the GPU that
    moves the data across (the writer pushes for all_to_one, the reader pulls for one_to_all)."""
    if point.engine == "sm":
        gpu = writer if point.op == "all_to_one" else reader
        return Lane(gpu, streams(gpu)[1 + k], partial(_sm_copies, dst, src, gpu))
    barrier = streams(reader)[gpus + k]   # past the lanes: [1, gpus - 1] are lanes
    return Lane(writer, streams(writer)[1 + k], partial(_ce_peer, dst, src, barrier))


def _sm_copies(dst, src, gpu: int, n: int) -> None:
    for _ in range(n):
        kernels.sm_copy(dst, src, gpu)


def _measure_concurrent(point: Point, ctx: Context, state: P2PState) -> list[Sample]:
    """Every other GPU with `one` at once: one lane per peer, each with its own buffers."""
    one, n = _gpu(point.dst if point.op == "all_to_one" else point.src), point.size_bytes
    peers = [i for i in range(point.world_size) if i != one]
    if point.engine == "sm" and (why := _no_peer_access((i, one) for i in peers)):   # each peer's kernel reaches `one`
        return [point.skipped(why)]
    parts, checks = {}, []
    for k, i in enumerate(peers):
        if point.op == "all_to_one":   # peer i writes into its own slot on `one`
            reader, writer, dst = one, i, state.buffer("gather", one)[k * n:(k + 1) * n]
        else:                          # peer i reads `one`'s source
            reader, writer, dst = i, one, state.buffer("dst", i)[:n]
        src = state.buffer("src", writer)[:n]
        dst.zero_()
        parts[f"cuda:{i}"] = [_lane(point, state.lanes, ctx.gpu_count, k, reader, writer, dst, src)]
        checks.append((dst, src))
    together = Together(parts, state.lanes)
    trials = timing.measure(together, SpanClock(), ctx.timing)
    sync_all(range(point.world_size))
    verified = all(same_data(dst, src) for dst, src in checks)
    return trial_rows(point, trials, n * len(peers), 1.0, verified, together.note(trials))


def _measure_latency(point: Point, ctx: Context, state: P2PState) -> list[Sample]:
    owner, reader = _gpu(point.src), _gpu(point.dst)   # the ring lives on src; dst's SMs chase it
    if why := _no_peer_access([(reader, owner)]):
        return [point.skipped(why)]
    chase = Chase(state.ring(owner), reader)
    with torch.cuda.device(reader):
        trials = timing.measure(chase, EventClock(), ctx.timing)
    return trial_rows(point, trials, math.nan, 1.0, chase.verified(), LATENCY_NOTE)


# ---------------------------------------------------------------- reading the rows


def peak_table(frame: pd.DataFrame, by: list[str] = ()) -> pd.DataFrame:
    """Per (by..., op, mode, src, dst): the peak over sizes of the per-size median GB/s of pair ops
    (uni, bidir); SM copies get matrices of their own, their mode named 'peer sm'."""
    ok = usable_rows(frame)
    ok = ok[(ok.suite == P2P.name) & ok.algbw_gbps.notna() & ok.op.isin(PAIR_OPS)]
    ok = ok.assign(mode=ok["mode"].where(ok["engine"] != "sm", ok["mode"] + " sm"))
    keys = [*by, "op", "mode", "src", "dst"]
    medians = ok.groupby(keys + ["size_bytes"], sort=False).algbw_gbps.median()
    return medians.groupby(level=keys, sort=False).max().reset_index()


def matrices(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """'op mode' -> src x dst table of peak GB/s (max over sizes of the per-size median)."""
    peaks = peak_table(frame)
    return {f"{op} {mode}": group.pivot(index="src", columns="dst", values="algbw_gbps").round(1)
            for (op, mode), group in peaks.groupby(["op", "mode"], sort=False)}


def concurrent_table(frame: pd.DataFrame, by: list[str] = ()) -> pd.DataFrame:
    """all_to_one / one_to_all, long form: the traffic into or out of each GPU at the largest size.
    xferbench names the one GPU in dst (all_to_one) or src (one_to_all), part total; nvbandwidth's
    import names it in part, src and dst being 'all'."""

    by = list(by)
    ok = frame[(frame.status == "ok") & frame.algbw_gbps.notna()]
    peer = ok[(ok.suite == P2P.name) & ok.op.isin(CONCURRENT_OPS)]
    imported = ((peer.src == ALL) & (peer.dst == ALL)).to_numpy()
    part_total, part_gpu = (peer.part == "total").to_numpy(), peer.part.str.startswith("cuda:").to_numpy()
    peer = peer[(~imported & part_total) | (imported & part_gpu)]
    rows = []
    for keys, group in peer.groupby(by + AT_ONCE_KEYS, sort=False):
        size = group.size_bytes.max()
        at = group[group.size_bytes == size]
        one = np.where((at.src == ALL) & (at.dst == ALL), at.part, np.where(at.op == "all_to_one", at.dst, at.src))
        base = {**dict(zip(by + AT_ONCE_KEYS, keys)), "size_bytes": size, "when": "at once"}
        rows += [{**base, "gpu": gpu, "gbps": v} for gpu, v in median_by(at, one).items()]
    return pd.DataFrame(rows, columns=[*by, *CONCURRENT_COLUMNS])


DIRECT = (("mode", ("peer", "read", "write")), ("world_size", ("1",)))   # nvbandwidth's peer copies: read or write
PLATEAU = 256 << 20   # where the reference curves level off (within 2% of their 1 GiB figure)


class P2P(Suite):
    name = "p2p"
    Settings = Settings
    sizes = SizeRange("4KiB", "1GiB", ["4KiB:x4", "1MiB:x2", "16MiB:x4"])
    groups = ("links",)
    order = 20
    overhead = {"cuda": Overhead(0.03, 0.01e-9, 0.005, 1.0, 30e-6)}
    # Between-run sigma of log time (scripts/noise_study.py): 3 identical runs on nvidia-h200-x2
    # (results/noise/h200-x2); latency-bound, the trials read at the host's usual pace moved 0.02
    # to 0.06 between four identical runs of one 4x H200 host (results/noise/h200-x4/identical).
    noise = {("gpu", "latency"): 0.07, ("gpu", "bandwidth"): 0.009}
    # Shares of link theory (docs/judging.md), from 256 MiB on, 2x H200 over NV18: peer copies
    # 0.86-0.88 of NVLink one way, 0.82-0.85 both ways; SM kernels 0.81 and 0.74; all_to_one and
    # one_to_all 0.86 (ce) and 0.82 (sm); staged through the host 0.43-0.44 of PCIe.
    efficiency = {("uni", "peer", "ce"): 0.86, ("bidir", "peer", "ce"): 0.82, ("uni", "peer", "sm"): 0.81,
                  ("bidir", "peer", "sm"): 0.74, ("all_to_one", "peer", "ce"): 0.86, ("one_to_all", "peer", "ce"): 0.86,
                  ("all_to_one", "peer", "sm"): 0.82, ("one_to_all", "peer", "sm"): 0.82,
                  ("uni", "staged", "ce"): 0.43, ("bidir", "staged", "ce"): 0.43}
    headline = (
        Metric("P2P one way, peer", "p2p", "uni", DIRECT),
        Metric("P2P both ways, peer (sum)", "p2p", "bidir", DIRECT),
    )

    def check(self, s: Settings, ctx: Context) -> str | None:
        if ctx.device != "cuda" or ctx.gpu_count < 2:
            return f"needs 2 or more GPUs, found {ctx.gpu_count}"
        pairs = select_pairs(s.pairs, ctx.gpu_count)
        if ctx.here:
            kernels.need([w for w, on in (("p2p.engine=sm", Engine.sm in s.engine and P2PMode.peer in s.modes),
                                          ("p2p.ops=latency", P2POp.latency in s.ops)) if on])
        planned = sweep(s, ctx)
        if not ctx.here:
            return None
        concurrent = any(p.op in CONCURRENT_OPS for p in planned)
        gpus = sorted({d for pair in pairs for d in pair} | (set(range(ctx.gpu_count)) if concurrent else set()))
        # all_to_one gathers every peer's copy on the one GPU: a slot of sizes.max per peer
        gather = ctx.gpu_count - 1 if any(p.op == "all_to_one" for p in planned) else 0
        check_fits(f"p2p ({2 + gather} x sizes.max per GPU)", (2 + gather) * max(ctx.sizes), gpus)
        return None

    def points(self, s: Settings, ctx: Context) -> list[Point]:
        return sweep(s, ctx)

    def start(self, s: Settings, ctx: Context) -> P2PState:
        return P2PState(ctx)

    def measure(self, point: Point, s: Settings, ctx: Context, state: P2PState) -> list[Sample]:
        if point.op == "latency":
            return _measure_latency(point, ctx, state)
        if point.op in CONCURRENT_OPS:
            return _measure_concurrent(point, ctx, state)
        return _measure_pair(point, ctx, state)

    def op_time(self, point: Point, speeds: Speeds) -> float:
        size, pcie = point.size_bytes, speeds.pcie() * 0.87
        nvlink = speeds.nvlink(speeds.pair(point.src, point.dst))
        link = pcie / 2 if point.mode == "staged" else (0.87 * nvlink if nvlink else 0.8 * pcie)
        moved, both = (2 * size, 1.9) if point.op == "bidir" else (size, 1.0)
        return (80e-6 if point.mode == "staged" else 25e-6) + moved / (link * both * 1e9)

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
        out = [(f"p2p {name}: peak GB/s, rows src, columns dst", matrix.fillna("-"))
               for name, matrix in matrices(frame).items()]
        concurrent = concurrent_table(frame)
        if not concurrent.empty:
            out.append(("every GPU with one GPU at once: GB/s into or out of the one GPU", format_concurrent(concurrent)))
        latency = latency_table(frame[frame.suite == self.name])
        if not latency.empty:
            out.append(("peer link latency: ns per dependent 8-byte load by dst's SMs of memory on src", latency))
        return out

    def figures(self, frame: pd.DataFrame, canvas) -> list:
        # figures load matplotlib: imported when one is drawn, not by a measuring run
        from bench.analysis.figures import bars, matrix

        paths = matrix.heatmaps(peak_table(frame, [canvas.SERIES]), canvas, "p2p_heatmap",
                                "P2P peak bandwidth, {series}\nGB/s, the highest per-size median over sizes")
        return paths + bars.concurrent(concurrent_table(frame, [canvas.SERIES]), canvas, "concurrent_p2p",
                                       "Every GPU with one GPU at once: GB/s into or out of it")

    def link_limit(self, row) -> tuple[float, str]:
        both = 2 if row["op"] == "bidir" else 1
        if row["mode"] == "staged":
            return pcie_gbps(row["pcie_gen"], row["pcie_width"]) * both, "PCIe"
        return pd.to_numeric(row["nvlink_gbps_per_gpu"], errors="coerce") * both, "NVLink"

    def expectation(self, row) -> tuple[float, float, str] | None:
        if row["op"] == "latency":
            return None
        both = 2 if row["op"] == "bidir" else 1
        mode = "staged" if row["mode"] == "staged" else "peer"   # imported: nvbandwidth's read and write
        share = self.efficiency.get((row["op"], mode, row["engine"]), math.nan)
        share = share if int(row["size_bytes"]) >= PLATEAU else math.nan
        pcie = pcie_gbps(row["pcie_gen"], row["pcie_width"]) * both
        pcie_name = f"PCIe Gen{int(row['pcie_gen'])} x{int(row['pcie_width'])}" if pcie > 0 else ""
        if mode == "staged":
            return (pcie, share, f"{pcie_name}, staged through host memory") if pcie > 0 else None
        pair = str(row.get("link_class") or "")
        links = nvlink_links(pair)
        if links:
            return links * NVLINK_LINK_GBPS * both, share, f"NVLink ({pair})"
        if pair:   # two GPUs joined by PCIe (PIX, PXB, PHB, NODE, SYS): no measured share
            return (pcie, math.nan, f"{pcie_name} ({pair})") if pcie > 0 else None
        gbps, _ = self.link_limit(row)   # every GPU with one GPU, or a pair not recorded: its NVLink
        return (float(gbps), share, "NVLink") if gbps > 0 else None
