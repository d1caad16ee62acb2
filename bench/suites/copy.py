"""Host<->device and device<->device copies, one GPU at a time or every GPU at once, and link latency.

Ops: h2d, d2h, bidir (both at once on two streams), d2d (within one GPU: the HBM ceiling), and
latency (one GPU's dependent 8-byte loads around a 2 MiB ring in pinned host memory, bench.kernels'
pointer chase; time_s is seconds per access and there is no bandwidth). Host memory is pinned or
pageable; copies go through the copy engines (engine 'ce', Tensor.copy_) or a Triton copy kernel
on the GPU's SMs (engine 'sm', pinned memory only).

Which GPUs (copy.gpus): the first GPU selected gets the full sweep (every op, memory, launch and
size). Whole-machine traffic -- each other selected GPU alone, and every GPU at once ('all') --
is pinned h2d, d2h and bidir at a few sizes (machine_sizes(): the largest up to 256 MiB, and
every x16 step below it down to 1 MiB), and so are SM copies, of the first GPU alone and of
every GPU at once: bandwidth is the question there, and points cost time. 'all' gives one row
per GPU (part cuda:i) plus the total; src/dst name it 'all'.

Every GPU at once: each GPU copies on its own streams and buffers. Together holds every GPU's
copies behind a sleep kernel until all are enqueued, so the host's enqueue cost stays out; each
GPU's span is timed on its own clock (events of two GPUs cannot be compared), and the total is
every GPU's bytes over the longest span.

Host buffers are placed by copy.numa (bench.numa): on the GPU's NUMA node (local), the farthest
node (remote) or wherever first touch puts them (none), and the copying thread runs on that
node's CPUs; each row's note says where. Points come grouped by mode, and a mode's host buffers
are freed when the next mode begins.

Buffers are allocated once at the largest size and sliced per point. Sources hold random bytes
(seeded per GPU, so a mixed-up buffer fails the check); destinations are zeroed before each point
and compared with the source after the timed copies, so a point whose data did not arrive is
recorded as failed. Without a GPU the suite measures host-to-host copies (op 'h2h') so the whole
pipeline still runs.
"""
from __future__ import annotations

import math
import sys
import time
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, ContextManager, List

import torch

from bench import ConfigError, kernels, numa, timing
from bench.results import Sample
from bench.settings import Choice, nonempty
from bench.suites import Context, Point, check_fits, check_host_fits, trial_rows
from bench.timing import EventClock, HostClock, Trial

NAME = "copy"
DISTRIBUTED = False

# Whole-machine sizes: the largest up to 256 MiB (on the committed 2x H200 runs copies there move
# within 2% of their 1 GiB rate, at a quarter of the time), then every x16 step below it down to
# 1 MiB (below it the host's enqueue rate, not the link, sets the pace).
MACHINE_MAX_BYTES = 256 << 20
MACHINE_STEP = 16
MACHINE_MIN_BYTES = 1 << 20
RING_BYTES = 2 << 20          # the latency ring, as nvbandwidth's latency tests use
EACH, ALL = "each", "all"


class CopyOp(Choice):
    h2d = "h2d"
    d2h = "d2h"
    bidir = "bidir"
    d2d = "d2d"
    latency = "latency"


class HostMemory(Choice):
    pinned = "pinned"
    pageable = "pageable"


class Engine(Choice):
    ce = "ce"   # the copy engines, through cudaMemcpyAsync
    sm = "sm"   # a Triton copy kernel: the SMs load and store across the link


class NumaMode(Choice):
    local = "local"
    remote = "remote"
    none = "none"


HOST_OPS = ("h2d", "d2h", "bidir")


