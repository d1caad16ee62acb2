"""What a training step keeps of the link while the GPU computes, and what synchronizing costs.

Three kinds of point:

- Pairs (ops h2d, d2h, peer, all_reduce): a transfer on a stream of its own beside a bf16 matrix
  product on another. Each is first timed alone; a round then holds c transfers and m products,
  counts chosen from those times so that both streams are busy about equally long. Rounds run
  on two streams, the transfer issued first as a loop that prefetches its next batch does, each
  round ending when both streams are done; and, as the control, on one stream.
  overlap = serial / concurrent, where serial = c x transfer alone + m x product alone: 1.0 is
  none, and a balanced round reaches 2.0 at best.
- Synchronizations (sync_device, sync_item, sync_event, sync_stream): a step is some work, then
  the synchronization; its cost is the step's time less the work's alone. Idle: the work is one
  tiny kernel; busy: a matrix product long enough that the GPU, not the host, sets the pace.
- make_tensor: a tensor filled on the host and moved (pageable or pinned), or filled on the device.

Data is checked: copies are compared with their source, the all_reduce's result with the exact
sum before timing, products with a float32 reference, synchronized values with the expected.

all_reduce needs a rank per GPU, so the suite is distributed: each rank runs every point; for
the single-GPU points, ranks other than 0 wait on the host (a gloo barrier) while rank 0
measures, so no idle rank spins a GPU kernel beside them. The all_reduce goes through NCCL
directly (bench.measure.nccl) on a stream of the suite's own, where events can time it; torch.distributed
runs the same kernel on a stream of its own.
"""
from __future__ import annotations

import datetime as dt
import math
import re
import statistics
import sys
from dataclasses import dataclass, field, replace
from typing import Callable, List

from bench import ConfigError, lazy
from bench.config.settings import Choice, HostMemory, nonempty, positive, require
from bench.links import bus_factor
from bench.measure import nccl, timing
from bench.measure.consensus import Consensus
from bench.measure.checks import same_data
from bench.measure.memory import RANK_HOST_BYTES, format_bytes, gpu_free_bytes, host_available_bytes, local_rank_limit
from bench.measure.timing import EventClock, HostClock, Trial
from bench.results import Sample, params, usable_rows
from bench.sizes import format_size, parse_size
from bench.contract import Context, Distribution, Point, Suite, trial_rows

pd = lazy.module("pandas")
torch = lazy.module("torch")
tdist = lazy.module("torch.distributed")

MOST_PER_ROUND = 8      # a round holds at most this many of the longer operation
BALANCE_GAP = 0.05      # a round's two sides may differ by this much: overlap can then reach 1.95
TINY = 1024             # elements summed by the idle synchronizations' kernel
SYNCS = ("device", "item", "event", "stream")
PAIR_OPS = ("h2d", "d2h", "peer", "all_reduce")
PAIR_PARTS = ("copy_alone", "compute_alone", "copy_during_compute", "compute_during_copy", "serial",
              "one_stream", "total")


class OverlapOp(Choice):
    h2d = "h2d"
    d2h = "d2h"
    peer = "peer"
    all_reduce = "all_reduce"
    sync = "sync"
    make_tensor = "make_tensor"


@dataclass
class Settings:
    ops: List[OverlapOp] = field(default_factory=lambda: list(OverlapOp))
    memory: List[HostMemory] = field(default_factory=lambda: list(HostMemory))  # host copies, make_tensor
    sizes: List[str] = field(default_factory=lambda: ["256MiB"])  # the transfer (all_reduce message) of a pair
    matmul: int = 8192            # n of the bf16 product (n x n) @ (n x n) beside each transfer
    sync_matmul: int = 2048       # n of the product that keeps the GPU busy in the busy sync steps
    make_sizes: List[str] = field(default_factory=lambda: ["4KiB", "1MiB", "64MiB"])
    timeout_s: float = 300.0      # with all_reduce's ranks: a dead or hung rank ends the run after this long

    def __post_init__(self) -> None:
        nonempty("overlap.ops", self.ops)
        nonempty("overlap.memory", self.memory)
        nonempty("overlap.sizes", self.sizes)
        nonempty("overlap.make_sizes", self.make_sizes)
        for key in ("sizes", "make_sizes"):
            for size in getattr(self, key):
                parse_size(size, f"overlap.{key}")
        for key in ("matmul", "sync_matmul"):
            require(getattr(self, key) >= 16, f"overlap.{key}", getattr(self, key), "must be >= 16")
        positive("overlap.timeout_s", self.timeout_s)


@dataclass(frozen=True)
class Product:
    """A pair's product: the bf16 (n x n) @ (n x n) beside the transfer (its mode reads mm<n>)."""

    matmul: int

    @property
    def flops(self) -> float:
        return 2.0 * self.matmul ** 3


