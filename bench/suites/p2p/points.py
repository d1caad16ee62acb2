"""The p2p suite's points on a machine: which pairs, at which sizes, and the concurrent ops."""
from __future__ import annotations

from bench import ConfigError
from bench.contract import Context, Point, counts_at_once
from bench.measure.chase import RING_BYTES
from bench.pairs import class_pairs, pairs_at_size
from bench.points import ALL
from bench.sizes import machine_sizes
from bench.suites.p2p.reading import P2PView
from bench.suites.p2p.settings import CONCURRENT_OPS, HELD_STAGING, PAIR_OPS, Settings


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
    name = P2PView.name
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
                        # A copy engine's pair copies can be held (p2p/measure.py); a kernel runs eager.
                        # Staged, held on one pair per link class: each GPU's own host link is the
                        # copy suite's, and the hand-off between them (a flag in host memory) the class's.
                        held = engine == "ce" and (mode == "peer" or (i, j) in per_link)
                        out += [Point(name, op, size, memory="device", mode=mode, backend="cuda", src=f"cuda:{i}",
                                      dst=f"cuda:{j}", launch=launch, engine=engine,
                                      params=HELD_STAGING if (mode, launch) == ("staged", "held") else None)
                                for launch in ctx.launches_at(size, graph=False, held=held)]
        if (size == max(machine) if auto else size in machine) and "peer" in modes:
            out += [Point(name, op, size, memory="device", mode="peer", backend="cuda", world_size=count,
                          engine=engine, **_ends(op, f"cuda:{j}"))
                    for count in counts_at_once(s.together, ctx.gpu_count) for op in ops if op in CONCURRENT_OPS
                    for j in range(count) for engine in engines]
    return out


def _ends(op: str, one: str) -> dict[str, str]:
    """src and dst of a concurrent op: every other GPU ('all') into or out of the one GPU."""
    return {"src": ALL, "dst": one} if op == "all_to_one" else {"src": one, "dst": ALL}