@dataclass
class Settings:
    ops: List[CopyOp] = field(default_factory=lambda: list(CopyOp))
    memory: List[HostMemory] = field(default_factory=lambda: list(HostMemory))
    # each (every GPU alone), all (every GPU at once) or GPU indices: strings, as the items mix kinds
    gpus: List[str] = field(default_factory=lambda: [EACH, ALL])
    engine: List[Engine] = field(default_factory=lambda: list(Engine))
    numa: List[NumaMode] = field(default_factory=lambda: [NumaMode.local])

    def __post_init__(self) -> None:
        for key in ("ops", "memory", "gpus", "engine", "numa"):
            nonempty(f"copy.{key}", getattr(self, key))
        for item in self.gpus:
            if item not in (EACH, ALL) and not str(item).isdigit():
                raise ConfigError(f"copy.gpus: {item!r} is not each, all or a GPU index")


# ---------------------------------------------------------------- planning


@dataclass(frozen=True)
class Selection:
    alone: tuple[int, ...]   # GPUs measured by themselves, in order; the first gets the full sweep
    together: bool           # every GPU at once (needs two or more)


def select_gpus(spec: list[str], count: int) -> Selection:
    """copy.gpus on a machine with `count` GPUs; ConfigError for an index it does not have."""
    alone: list[int] = []
    for item in spec:
        if item == EACH:
            alone += range(count)
        elif item != ALL:
            if int(item) >= count:
                raise ConfigError(f"copy.gpus: GPU {item} does not exist; this machine has {count} (0..{count - 1})")
            alone.append(int(item))
    return Selection(tuple(dict.fromkeys(alone)), ALL in spec and count >= 2)


def machine_sizes(sizes: list[int]) -> list[int]:
    """The sweep's sizes that whole-machine points use: its largest up to MACHINE_MAX_BYTES, then
    each size at least MACHINE_STEP times below the last one kept, down to MACHINE_MIN_BYTES
    (4 KiB to 1 GiB: 1 MiB, 16 MiB, 256 MiB)."""
    kept = [max((s for s in sizes if s <= MACHINE_MAX_BYTES), default=min(sizes))]
    for size in sorted(sizes, reverse=True):
        if MACHINE_MIN_BYTES <= size <= kept[-1] // MACHINE_STEP:
            kept.append(size)
    return sorted(kept)


@dataclass(frozen=True)
class HostPlan:
    """Where each GPU's host buffers go in each NUMA mode, and what to say about it once per run."""

    places: dict[tuple[int, str], numa.Placement]   # (GPU, mode) -> placement; absent: mode skipped there
    lines: tuple[str, ...]


def host_plan(topo: numa.Topology, nodes: list[int | None], modes: list[str]) -> HostPlan:
    """Placements for GPUs whose NUMA nodes are `nodes` (None: unknown), in CUDA's order."""
    places: dict[tuple[int, str], numa.Placement] = {}
    skipped: dict[tuple[str, str], list[int]] = defaultdict(list)
    for mode in modes:
        for gpu, node in enumerate(nodes):
            place = numa.placement(topo, node, mode)
            if place is None:
                skipped[mode, numa.skip_reason(topo, node, mode)].append(gpu)
            else:
                places[gpu, mode] = place
    if len(topo.nodes) == 1:
        lines = ["one NUMA node: host memory is local to every GPU"]
    else:
        where = ", ".join(f"cuda:{g} node {'unknown' if n is None else n}" for g, n in enumerate(nodes))
        lines = [f"{len(topo.nodes)} NUMA nodes; {where}"]
    for (mode, reason), gpus in skipped.items():
        which = "" if len(gpus) == len(nodes) else " for " + ", ".join(f"cuda:{g}" for g in gpus)
        lines.append(f"copy.numa={mode} skipped{which}: {reason}")
    return HostPlan(places, tuple(lines))


def _host_plan(cfg, ctx: Context) -> HostPlan:
    """This machine's plan, read once per run (tests put a plan made from a fake topology in ctx.extra)."""
    if "copy_host_plan" not in ctx.extra:
        topo = numa.read_topology()
        nodes = [numa.gpu_node(topo, bus) for bus in numa.gpu_bus_ids()][:ctx.gpu_count]
        nodes += [None] * (ctx.gpu_count - len(nodes))
        ctx.extra["copy_host_plan"] = host_plan(topo, nodes, [str(m) for m in cfg.copy.numa])
    return ctx.extra["copy_host_plan"]