def world_sizes(s: Settings, ctx: Context, max_ranks: int = 0) -> list[int]:
    """One rank per GPU when all_reduce is asked for on 2 or more GPUs (no more than `max_ranks`,
    rank_limit: this machine's cores and host memory); else rank 0 alone."""
    ranks = min(ctx.gpu_count, max_ranks or ctx.gpu_count)
    return [ranks if OverlapOp.all_reduce in s.ops and ranks >= 2 else 1]


def _largest(sizes: list[str]) -> int:
    return max(parse_size(s) for s in sizes)


# ---------------------------------------------------------------- the work: products and transfers


class Matmul:
    """The bf16 product C = A @ B of n x n matrices, k at a time on the current stream."""

    def __init__(self, n: int, device: torch.device | str, seed: int = 0) -> None:
        gen = torch.Generator(device=device).manual_seed(seed)
        self.n = n
        self.a = torch.randn(n, n, generator=gen, device=device, dtype=torch.bfloat16)
        self.b = torch.randn(n, n, generator=gen, device=device, dtype=torch.bfloat16)
        self.c = torch.zeros(n, n, device=device, dtype=torch.bfloat16)

    @property
    def flops(self) -> int:
        return 2 * self.n ** 3

    def __call__(self, k: int = 1) -> None:
        for _ in range(k):
            torch.mm(self.a, self.b, out=self.c)

    def correct(self, rows: int = 64) -> bool:
        """C's first rows against a float32 product. bf16 keeps 8 significant bits, so an exact
        product rounds by at most 2^-9 of itself; 1% of the largest entry also covers the
        float32 sums' order, and still fails on a product not made or made of other data."""
        ref = self.a[:rows].float() @ self.b.float()
        return bool((self.c[:rows].float() - ref).abs().max() <= 1e-2 * ref.abs().max())


@dataclass
class Transfer:
    """A transfer: `run(k)` enqueues k of them on the current stream; `correct()` checks the data."""

    run: Callable[[int], None]
    correct: Callable[[], bool]
    host_blocks: bool = False     # pageable copies: the host waits in them, so the host clock times them
    bus_factor: float = 1.0


def _device(ctx: Context):
    return torch.device("cuda", ctx.local_rank)


class OverlapState:
    """One rank's run, made as points need it: buffers of the largest size (sliced per point; the
    device source holds random bytes, host sources a copy of them; points zero the destinations
    they use), the products, two streams, the idle sync's tensor, the host barrier's gloo group
    and the all_reduce's NCCL communicator."""

    def __init__(self, s: Settings, ctx: Context) -> None:
        self.settings, self.ctx = s, ctx
        self.size = _largest(s.sizes)
        self._buffers: dict[str, object] = {}
        self._products: dict[int, Matmul] = {}
        self._streams: tuple | None = None
        self._ones = None
        self._host_group = None
        self.comm: nccl.Communicator | None = None

    def buffer(self, name: str):
        """src, dst (this GPU), peer_dst (the next GPU), or <pinned|pageable>_<src|dst> in host memory."""
        if name not in self._buffers:
            self._buffers[name] = self._make(name)
        return self._buffers[name]

    def _make(self, name: str):
        device, size = _device(self.ctx), self.size
        if name == "src":
            return torch.randint(0, 256, (size,), dtype=torch.uint8, device=device)
        if name == "dst":
            return torch.empty(size, dtype=torch.uint8, device=device)
        if name == "peer_dst":
            peer = torch.device("cuda", (self.ctx.local_rank + 1) % self.ctx.gpu_count)
            return torch.empty(size, dtype=torch.uint8, device=peer)
        memory, role = name.split("_")
        buf = torch.empty(size, dtype=torch.uint8, pin_memory=memory == "pinned")
        if role == "src":
            buf.copy_(self.buffer("src"))
        return buf

    def product(self, n: int) -> Matmul:
        if n not in self._products:
            self._products[n] = Matmul(n, _device(self.ctx), seed=n)
        return self._products[n]

    def streams(self) -> tuple:
        if self._streams is None:
            self._streams = (torch.cuda.Stream(_device(self.ctx)), torch.cuda.Stream(_device(self.ctx)))
        return self._streams

    def ones(self):
        if self._ones is None:
            self._ones = torch.ones(TINY, device=_device(self.ctx))
        return self._ones

    def host_barrier(self) -> None:
        """All ranks meet here, blocked on the host: an idle rank runs no GPU kernel meanwhile."""
        if self.ctx.world_size < 2:
            return
        if self._host_group is None:
            # Made at the first point, where every rank calls it; a rank waits here at most while
            # rank 0 measures one point.
            self._host_group = tdist.new_group(backend="gloo", timeout=dt.timedelta(seconds=self.settings.timeout_s))
        tdist.barrier(group=self._host_group)

    def communicator(self) -> nccl.Communicator:
        if self.comm is None:
            self.comm = nccl.join(self.ctx.rank, self.ctx.world_size, self.ctx.local_rank)
        return self.comm


