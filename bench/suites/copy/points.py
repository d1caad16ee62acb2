"""The copy suite's points on a machine: which GPUs alone and how many at once, where each GPU's
host buffers go in each NUMA mode, and the sweep."""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

from bench import ConfigError
from bench.config.settings import Engine, HostMemory
from bench.contract import Context, Point, counts_at_once
from bench.measure import numa
from bench.measure.chase import RING_BYTES
from bench.points import ALL
from bench.sizes import machine_sizes, parse_size
from bench.suites.copy.reading import CopyView
from bench.suites.copy.settings import EACH, HOST_OPS, ON_ONE_GPU, OPS, CopyOp, NumaMode, Settings


@dataclass(frozen=True)
class Selection:
    alone: tuple[int, ...]   # GPUs measured by themselves, in order; the first gets the full sweep
    together: tuple[int, ...]   # counts of GPUs at once (the first N), each two or more; () for none


def select_gpus(spec: list[str], count: int, together: list[int] = ()) -> Selection:
    """copy.gpus (and copy.together) on a machine with `count` GPUs; ConfigError for an index it
    does not have."""
    alone: list[int] = []
    for item in spec:
        if item == EACH:
            alone += range(count)
        elif item != ALL:
            if int(item) >= count:
                raise ConfigError(f"copy.gpus: GPU {item} does not exist; this machine has {count} (0..{count - 1})")
            alone.append(int(item))
    return Selection(tuple(dict.fromkeys(alone)), counts_at_once(together, count) if ALL in spec else ())


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


def host_plan_for(s: Settings, ctx: Context) -> HostPlan:
    """The host plan of copy.numa on ctx's machine."""
    nodes = list(ctx.gpu_nodes[:ctx.gpu_count]) + [None] * (ctx.gpu_count - len(ctx.gpu_nodes))
    return host_plan(ctx.numa or numa.one_node(), nodes, [str(m) for m in s.numa])


def cpu_dropped(s: Settings, explicit: frozenset[str]) -> str:
    """The copy settings the user named that a run without a GPU cannot honour (it measures pageable
    host-to-host copies), as one note; '' when there are none."""
    dropped = {
        "ops": [str(o) for o in s.ops if o != CopyOp.h2h],   # every other copy op involves a GPU
        "memory": [str(m) for m in s.memory if m == HostMemory.pinned],
        "gpus": [g for g in s.gpus if g != EACH],
        "engine": [str(e) for e in s.engine if e == Engine.sm],
        "numa": [str(n) for n in s.numa if n != NumaMode.none],
    }
    named = [f"copy.{key}=[{','.join(items)}]" for key, items in dropped.items() if items and f"copy.{key}" in explicit]
    return f"no GPU: {', '.join(named)} measured as pageable host-to-host copies" if named else ""


def gpus_of(p: Point) -> list[int]:
    """The GPUs whose buffers a point uses."""
    if p.op == "h2h":
        return [p.params.gpu]   # the host's own memory, in that GPU's host buffers (filled from its source)
    if ALL in (p.src, p.dst):
        return list(range(p.world_size))
    return sorted({int(x.split(":")[1]) for x in (p.src, p.dst) if x.startswith("cuda:")})


def _alone_points(s: Settings, ctx: Context, gpu: int, mode: str, full: bool) -> list[Point]:
    """One GPU by itself: the full sweep, or (not full) pinned copies at the whole-machine sizes."""
    dev, machine = f"cuda:{gpu}", machine_sizes(ctx.sizes)
    pageable_max = parse_size(s.pageable_max_size) if s.pageable_max_size else None
    out = []
    if CopyOp.latency in s.ops:
        out.append(Point(CopyView.name, "latency", RING_BYTES, memory="pinned", backend="cuda", src="host", dst=dev,
                         engine="sm", numa=mode))
    for size in ctx.sizes if full else machine:
        for op in (str(o) for o in s.ops if o in HOST_OPS):
            src, dst = (dev, "host") if op == "d2h" else ("host", dev)
            for mem in (str(m) for m in s.memory):
                if mem == "pageable" and (op == "bidir" or not full or pageable_max is not None and size > pageable_max):
                    continue  # pageable copies block the host thread, so they cannot overlap
                for engine in (str(e) for e in s.engine):
                    if engine == "sm" and (mem != "pinned" or size not in machine or not full):
                        continue  # kernels reach pinned memory only; SM copies at whole-machine sizes, of one GPU alone
                    # The host blocks in a pageable copy: no latch can hold it, no graph capture it.
                    pinned = full and mem == "pinned"
                    for launch in ctx.launches_at(size, graph=pinned and op != "bidir", held=pinned):
                        out.append(Point(CopyView.name, op, size, memory=mem, backend="cuda", src=src, dst=dst,
                                         launch=launch, engine=engine, numa=mode))
    return out