def need_triton(wanted: list[str]) -> None:
    """ConfigError in one line when settings in `wanted` (e.g. 'copy.engine=sm') need Triton and it is missing."""
    if wanted and not kernels.available():
        raise ConfigError(f"{' and '.join(wanted)} {'run' if len(wanted) > 1 else 'runs'} Triton kernels, and triton "
                          "is not installed "
                          "(CUDA builds of torch ship it): pip install triton, or leave them out")


def cpu_dropped(cfg, explicit: frozenset[str]) -> str:
    """The copy settings the user named that a run without a GPU cannot honour (it measures pageable
    host-to-host copies), as one note; '' when there are none."""
    dropped = {
        "ops": [str(o) for o in cfg.copy.ops],   # every copy op involves a GPU
        "memory": [str(m) for m in cfg.copy.memory if m == HostMemory.pinned],
        "gpus": [g for g in cfg.copy.gpus if g != EACH],
        "engine": [str(e) for e in cfg.copy.engine if e == Engine.sm],
        "numa": [str(n) for n in cfg.copy.numa if n != NumaMode.none],
    }
    named = [f"copy.{key}=[{','.join(items)}]" for key, items in dropped.items() if items and f"copy.{key}" in explicit]
    return f"no GPU: {', '.join(named)} measured as pageable host-to-host copies" if named else ""


def check(cfg, ctx: Context) -> str | None:
    biggest = max(ctx.sizes)
    if ctx.device != "cuda":
        check_host_fits("the copy suite (2 x sizes.max)", 2 * biggest)   # h2h: a source and a destination
        ctx.extra["copy_cpu_note"] = note = cpu_dropped(cfg, ctx.explicit)
        if note:
            print(f"xferbench: copy: {note}", file=sys.stderr)
        return None
    selection = select_gpus(cfg.copy.gpus, ctx.gpu_count)
    need_triton([w for w, on in (("copy.engine=sm", Engine.sm in cfg.copy.engine),
                                 ("copy.ops=latency", CopyOp.latency in cfg.copy.ops)) if on])
    lines = list(_host_plan(cfg, ctx).lines)
    if ALL in cfg.copy.gpus and not selection.together:
        lines.append(f"copy.gpus=all skipped: needs 2 or more GPUs, found {ctx.gpu_count}")
    for line in lines:
        print(f"xferbench: copy: {line}", file=sys.stderr)
    planned = points(cfg, ctx)
    if not planned:
        return "nothing to measure with these copy settings"
    check_fits("the copy suite (2 x sizes.max)", 2 * biggest, sorted({g for p in planned for g in _gpus(p)}))
    # Host buffers: a source and a destination per GPU and host memory kind, one NUMA mode at a time.
    per_mode = defaultdict(set)
    for p in planned:
        if p.memory in ("pinned", "pageable") and p.op != "latency":
            per_mode[p.numa] |= {(g, p.memory) for g in _gpus(p)}
    buffers = 2 * max((len(v) for v in per_mode.values()), default=0)
    check_host_fits(f"the copy suite's host buffers ({buffers} x sizes.max)", buffers * biggest)
    return None


def _gpus(p: Point) -> list[int]:
    if ALL in (p.src, p.dst):
        return list(range(p.world_size))
    return sorted({int(x.split(":")[1]) for x in (p.src, p.dst) if x.startswith("cuda:")})