def _copy(point: Point, state: OverlapState) -> Transfer:
    n, buffer = point.size_bytes, state.buffer
    if point.op == "h2d":
        dst, src = buffer("dst")[:n], buffer(f"{point.memory}_src")[:n]
    elif point.op == "d2h":
        dst, src = buffer(f"{point.memory}_dst")[:n], buffer("src")[:n]
    else:
        dst, src = buffer("peer_dst")[:n], buffer("src")[:n]
    dst.zero_()

    def run(k: int) -> None:
        for _ in range(k):
            dst.copy_(src, non_blocking=True)

    return Transfer(run, lambda: same_data(dst, src), host_blocks=point.memory == "pageable")


# ---------------------------------------------------------------- ranks: one process, or all_reduce's


def settle(trials: list[Trial], ranks: Consensus) -> list[Trial]:
    """Each trial's parts summed over rounds ('copy3' -> 'copy'); with ranks, the slowest rank's
    times, and the fastest's beside them."""
    trials = [replace(t, parts=_summed(t.parts)) for t in trials]
    if ranks.device is None:
        return trials
    flat = [v for t in trials for v in (t.time_s, t.parts.get("copy", 0.0), t.parts.get("compute", 0.0))]
    hi, lo = ranks.reduce(flat, "max"), ranks.reduce(flat, "min")
    return [replace(t, time_s=hi[3 * i], fastest_rank_s=lo[3 * i],
                    parts={"copy": hi[3 * i + 1], "compute": hi[3 * i + 2]} if t.parts else {})
            for i, t in enumerate(trials)]


def _summed(parts) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, seconds in parts.items():
        name = key.rstrip("0123456789")
        out[name] = out.get(name, 0.0) + seconds
    return out


# ---------------------------------------------------------------- pairs


def balance(transfer_s: float, product_s: float, most: int = MOST_PER_ROUND,
            gap: float = BALANCE_GAP) -> tuple[int, int]:
    """(transfers, products) per round: k of the longer operation (k <= most) and as many of the
    shorter as take about as long. The smallest k whose two sides differ by at most `gap` wins
    (short rounds keep a point quick), else the closest."""
    ratio = transfer_s / product_s
    best = None
    for k in range(1, most + 1):
        c, m = (k, max(1, round(k * ratio))) if ratio >= 1 else (max(1, round(k / ratio)), k)
        a, b = c * transfer_s, m * product_s
        apart = abs(a - b) / max(a, b)
        if apart <= gap:
            return c, m
        if best is None or apart < best[0]:
            best = (apart, (c, m))
    return best[1]


def _span(stream: torch.cuda.Stream, after: torch.cuda.Stream, work: Callable[[], None]) -> tuple:
    """work on `stream` once everything on `after` so far is done, between two timing events."""
    stream.wait_stream(after)
    with torch.cuda.stream(stream):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
    return start, end


def _rounds(transfer: Transfer, product: Matmul, c: int, m: int, streams=None) -> timing.Enqueue:
    """n rounds of c transfers and m products: on the current stream, or on two streams."""
    def one_stream(n: int) -> None:
        for _ in range(n):
            transfer.run(c)
            product(m)

    def two_streams(n: int) -> dict:
        cur = torch.cuda.current_stream()
        spans = {}
        for i in range(n):
            spans[f"copy{i}"] = _span(streams[0], cur, lambda: transfer.run(c))
            spans[f"compute{i}"] = _span(streams[1], cur, lambda: product(m))
            cur.wait_stream(streams[0])
            cur.wait_stream(streams[1])
        return spans

    return two_streams if streams else one_stream


def _median_op(trials: list[Trial]) -> float:
    return statistics.median(t.per_op_s for t in trials)


def _pair(point: Point, ctx: Context, transfer: Transfer, product: Matmul, ranks: Consensus,
          streams: tuple) -> list[Sample]:
    if transfer.host_blocks:
        clock = HostClock(torch.cuda.synchronize)
    else:
        clock = EventClock(before_start=ranks.barrier)
    t, agree = ctx.timing, ranks.max
    copy_alone = settle(timing.measure(transfer.run, clock, t, agree), ranks)
    compute_alone = settle(timing.measure(product, clock, t, agree), ranks)
    c, m = balance(_median_op(copy_alone), _median_op(compute_alone))
    concurrent = settle(timing.measure(_rounds(transfer, product, c, m, streams), clock, t, agree), ranks)
    one_stream = settle(timing.measure(_rounds(transfer, product, c, m), clock, t, agree), ranks)
    torch.cuda.synchronize()
    copied, computed = ranks.all(transfer.correct()), ranks.all(product.correct())
    return pair_rows(point, copy_alone, compute_alone, concurrent, one_stream, (c, m), transfer.bus_factor,
                     copied, computed)