def _together_points(s: Settings, ctx: Context, mode: str, count: int) -> list[Point]:
    """The first `count` GPUs at once."""
    if HostMemory.pinned not in s.memory:
        return []
    return [Point(CopyView.name, op, size, memory="pinned", backend="cuda", src=ALL if op == "d2h" else "host",
                  dst="host" if op == "d2h" else ALL, world_size=count, engine=str(engine), numa=mode)
            for size in machine_sizes(ctx.sizes)
            for op in (str(o) for o in s.ops if o in HOST_OPS)
            for engine in s.engine]


@dataclass(frozen=True)
class HostThreads:
    """A host-memory point's threads (1, or every CPU the GPU's host memory is local to) and the
    GPU whose host buffers and NUMA placement it uses."""

    threads: int
    gpu: int


def host_threads(place: numa.Placement) -> int:
    return len(place.cpus) or len(os.sched_getaffinity(0))


# One thread copies far slower than all (a 1 GiB copy took 275 ms on a 4x H200 host, where 64
# threads took 30): it copies at most this much, still many times the host's last-level cache.
ONE_THREAD_MAX_BYTES = 256 << 20


def _host_memory_points(ctx: Context, mode: str, gpu: int, place: numa.Placement) -> list[Point]:
    """The host's own memory: a copy on one thread and on all, a read and a write on all, at the
    sweep's largest size (all threads finish a whole-machine size in a few ms, where their
    wake-ups show; one thread at most ONE_THREAD_MAX_BYTES), in the host buffers of `gpu` (the
    first selected) as placed for it."""
    largest, every = max(ctx.sizes), host_threads(place)
    shapes = [("copy", 1), ("copy", every), ("read", every), ("write", every)]
    return [Point(CopyView.name, "h2h", min(largest, ONE_THREAD_MAX_BYTES) if n == 1 else largest, memory="pageable",
                  mode=f"{kind} {'1 thread' if n == 1 else 'all threads'}",
                  backend="cpu", src="host", dst="host", numa=mode, params=HostThreads(n, gpu))
            for kind, n in dict.fromkeys(shapes)]


def sweep(s: Settings, ctx: Context) -> list[Point]:
    """Every point of the suite on this machine, in order (grouped by NUMA mode)."""
    if ctx.device == "cpu":
        return [Point(CopyView.name, "h2h", size, memory="pageable", backend="cpu", src="host", dst="host")
                for size in ctx.sizes]
    selection = select_gpus(s.gpus, ctx.gpu_count, s.together)
    plan = host_plan_for(s, ctx)
    out: list[Point] = []
    for mode in (str(m) for m in s.numa):
        for k, gpu in enumerate(selection.alone):
            if (gpu, mode) in plan.places:
                out += _alone_points(s, ctx, gpu, mode, full=k == 0)
        for count in selection.together:
            if all((g, mode) in plan.places for g in range(count)):
                out += _together_points(s, ctx, mode, count)
        first = selection.alone[0] if selection.alone else 0
        if CopyOp.h2h in s.ops and (first, mode) in plan.places:
            out += _host_memory_points(ctx, mode, first, plan.places[first, mode])
    for op in (OPS[o] for o in s.ops if o in ON_ONE_GPU and selection.alone):
        dev = f"cuda:{selection.alone[0]}"
        # a view's copy goes through torch's copy kernel, on the SMs
        out += [Point(CopyView.name, op.name, size, memory="device", backend="cuda", src=dev, dst=dev, launch=launch,
                      engine="sm" if op.views else "ce")
                for size in ctx.sizes if size % op.element == 0 for launch in ctx.launches_at(size)]
    return out