def points(cfg, ctx: Context) -> list[Point]:
    if ctx.device == "cpu":
        return [Point(NAME, "h2h", s, memory="pageable", backend="cpu", src="host", dst="host") for s in ctx.sizes]
    selection = select_gpus(cfg.copy.gpus, ctx.gpu_count)
    plan = _host_plan(cfg, ctx)
    out: list[Point] = []
    for mode in (str(m) for m in cfg.copy.numa):
        for k, gpu in enumerate(selection.alone):
            if (gpu, mode) in plan.places:
                out += _alone_points(cfg, ctx, gpu, mode, full=k == 0)
        if selection.together and all((g, mode) in plan.places for g in range(ctx.gpu_count)):
            out += _together_points(cfg, ctx, mode)
    if selection.alone and CopyOp.d2d in cfg.copy.ops:
        dev = f"cuda:{selection.alone[0]}"
        out += [Point(NAME, "d2d", size, memory="device", backend="cuda", src=dev, dst=dev, launch=launch, engine="ce")
                for size in ctx.sizes for launch in ctx.launches
                if launch == "eager" or size <= ctx.graph_max_bytes]
    return out


def _alone_points(cfg, ctx: Context, gpu: int, mode: str, full: bool) -> list[Point]:
    """One GPU by itself: the full sweep, or (not full) pinned copies at the whole-machine sizes."""
    dev, machine = f"cuda:{gpu}", machine_sizes(ctx.sizes)
    out = []
    if CopyOp.latency in cfg.copy.ops:
        out.append(Point(NAME, "latency", RING_BYTES, memory="pinned", backend="cuda", src="host", dst=dev,
                         engine="sm", numa=mode))
    for size in ctx.sizes if full else machine:
        for op in (str(o) for o in cfg.copy.ops if o in HOST_OPS):
            src, dst = (dev, "host") if op == "d2h" else ("host", dev)
            for mem in (str(m) for m in cfg.copy.memory):
                if (op == "bidir" or not full) and mem == "pageable":
                    continue  # pageable copies block the host thread, so they cannot overlap
                for engine in (str(e) for e in cfg.copy.engine):
                    if engine == "sm" and (mem != "pinned" or size not in machine or not full):
                        continue  # kernels reach pinned memory only; SM copies at whole-machine sizes, of one GPU alone
                    for launch in ctx.launches:
                        graphable = full and mem == "pinned" and op != "bidir" and size <= ctx.graph_max_bytes
                        if launch == "eager" or graphable:
                            out.append(Point(NAME, op, size, memory=mem, backend="cuda", src=src, dst=dst,
                                             launch=launch, engine=engine, numa=mode))
    return out


def _together_points(cfg, ctx: Context, mode: str) -> list[Point]:
    if HostMemory.pinned not in cfg.copy.memory:
        return []
    return [Point(NAME, op, size, memory="pinned", backend="cuda", src=ALL if op == "d2h" else "host",
                  dst="host" if op == "d2h" else ALL, world_size=ctx.gpu_count, engine=str(engine), numa=mode)
            for size in machine_sizes(ctx.sizes)
            for op in (str(o) for o in cfg.copy.ops if o in HOST_OPS)
            for engine in cfg.copy.engine]


# ---------------------------------------------------------------- buffers and streams