def pair_rows(point: Point, copy_alone: list[Trial], compute_alone: list[Trial], concurrent: list[Trial],
              one_stream: list[Trial], round_: tuple[int, int], bus_factor: float, copied: bool,
              computed: bool) -> list[Sample]:
    """A pair's rows, per trial (README, "The result columns"). Copy rows carry GB/s per
    transfer, round rows (serial, one_stream, total) the transfer's bytes over the round's time,
    compute rows none: TFLOP/s is flops_of(mode) / time_s."""
    c, m = round_
    verified = copied and computed
    failed = "; ".join(why for ok, why in ((copied, "the transfer's data differs from the exact result"),
                                          (computed, "the product differs from a float32 reference")) if not ok)
    what = f"a round: {c} x {point.op} + {m} x {point.mode}"
    rows = []
    for i, (ca, pa, co, one) in enumerate(zip(copy_alone, compute_alone, concurrent, one_stream)):
        serial = c * ca.per_op_s + m * pa.per_op_s
        # part: (seconds per unit, units in the trial, bytes per unit, fastest rank's seconds, note)
        parts = {
            "copy_alone": (ca.per_op_s, ca.iters, point.size_bytes, ca.fastest_rank_s / ca.iters, ""),
            "compute_alone": (pa.per_op_s, pa.iters, 0, pa.fastest_rank_s / pa.iters, ""),
            "copy_during_compute": (co.parts["copy"] / (co.iters * c), co.iters * c, point.size_bytes, math.nan, ""),
            "compute_during_copy": (co.parts["compute"] / (co.iters * m), co.iters * m, 0, math.nan, ""),
            "serial": (serial, co.iters, c * point.size_bytes, math.nan, f"{what}, alone one after the other"),
            "one_stream": (one.per_op_s, one.iters, c * point.size_bytes, one.fastest_rank_s / one.iters,
                           f"overlap {serial / one.per_op_s:.2f} on one stream (the control); {what}"),
            "total": (co.per_op_s, co.iters, c * point.size_bytes, co.fastest_rank_s / co.iters,
                      f"overlap {serial / co.per_op_s:.2f} on two streams; {what}"),
        }
        short = "; ".join(f"short trial ({name})" for name, tr in
                          (("alone", ca), ("alone", pa), ("concurrent", co), ("one stream", one)) if tr.short)
        for part, (seconds, iters, nbytes, fastest, note) in parts.items():
            bw = nbytes / seconds / 1e9 if verified and nbytes and seconds > 0 else math.nan
            notes = [n for n in (note, "" if verified else f"data check failed: {failed}", short) if n]
            rows.append(point.sample(trial=i, iters=int(iters), part=part, time_s=seconds, time_fastest_rank_s=fastest,
                                     algbw_gbps=bw, busbw_gbps=bw * bus_factor, verified=verified,
                                     status="ok" if verified else "failed", note="; ".join(dict.fromkeys(notes))))
    return rows