class _Store:
    """Buffers made on first use and sliced for every point: a source and a destination on each
    GPU, and each GPU's host buffers for one NUMA mode at a time. Each GPU's are as large as its
    largest point: GPUs with only whole-machine points need no 1 GiB host buffers placed and
    pinned (about half a second a GiB)."""

    def __init__(self, sizes: dict[int, int], plan: HostPlan) -> None:
        self.sizes, self.plan = sizes, plan
        self._device: dict[tuple[int, str], torch.Tensor] = {}
        self._host: dict[tuple, torch.Tensor] = {}
        self._mode: str | None = None

    def device(self, gpu: int, name: str) -> torch.Tensor:
        if (gpu, name) not in self._device:
            where = f"cuda:{gpu}"
            if name == "src":
                seeded = torch.Generator(device=where).manual_seed(gpu + 1)
                buf = torch.randint(0, 256, (self.sizes[gpu],), dtype=torch.uint8, device=where, generator=seeded)
            else:
                buf = torch.empty(self.sizes[gpu], dtype=torch.uint8, device=where)
            self._device[gpu, name] = buf
        return self._device[gpu, name]

    def _use(self, mode: str) -> None:
        if mode != self._mode:
            self._host.clear()   # the last mode's buffers: their pages are unpinned as they are freed
            self._mode = mode

    def host(self, gpu: int, mode: str, memory: str, name: str) -> torch.Tensor:
        """`name` (src, dst) in `memory` (pinned, pageable) placed for `gpu` as `mode` says."""
        self._use(mode)
        if (gpu, memory, name) not in self._host:
            cpus = self.plan.places[gpu, mode].cpus
            buf = (numa.allocate_pinned_on if memory == "pinned" else numa.allocate_on)(cpus, self.sizes[gpu])
            if name == "src":
                buf.copy_(self.device(gpu, "src"))
            self._host[gpu, memory, name] = buf
        return self._host[gpu, memory, name]

    def ring(self, gpu: int, mode: str) -> torch.Tensor:
        """A pointer-chase ring in pinned host memory placed like the GPU's host buffers."""
        self._use(mode)
        if (gpu, "ring", "") not in self._host:
            ring = numa.allocate_pinned_on(self.plan.places[gpu, mode].cpus, RING_BYTES).view(torch.int64)
            ring.copy_(kernels.make_ring(RING_BYTES))
            self._host[gpu, "ring", ""] = ring
        return self._host[gpu, "ring", ""]


def _store(cfg, ctx: Context) -> _Store:
    if "copy_store" not in ctx.extra:
        largest: dict[int, int] = defaultdict(int)
        for p in points(cfg, ctx):
            for gpu in _gpus(p):
                largest[gpu] = max(largest[gpu], p.size_bytes)
        ctx.extra["copy_store"] = _Store(largest, _host_plan(cfg, ctx))
    return ctx.extra["copy_store"]


def lane_streams(ctx: Context, gpu: int) -> list[torch.cuda.Stream]:
    """This GPU's streams for copies on several streams at once: [0] a latch, then lanes.

    Made together: torch hands streams out round-robin from a pool of 32 per GPU, so streams made
    far apart may be one CUDA stream, and two lanes on one stream would run one after the other.
    Enough for a lane and a barrier stream per peer (bench.suites.p2p's concurrent ops).
    """
    made = ctx.extra.setdefault("copy_streams", {})
    if gpu not in made:
        made[gpu] = [torch.cuda.Stream(device=gpu) for _ in range(1 + 2 * max(2, ctx.gpu_count - 1))]
    return made[gpu]


def sync_all(gpus) -> None:
    for gpu in gpus:
        torch.cuda.synchronize(gpu)


# ---------------------------------------------------------------- enqueueing copies


def ce_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.copy_(src, non_blocking=True)


def copier(engine: str) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One copy on the current stream. SM: the GPU pulls from host memory and pushes to it."""
    return kernels.sm_copy if engine == "sm" else ce_copy


def _copies(dst: torch.Tensor, src: torch.Tensor, copy: Callable, n: int) -> None:
    for _ in range(n):
        copy(dst, src)


def _bidir(h2d: tuple, d2h: tuple, pair: tuple, copy: Callable, n: int) -> dict:
    """n copies each way on two streams at once; returns each stream's end event."""
    cur = torch.cuda.current_stream()
    ends = {}
    for name, (dst, src), stream in (("h2d", h2d, pair[0]), ("d2h", d2h, pair[1])):
        stream.wait_stream(cur)
        with torch.cuda.stream(stream):
            _copies(dst, src, copy, n)
            ends[name] = torch.cuda.Event(enable_timing=True)
            ends[name].record(stream)
    for stream in pair:
        cur.wait_stream(stream)
    return ends


@dataclass(frozen=True)
class Lane:
    """One stream's share of a point that runs on several streams at once."""

    gpu: int                             # the GPU the stream belongs to
    stream: torch.cuda.Stream
    enqueue: Callable[[int], None]       # puts n copies on the current stream


SLEEP_HZ_GUESS = 2.5e9   # cycles per second of torch.cuda._sleep's spin: above any GPU's SM clock, so sleeps err long
MAX_HOLD_S = 0.5


@dataclass
class _Call:
    n: int
    enqueue_s: float
    sleeps: dict[int, tuple[int, torch.cuda.Event, torch.cuda.Event]]   # GPU -> (cycles, sleep start, begin)

    def slept_s(self) -> float:
        """The shortest sleep any GPU actually had, by its own clock."""
        return min(start.elapsed_time(begin) / 1e3 for _, start, begin in self.sleeps.values())


class Together:
    """An enqueue(n) for the timing core: n copies on every lane, started at once on every GPU.

    Each GPU's first stream (the latch) sleeps for longer than the host takes to enqueue every
    copy, then records `begin`, which every lane on that GPU waits for: the copies queue up behind
    the latch and start together, so enqueue cost stays out of the timing. The sleep is sized from
    the last call's enqueue time; afterwards each GPU's own clock says how long it slept, and the
    calls where a sleep ended before the host was done are counted (note()). A part (a GPU, or one
    peer's traffic) is timed from its GPU's begin to the last of its lanes' ends (SpanClock).
    A GPU's lanes plus its latch stay within CUDA's 8 hardware queues per GPU for up to 8 GPUs;
    beyond that, streams share queues and can wait on each other.
    """

    def __init__(self, parts: dict[str, list[Lane]], ctx: Context) -> None:
        self.parts = parts
        self.gpus = sorted({lane.gpu for lanes in parts.values() for lane in lanes})
        self.latches = {gpu: lane_streams(ctx, gpu)[0] for gpu in self.gpus}
        self.per_op_s = 50e-6
        self.calls: list[_Call] = []
        self._hz = {gpu: SLEEP_HZ_GUESS for gpu in self.gpus}
        for lanes in parts.values():   # compile kernels and enable peer access before any call is sized
            for lane in lanes:
                with torch.cuda.stream(lane.stream):
                    lane.enqueue(1)
        sync_all(self.gpus)

    def _learn_clock(self) -> None:
        # The last call is done (SpanClock waited for it): a clock faster than the guess lengthens later sleeps.
        if self.calls:
            for gpu, (cycles, start, begin) in self.calls[-1].sleeps.items():
                self._hz[gpu] = max(self._hz[gpu], cycles / max(start.elapsed_time(begin) / 1e3, 1e-9))

    def __call__(self, n: int) -> dict:
        self._learn_clock()
        ops = n * sum(len(lanes) for lanes in self.parts.values())
        hold = min(MAX_HOLD_S, 1.5 * self.per_op_s * ops + 200e-6)
        t0 = time.perf_counter()
        sleeps, begins = {}, {}
        for gpu, latch in self.latches.items():
            with torch.cuda.stream(latch):
                start, begins[gpu] = _event(), _event()
                cycles = int(hold * self._hz[gpu])
                start.record()
                torch.cuda._sleep(cycles)
                begins[gpu].record()
            sleeps[gpu] = (cycles, start, begins[gpu])
        ends: dict[str, list[torch.cuda.Event]] = {}
        for name, lanes in self.parts.items():
            for lane in lanes:
                with torch.cuda.stream(lane.stream):
                    lane.stream.wait_event(begins[lane.gpu])
                    lane.enqueue(n)
                    ends.setdefault(name, []).append(_event())
                    ends[name][-1].record()
        spent = time.perf_counter() - t0
        self.per_op_s = spent / ops
        self.calls.append(_Call(n, spent, sleeps))
        return {name: (begins[lanes[0].gpu], ends[name]) for name, lanes in self.parts.items()}

    def note(self, trials: list[Trial]) -> str:
        """What to say when the latch gave way in calls with the trials' iteration count."""
        n = trials[0].iters
        calls = [c for c in self.calls if c.n == n]
        late = sum(c.enqueue_s >= c.slept_s() for c in calls)
        return (f"start latch ran out before every copy was enqueued in {late} of {len(calls)} calls of "
                f"{n} copies: the GPUs may not have started together" if late else "")