def _all_reduce_point(point: Point, ctx: Context, state: OverlapState) -> list[Sample]:
    if ctx.world_size < 2:
        return [point.skipped("needs 2 or more GPUs, one rank each")] if ctx.rank == 0 else []
    ranks = Consensus(_device(ctx))
    try:  # everything allocated before any collective: a rank out of memory must not leave one waiting
        buf = torch.full((point.size_bytes // 2,), float(ctx.rank + 1), dtype=torch.bfloat16, device=_device(ctx))
        product, oom = state.product(point.params.matmul), ""
    except torch.cuda.OutOfMemoryError as exc:
        oom = str(exc).splitlines()[0]
    if ranks.max(1.0 if oom else 0.0):   # every rank skips together, or none does
        torch.cuda.empty_cache()
        return [point.skipped(f"out of memory on some rank: {oom or 'see that rank'}")] if ctx.rank == 0 else []
    rows = _pair(point, ctx, _all_reduce(buf, ctx, ranks, state), product, ranks, state.streams())
    return rows if ctx.rank == 0 else []


def _all_reduce(buf, ctx: Context, ranks: Consensus, state: OverlapState) -> Transfer:
    """A bf16 all_reduce of buf (holding rank + 1) through NCCL on the current stream; checked once,
    before timing (the timed ones sum in place, so their values grow)."""
    comm, n = state.communicator(), ctx.world_size
    launch = comm.prepare("all_reduce", buf)
    launch(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    ok = ranks.all(bool((buf == n * (n + 1) // 2).all()))   # exact in bf16 up to 22 ranks

    def run(k: int) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(k):
            launch(stream)

    return Transfer(run, lambda: ok, bus_factor=bus_factor("all_reduce", n))


# ---------------------------------------------------------------- synchronizations


class _Work:
    """A step's work and its fresh result: idle, one tiny sum; busy, a product and C[0, 0]."""

    def __init__(self, state: OverlapState, busy: bool, n: int) -> None:
        self.product = state.product(n) if busy else None
        self.ones = state.ones()
        self.last = None
        if busy:
            self.product.c.zero_()   # a stale C would fail the check below
            p = self.product
            self.expected = float(p.a[0].float() @ p.b[:, 0].float())
        else:
            self.expected = float(TINY)

    def __call__(self):
        if self.product is None:
            self.last = self.ones.sum()
        else:
            self.product()
            self.last = self.product.c[0, 0]
        return self.last

    def correct(self, value: float) -> bool:
        """value is the work's result: exact for the sum; at bf16's tolerance (Matmul.correct) for C[0, 0]."""
        if self.product is None:
            return value == self.expected
        scale = math.sqrt(self.product.n)   # the entries' spread: A and B hold N(0, 1)
        return self.product.correct() and math.isclose(value, self.expected, rel_tol=1e-2, abs_tol=1e-2 * scale)


def _sync_action(kind: str, state: OverlapState, seen: list) -> Callable:
    if kind == "device":
        return lambda result: torch.cuda.synchronize()
    if kind == "item":
        return lambda result: seen.__setitem__(0, result.item())
    if kind == "event":
        event = torch.cuda.Event()

        def wait(result) -> None:
            event.record()
            event.synchronize()

        return wait
    side = state.streams()[0]   # the device waits, not the host
    return lambda result: side.wait_stream(torch.cuda.current_stream())


def _sync_point(point: Point, s: Settings, ctx: Context, state: OverlapState) -> list[Sample]:
    kind, busy = point.op.removeprefix("sync_"), point.mode == "busy"
    work = _Work(state, busy, s.sync_matmul)
    seen = [math.nan]
    act = _sync_action(kind, state, seen)

    def steps(n: int) -> None:
        for _ in range(n):
            act(work())

    def works(n: int) -> None:
        for _ in range(n):
            work()

    clock = HostClock(torch.cuda.synchronize)
    with_sync = timing.measure(steps, clock, ctx.timing)
    alone = timing.measure(works, clock, ctx.timing)
    torch.cuda.synchronize()
    verified = work.correct(float(work.last)) and (kind != "item" or work.correct(seen[0]))
    what = f"work: one {s.sync_matmul}x{s.sync_matmul} bf16 product" if busy else \
        f"work: one sum of {TINY} floats"
    return sync_rows(point, with_sync, alone, verified, what)


def sync_rows(point: Point, steps: list[Trial], works: list[Trial], verified: bool, what: str) -> list[Sample]:
    """Per trial: 'step' (work then the sync), 'work' (the work alone) and 'cost' (a step less
    the median work): seconds per step in time_s, no bandwidth."""
    base = _median_op(works)
    failed = f"data check failed: a result differs from the expected; {what}"
    status, note = ("ok", what) if verified else ("failed", failed)
    rows = []
    for part, trials, less in (("step", steps, 0.0), ("work", works, 0.0), ("cost", steps, base)):
        for i, t in enumerate(trials):
            rows.append(point.sample(trial=i, iters=t.iters, part=part, time_s=t.per_op_s - less,
                                     verified=verified, status=status,
                                     note=note + ("; short trial" if t.short else "")))
    return rows


# ---------------------------------------------------------------- tensors made on the host or the device


def _make_point(point: Point, ctx: Context) -> list[Sample]:
    dev, n = _device(ctx), point.size_bytes
    made: list = [None]
    if point.memory == "device":
        def make():
            return torch.full((n,), 7, dtype=torch.uint8, device=dev)
    else:
        pinned = point.memory == "pinned"

        def make():
            return torch.full((n,), 7, dtype=torch.uint8, pin_memory=pinned).to(dev, non_blocking=pinned)

    def enqueue(k: int) -> None:
        for _ in range(k):
            made[0] = make()

    trials = timing.measure(enqueue, HostClock(torch.cuda.synchronize), ctx.timing)
    torch.cuda.synchronize()
    last = made[0]
    verified = last is not None and last.device == dev and bool((last == 7).all())
    return trial_rows(point, trials, n, 1.0, verified)


# ---------------------------------------------------------------- the point


def _measure(point: Point, s: Settings, ctx: Context, state: OverlapState) -> list[Sample]:
    state.host_barrier()
    if point.op == "all_reduce":
        return _all_reduce_point(point, ctx, state)
    if ctx.rank != 0:
        return []
    try:
        if point.op == "peer" and ctx.gpu_count < 2:
            return [point.skipped(f"needs 2 or more GPUs, found {ctx.gpu_count}")]
        if point.op.startswith("sync_"):
            return _sync_point(point, s, ctx, state)
        if point.op == "make_tensor":
            return _make_point(point, ctx)
        return _pair(point, ctx, _copy(point, state), state.product(point.params.matmul), Consensus(), state.streams())
    except torch.cuda.OutOfMemoryError as exc:  # rank 0 alone measures here: it alone skips
        torch.cuda.empty_cache()
        return [point.skipped(f"out of memory: {str(exc).splitlines()[0]}")]


# ---------------------------------------------------------------- tables of a run's rows


def _ok(frame: pd.DataFrame, parts) -> pd.DataFrame:
    return frame[(frame["suite"] == Overlap.name) & (frame["status"] == "ok") & frame["part"].isin(parts)]


def _run_keys(rows: pd.DataFrame) -> list[str]:
    """instance and run_id where the rows come from more than one."""
    return [k for k in ("instance", "run_id") if k in rows.columns and rows[k].nunique() > 1]


def _flops_of(mode: str) -> float:
    """The flops of the product a pair's mode names ('mm8192'); NaN for any other mode."""
    match = re.fullmatch(r"mm(\d+)", str(mode))
    return Product(int(match.group(1))).flops if match else math.nan


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per pair: GB/s of the transfer alone and during the product (algbw), TFLOP/s of the
    product alone and during the transfer, overlap on two streams and on one (medians of trials)."""
    rows = _ok(frame, PAIR_PARTS)
    rows = rows[rows["op"].isin(PAIR_OPS)]
    if rows.empty:
        return pd.DataFrame()
    # The product's flops from its params; older runs (no params) name it in the mode: mm<n>.
    rows = rows.assign(flops=[Product(d["matmul"]).flops if "matmul" in d else _flops_of(mode)
                              for d, mode in zip(params(rows), rows["mode"])])
    keys = _run_keys(rows) + ["op", "memory", "mode", "world_size", "size_bytes"]
    med = rows.pivot_table(index=keys, columns="part", values=["time_s", "algbw_gbps", "iters"], aggfunc="median")
    med = med.iloc[med.index.get_level_values("op").map(PAIR_OPS.index).argsort(kind="stable")]
    out = med.index.to_frame(index=False)
    flops = rows.groupby(keys)["flops"].first().reindex(med.index).to_numpy()
    t, bw, iters = med["time_s"], med["algbw_gbps"], med["iters"]
    out["size"] = out.pop("size_bytes").map(format_size)
    out["round"] = [f"{c:.0f}+{m:.0f}" for c, m in zip(iters["copy_during_compute"] / iters["total"],
                                                       iters["compute_during_copy"] / iters["total"])]
    out["copy_gbps"] = bw["copy_alone"].to_numpy().round(1)
    out["copy_gbps_computing"] = bw["copy_during_compute"].to_numpy().round(1)
    out["tflops"] = (flops / t["compute_alone"].to_numpy() / 1e12).round(1)
    out["tflops_copying"] = (flops / t["compute_during_copy"].to_numpy() / 1e12).round(1)
    out["overlap"] = (t["serial"] / t["total"]).to_numpy().round(2)
    out["overlap_one_stream"] = (t["serial"] / t["one_stream"]).to_numpy().round(2)
    return out.drop(columns=[c for c in ("world_size",) if out[c].nunique() == 1])


def sync_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Median cost of each synchronization in µs (a step less the work alone), idle and busy, with
    the busy work's own time."""
    rows = _ok(frame, ("cost", "work"))
    rows = rows[rows["op"].str.startswith("sync_")]
    if rows.empty:
        return pd.DataFrame()
    med = rows.pivot_table(index=_run_keys(rows) + ["op"], columns=["part", "mode"], values="time_s", aggfunc="median")
    out = (med * 1e6).round(2)
    out.columns = [f"{part}_us_{mode}" for part, mode in out.columns]
    order = [c for c in ("cost_us_idle", "cost_us_busy", "work_us_busy") if c in out.columns]
    out = out[order].reset_index()
    return out.sort_values("op", key=lambda ops: ops.map(lambda o: SYNCS.index(o.removeprefix("sync_"))))


def make_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Median µs to make a tensor of each size: filled on the host and moved, or on the device."""
    rows = _ok(frame, ("total",))
    rows = rows[rows["op"] == "make_tensor"]
    if rows.empty:
        return pd.DataFrame()
    med = rows.pivot_table(index=_run_keys(rows) + ["size_bytes"], columns="memory", values="time_s", aggfunc="median")
    out = (med * 1e6).round(1)
    out.columns = [f"{m}_us" for m in out.columns]
    out = out.reset_index()
    out["size_bytes"] = out["size_bytes"].map(format_size)
    return out.rename(columns={"size_bytes": "size"})


def overlap_figure(frame: pd.DataFrame, canvas) -> list:
    """The overlap suite's pairs: transfer GB/s and product TFLOP/s, alone (light) and at once
    (solid), and the overlap with both on one stream (light) and on two (solid)."""
    # figures load matplotlib: imported when one is drawn, not by a measuring run
    import matplotlib.pyplot as plt

    from bench.analysis.figures.bars import paired, per_series, with_series_line
    from bench.analysis.figures.style import add_legend

    pairs = per_series(frame, table)
    if pairs.empty:
        return []
    colours, SERIES = canvas.colours, canvas.SERIES
    names = pairs["op"] + " " + pairs["memory"].replace("device", "") + " " + pairs["size"]
    labels = with_series_line(names.str.replace("  ", " "), pairs[SERIES])
    panels = (("copy_gbps", "copy_gbps_computing", "%.1f", "Transfer GB/s (all_reduce: algbw)"),
              ("tflops", "tflops_copying", "%.0f", "bf16 product TFLOP/s"),
              ("overlap_one_stream", "overlap", "%.2f", "Overlap = serial time / time at once"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.55 * len(pairs) + 1.9), sharey=True, layout="constrained")
    for ax, (light, solid, fmt, xlabel) in zip(axes, panels):
        paired(ax, list(zip(labels, pairs[SERIES], pairs[light], pairs[solid])), colours, fmt)
        ax.set_xlabel(xlabel, fontsize=9)
    for x in (1.0, 2.0):
        axes[2].axvline(x, color="black", linewidth=0.8, linestyle="--")
    axes[2].set_xlim(0, 2.3)
    fig.suptitle("A transfer on its own stream beside a bf16 matrix product\n"
                 "light: each alone (overlap: both on one stream); solid: both at once on two streams", fontsize=10)
    add_legend(fig, {s: colours[s] for s in sorted(pairs[SERIES].unique())}, {}, None)
    return canvas.save(fig, "overlap", "A transfer on a stream of its own beside a bf16 matrix product: what each keeps.")


def sync_figure(frame: pd.DataFrame, canvas) -> list:
    """The overlap suite's synchronizations, the µs each adds to a step on an idle (light) and a
    busy (solid) GPU; and the time to make a tensor on the host and move it, or on the device."""
    # figures load matplotlib: imported when one is drawn, not by a measuring run
    import matplotlib.pyplot as plt
    import numpy as np

    from bench.analysis.figures.bars import paired, per_series, with_series_line
    from matplotlib.lines import Line2D

    from bench.analysis.figures.style import DASHES, add_legend, log_y_axis, in_order, size_axis

    syncs = per_series(frame, sync_table)
    made = usable_rows(frame)
    made = made[(made["suite"] == Overlap.name) & (made["op"] == "make_tensor")]
    if syncs.empty and made.empty:
        return []
    colours, SERIES = canvas.colours, canvas.SERIES
    fig, axes = plt.subplots(1, 2, figsize=(11, max(3.4, 0.55 * len(syncs) + 1.8)), layout="constrained")
    if not syncs.empty:
        idle, busy = (syncs.get(c, pd.Series(np.nan, index=syncs.index)) for c in ("cost_us_idle", "cost_us_busy"))
        labels = with_series_line(syncs["op"].str.removeprefix("sync_"), syncs[SERIES])
        paired(axes[0], list(zip(labels, syncs[SERIES], idle, busy)), colours, "%.1f")
        axes[0].set_xlabel("µs a synchronization adds to a step", fontsize=9)
        axes[0].set_title("light: idle GPU; solid: busy GPU", fontsize=9)
    else:
        axes[0].set_axis_off()
    if not made.empty:
        styles = dict(zip(["pageable", "pinned", "device"], DASHES))
        stats = made.groupby([SERIES, "memory", "size_bytes"])["time_s"].median().mul(1e6).reset_index()
        for (series, memory), g in stats.groupby([SERIES, "memory"]):
            axes[1].plot(g["size_bytes"], g["time_s"], color=colours[series], linestyle=styles.get(memory, ":"),
                         marker="o", markersize=3)
        # the memory by its dashes here; the series by colour in the figure's legend (capped there)
        axes[1].legend(handles=[Line2D([], [], color="0.3", linestyle=styles.get(m, ":"), label=m)
                                for m in in_order(stats["memory"], list(styles))], fontsize=8, frameon=False)
        size_axis(axes[1], stats["size_bytes"].unique())
        log_y_axis(axes[1], stats["time_s"].max() / stats["time_s"].min())
        axes[1].set_xlabel("Tensor size", fontsize=9)
        axes[1].set_ylabel("µs per tensor", fontsize=9)
        axes[1].set_title("made on the host and moved (pageable, pinned), or on the device", fontsize=9)
    else:
        axes[1].set_axis_off()
    fig.suptitle("What synchronizing costs, and where to make a tensor", fontsize=10)
    drawn = sorted(set(syncs.get(SERIES, [])) | set(made[SERIES]))
    add_legend(fig, {s: colours[s] for s in drawn}, {}, None)
    return canvas.save(fig, "sync", "What a synchronization adds to a step, and where to make a tensor.")


class Overlap(Suite):
    name = "overlap"
    title = "Overlap"
    Settings = Settings
    groups = ("training",)
    curves = False          # its own figures say what its rows mean
    order = 40
    # Between-run sigma of log time: 3 identical runs on nvidia-h200 (results/noise/h200-x1-fit,
    # not the study in results/noise/h200-x1 that tests it). Host-side work (pageable copies,
    # tensors made on the host) moves between runs far more than pinned copies and the GPU.
    noise = {("gpu", "latency"): 0.432, ("gpu", "bandwidth"): 0.023,
             ("gpu", "bandwidth", "pageable"): 0.114, ("gpu", "bandwidth", "make_tensor"): 0.094}

    def check(self, o: Settings, ctx: Context) -> str | None:
        if ctx.device != "cuda":
            return "needs a CUDA GPU"
        if not ctx.here:
            return None
        big, made = _largest(o.sizes), _largest(o.make_sizes)
        need = 2 * big + 6 * o.matmul ** 2 + 6 * o.sync_matmul ** 2 + 2 * made  # buffers, A, B and C of each product
        free = gpu_free_bytes(0)
        if need > free:
            raise ConfigError(f"overlap.sizes: the overlap suite needs {format_bytes(need)} on cuda:0 but only "
                              f"{format_bytes(free)} is free; lower overlap.sizes, overlap.matmul or overlap.make_sizes")
        return None

    def rank_limit(self, o: Settings, ctx: Context) -> int:
        """The ranks this machine holds; NCCL and the host memory of that many ranks checked."""
        max_ranks, limited_by = local_rank_limit("overlap")
        ranks = world_sizes(o, ctx, max_ranks)[0]
        if OverlapOp.all_reduce in o.ops and ctx.gpu_count >= 2 and ranks < ctx.gpu_count:
            print(f"xferbench: overlap's all_reduce capped at {limited_by}: {ranks} of the {ctx.gpu_count} GPUs",
                  file=sys.stderr)
        if ranks > 1:
            try:
                nccl.require()
            except nccl.NcclUnavailable as exc:
                raise ConfigError(f"overlap.ops includes all_reduce: {exc}") from None
        big, made = _largest(o.sizes), _largest(o.make_sizes)
        host = 2 * big * len(o.memory) + 2 * made + ranks * RANK_HOST_BYTES  # rank 0's buffers, every rank
        available = host_available_bytes()
        if available is not None and host > available:
            raise ConfigError(f"overlap.sizes: the overlap suite needs {format_bytes(host)} of host memory but only "
                              f"{format_bytes(available)} is available; lower overlap.sizes")
        return max_ranks

    def points(self, s: Settings, ctx: Context) -> list[Point]:
        """Pairs by size, the synchronizations, make_tensor; all_reduce last, so that every rank
        leaves the suite together after it."""
        ops = {str(op) for op in s.ops}
        mm, product = f"mm{s.matmul}", Product(s.matmul)
        out = []
        for size in (parse_size(text) for text in s.sizes):
            for op in ("h2d", "d2h"):
                if op in ops:
                    src, dst = ("host", "cuda:0") if op == "h2d" else ("cuda:0", "host")
                    out += [Point(Overlap.name, op, size, memory=str(m), mode=mm, backend="cuda", src=src, dst=dst,
                                    params=product)
                            for m in s.memory]
            if "peer" in ops:
                out.append(Point(Overlap.name, "peer", size, memory="device", mode=mm, backend="cuda", src="cuda:0",
                                 dst="cuda:1", params=product))
        if "sync" in ops:
            out += [Point(Overlap.name, f"sync_{kind}", 0, mode=state, backend="cuda", src="cuda:0", dst="cuda:0")
                    for kind in SYNCS for state in ("idle", "busy")]
        if "make_tensor" in ops:
            out += [Point(Overlap.name, "make_tensor", parse_size(size), memory=m, backend="cuda",
                          src="cuda:0" if m == "device" else "host", dst="cuda:0")
                    for size in s.make_sizes for m in [*map(str, s.memory), "device"]]
        if "all_reduce" in ops:
            out += [Point(Overlap.name, "all_reduce", max(2, parse_size(text) // 2 * 2), memory="device", mode=mm,
                          backend="nccl", world_size=ctx.world_size, nnodes=ctx.nnodes, dtype="bfloat16",
                          params=product)
                    for text in s.sizes]
        return out

    def distribution(self, s: Settings, ctx: Context, max_ranks: int = 0) -> Distribution:
        return Distribution(world_sizes(s, ctx, max_ranks), "nccl", s.timeout_s)

    def start(self, s: Settings, ctx: Context) -> OverlapState:
        return OverlapState(s, ctx)

    def finish(self, state: OverlapState) -> None:
        if state.comm is not None:
            state.comm.close()   # collective over the ranks: the driver calls it on every rank at once

    def measure(self, point: Point, s: Settings, ctx: Context, state: OverlapState) -> list[Sample]:
        return _measure(point, s, ctx, state)

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
        return [(title, part) for title, part in (
            ("overlap pairs: a transfer beside a bf16 product", table(frame)),
            ("overlap synchronizations: µs a step gains", sync_table(frame)),
            ("overlap make_tensor: µs per tensor", make_table(frame))) if not part.empty]

    def figures(self, frame: pd.DataFrame, canvas) -> list:
        return overlap_figure(frame, canvas) + sync_figure(frame, canvas)