def _event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)


class SpanClock:
    """Each part timed on its own GPU's clock, from its begin event to the last of its end events;
    a trial's time is the longest part's (events of two GPUs cannot be compared)."""

    def start(self) -> None:
        pass

    def stop(self, part_events) -> tuple[float, dict[str, float]]:
        spans = {}
        for name, (begin, ends) in part_events.items():
            for end in ends:
                end.synchronize()
            spans[name] = max(begin.elapsed_time(end) for end in ends) / 1e3
        return max(spans.values()), spans


class Chase:
    """An enqueue(n) for link latency: n dependent loads by `gpu`'s SMs, so the timing core's time
    per operation is the time per access. The loads go in launches of up to STEPS_PER_SM, each on
    the next SM in turn: a trial's time is an average over SMs, as nvbandwidth's is, rather than
    the latency of the one SM a single launch lands on; a launch's start costs under 0.5% of its
    loads' time."""

    STEPS_PER_SM = 1024

    def __init__(self, ring: torch.Tensor, gpu: int) -> None:
        self.ring, self.gpu = ring, gpu
        self.sms, self.next_sm = kernels.sm_count(gpu), 0
        self.last: tuple[int, torch.Tensor] | None = None

    def __call__(self, n: int) -> None:
        while n > 0:
            steps = min(n, self.STEPS_PER_SM)
            self.last = (steps, kernels.pointer_chase(self.ring, steps, self.gpu, self.next_sm))
            self.next_sm = (self.next_sm + 1) % self.sms
            n -= steps

    def verified(self) -> bool:
        """The GPU's last chase ended where the host's walk of the same ring does."""
        torch.cuda.synchronize(self.gpu)
        steps, out = self.last
        return int(out.item()) == kernels.follow(self.ring, steps)


LATENCY_NOTE = ("time_s: one dependent 8-byte load by the dst GPU's SMs of memory on src "
                f"(pointer chase, {kernels.LINE}-byte stride, 2 MiB ring, SMs in turn); no bandwidth")


# ---------------------------------------------------------------- measuring


def same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal contents, compared on the GPU when either tensor lives there."""
    device = a.device if a.device.type == "cuda" else b.device
    return torch.equal(a.to(device), b.to(device))


def place_note(place: numa.Placement | None) -> str:
    if place is None:
        return ""
    if place.node is None:
        return "host memory not bound to a NUMA node"
    return f"host memory on NUMA node {place.node}, copying thread on CPUs {numa.format_cpulist(place.cpus)}"


def _bound(cpus: frozenset[int]) -> ContextManager:
    return numa.bind_thread(cpus) if cpus else nullcontext()


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def measure(point: Point, cfg, ctx: Context) -> list[Sample]:
    if point.backend == "cpu":
        return _measure_h2h(point, ctx)
    if point.op == "latency":
        return _measure_latency(point, cfg, ctx)
    if ALL in (point.src, point.dst):
        return _measure_together(point, cfg, ctx)
    return _measure_alone(point, cfg, ctx)


def _measure_h2h(point: Point, ctx: Context) -> list[Sample]:
    if "copy_h2h" not in ctx.extra:
        size = max(ctx.sizes)
        ctx.extra["copy_h2h"] = (torch.empty(size, dtype=torch.uint8),
                                 torch.randint(0, 256, (size,), dtype=torch.uint8))
    dst, src = (buf[:point.size_bytes] for buf in ctx.extra["copy_h2h"])
    dst.zero_()
    trials = timing.measure(partial(_copies, dst, src, ce_copy), HostClock(), ctx.timing)
    return trial_rows(point, trials, point.size_bytes, 1.0, same_data(dst, src), ctx.extra.get("copy_cpu_note", ""))


def _legs(store: _Store, gpu: int, point: Point) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(dst, src) of each direction the point copies, sliced to its size."""
    n = point.size_bytes
    if point.op == "d2d":
        return [(store.device(gpu, "dst")[:n], store.device(gpu, "src")[:n])]
    host = partial(store.host, gpu, point.numa, point.memory)
    h2d = (store.device(gpu, "dst")[:n], host("src")[:n])
    d2h = (host("dst")[:n], store.device(gpu, "src")[:n])
    return {"h2d": [h2d], "d2h": [d2h], "bidir": [h2d, d2h]}[point.op]


def _measure_alone(point: Point, cfg, ctx: Context) -> list[Sample]:
    store = _store(cfg, ctx)
    gpu = _gpus(point)[0]
    legs = _legs(store, gpu, point)
    for dst, _ in legs:
        dst.zero_()
    place = None if point.op == "d2d" else store.plan.places[gpu, point.numa]
    copy = copier(point.engine)
    if point.op == "bidir":
        enqueue = partial(_bidir, legs[0], legs[1], tuple(lane_streams(ctx, gpu)[1:3]), copy)
    else:
        enqueue = partial(_copies, *legs[0], copy)
    with torch.cuda.device(gpu), _bound(place.cpus if place else frozenset()):
        # The host blocks in pageable copies: time them on the host.
        clock = HostClock(torch.cuda.synchronize) if point.memory == "pageable" else EventClock()
        timer = timing.measure_graph if point.launch == "graph" else timing.measure
        trials = timer(enqueue, clock, ctx.timing)
        torch.cuda.synchronize()
    verified = all(same_data(dst, src) for dst, src in legs)
    return trial_rows(point, trials, point.size_bytes * len(legs), 1.0, verified, place_note(place))


def _measure_together(point: Point, cfg, ctx: Context) -> list[Sample]:
    store, copy = _store(cfg, ctx), copier(point.engine)
    parts, checks, places = {}, [], {}
    for gpu in range(point.world_size):
        places[f"cuda:{gpu}"] = store.plan.places[gpu, point.numa]
        lanes = []
        for k, (dst, src) in enumerate(_legs(store, gpu, point)):
            dst.zero_()
            lanes.append(Lane(gpu, lane_streams(ctx, gpu)[1 + k], partial(_copies, dst, src, copy)))
            checks.append((dst, src))
        parts[f"cuda:{gpu}"] = lanes
    # One host thread enqueues for every GPU: it may run on any of their nodes' CPUs.
    with _bound(frozenset().union(*(p.cpus for p in places.values()))):
        together = Together(parts, ctx)
        trials = timing.measure(together, SpanClock(), ctx.timing)
    sync_all(range(point.world_size))
    verified = all(same_data(dst, src) for dst, src in checks)
    rows = trial_rows(point, trials, point.size_bytes * len(checks), 1.0, verified, together.note(trials))
    for row in rows:   # each GPU's rows say where its host memory is
        row.note = _join(row.note, place_note(places.get(row.part)))
    return rows


def _measure_latency(point: Point, cfg, ctx: Context) -> list[Sample]:
    store = _store(cfg, ctx)
    gpu = _gpus(point)[0]
    place = store.plan.places[gpu, point.numa]
    chase = Chase(store.ring(gpu, point.numa), gpu)
    with torch.cuda.device(gpu), _bound(place.cpus):
        trials = timing.measure(chase, EventClock(), ctx.timing)
    return trial_rows(point, trials, math.nan, 1.0, chase.verified(), _join(LATENCY_NOTE, place_note(place)))
