"""One rank's measurement of a point: the collective's buffers and one call through one api.

As with nccl-tests' -c, every point is first run once on known data and checked against the
exact answer; the timed ops then reuse the same buffers (in-place ops change their data, so the
check precedes timing). A trial's time is the slowest rank's, the fastest rank's beside it (held
behind each rank's own latch, on several hosts: the last-released rank's span, the fastest's).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from bench import lazy
from bench.contract import Context, Point, trial_rows
from bench.measure import flags, nccl, timing
from bench.measure.consensus import Consensus
from bench.measure.release import SharedRelease
from bench.measure.timing import HostClock
from bench.results import Sample
from bench.suites.collectives.ops import Collective
from bench.suites.collectives.settings import ELEMENT_BYTES, OPS, Api

torch = lazy.module("torch")
tdist = lazy.module("torch.distributed")

def _dtype(name: str):
    return getattr(torch, name)


_CHECK_CHUNK = 1 << 24  # elements: patterns and checks work in pieces to bound their memory


def _pattern(rank: int, start: int, count: int, dtype: torch.dtype, device, reducing: bool) -> torch.Tensor:
    """Elements [start, start+count) of rank's data: small integers, exact in every dtype
    (bf16 included) and in their sums over up to 128 ranks (63 in int8)."""
    period = 3 if reducing else 127
    return ((torch.arange(start, start + count, device=device) + 17 * rank) % period).to(dtype)


def _matches(tensor: torch.Tensor, expected) -> bool:
    """tensor equals expected(start, count), compared a chunk at a time (in float64 for sums)."""
    for lo in range(0, tensor.numel(), _CHECK_CHUNK):
        count = min(_CHECK_CHUNK, tensor.numel() - lo)
        want = expected(lo, count)
        if not torch.equal(tensor[lo:lo + count].to(want.dtype), want):
            return False
    return True


def rank_device(ctx: Context) -> torch.device:
    """This rank's GPU, or the CPU under gloo."""
    return torch.device("cuda", ctx.local_rank) if ctx.device == "cuda" else torch.device("cpu")


@dataclass
class CollectivesState:
    """One rank's run: its agreement with the others, and its direct NCCL communicator, made at the
    first nccl point (every rank gets there together)."""

    ctx: Context
    ranks: Consensus
    comm: nccl.Communicator | None = None
    start_word: SharedRelease | None = None

    def communicator(self) -> nccl.Communicator:
        if self.comm is None:
            self.comm = nccl.join(self.ctx.rank, self.ctx.world_size, self.ctx.local_rank)
        return self.comm

    def release(self) -> SharedRelease | None:
        """The word every rank's held ops start on, made at the first held point; None where the
        ranks span hosts (each then sleeps behind its own latch)."""
        if self.start_word is None and self.ctx.nnodes == 1:
            self.start_word = SharedRelease.join(self.ctx.rank, self.ctx.world_size)
        return self.start_word


class _Op:
    """Buffers and one call of a collective (its declaration, ops.py) through one api; `correct`
    checks a single call's result. What the declaration's calls and checks read: inp, out, rank,
    n, next, prev, count, chunk, counts, and the patterns (`pattern`, `total`, `blocks`, `matches`)."""

    def __init__(self, spec: Collective, nbytes: int, dtype: str, api: str, ctx: Context,
                 state: CollectivesState) -> None:
        self.spec, self.ctx, self.n, self.rank = spec, ctx, ctx.world_size, ctx.rank
        self.next, self.prev = (self.rank + 1) % self.n, (self.rank - 1) % self.n
        self.comm = state.communicator() if api == Api.nccl else None
        self.dtype, self.device = _dtype(dtype), rank_device(ctx)
        count = nbytes // ELEMENT_BYTES[dtype]
        self.chunk = count // self.n if spec.split else count
        self.count = count
        self.counts = spec.counts(count, self.n, self.rank) if spec.counts else None
        size_out = spec.out(count, self.n)
        self.inp = torch.empty(spec.inp(count, self.n), dtype=self.dtype, device=self.device)
        self.out = torch.empty(size_out, dtype=self.dtype, device=self.device) if size_out else None
        # This op's NCCL calls, its buffers checked once (eager small ops are host-bound).
        self._launch = self.comm.prepare(spec.nccl(self.comm, self)) if self.comm is not None else None

    def fill(self) -> None:
        for lo in range(0, self.inp.numel(), _CHECK_CHUNK):
            count = min(_CHECK_CHUNK, self.inp.numel() - lo)
            self.inp[lo:lo + count] = _pattern(self.rank, lo, count, self.dtype, self.device, self.spec.reduces)
        if self.out is not None:
            self.out.zero_()

    def __call__(self, n: int = 1) -> None:
        if self._launch is not None:
            stream = torch.cuda.current_stream().cuda_stream  # the capture stream inside a capture
            for _ in range(n):
                self._launch(stream)
            return
        call = self.spec.torch
        for _ in range(n):
            call(tdist, self)

    def pattern(self, rank: int, offset: int = 0):
        """Rank's data from element `offset` on, as a function of (start, count)."""
        return lambda lo, count: _pattern(rank, offset + lo, count, self.dtype, self.device, self.spec.reduces)

    def total(self, offset: int = 0):
        """The sum over the ranks of their data from `offset` on."""
        return lambda lo, count: sum(self.pattern(r, offset)(lo, count).double() for r in range(self.n))

    def blocks(self, source_offset: int) -> bool:
        """Block r of the output holds rank r's data from `source_offset` on."""
        return all(_matches(self.out[r * self.chunk:(r + 1) * self.chunk], self.pattern(r, source_offset))
                   for r in range(self.n))

    @staticmethod
    def matches(tensor: torch.Tensor, expected) -> bool:
        return _matches(tensor, expected)

    def correct(self) -> bool:
        """This rank's result of one call on fresh data equals the exact answer."""
        return self.spec.correct(self)


def _graph_correct(op: _Op, ranks: Consensus) -> bool:
    """One op captured in a graph, replayed on fresh data, gives the exact answer on every rank.

    A capture that recorded nothing (the op ran outside the capture stream) would time an empty
    graph; this check turns that into a failed point instead of an impossible bandwidth.
    """
    graph = torch.cuda.CUDAGraph()
    with timing.capture(graph):
        op(1)
    op.fill()
    torch.cuda.synchronize()
    ranks.barrier()
    graph.replay()
    torch.cuda.synchronize()
    return ranks.all(op.correct())


def _holds_in_graph(spec: Collective) -> bool:
    """Whether held ops are graph replays queued behind the start word: eager calls held so ran at
    the pace of the stream they landed on, which differs from one process to the next (docs/method.md,
    "Held collectives"). Not under NCCL's graph mixing support, which orders replays after its own
    streams: replays held so hung."""
    return spec.held_in_graph and os.environ.get("NCCL_GRAPH_MIXING_SUPPORT") == "0"


def measure_point(point: Point, ctx: Context, state: CollectivesState) -> list[Sample]:
    ranks = state.ranks
    held_on_device = point.launch == "held" and ctx.device == "cuda"
    if held_on_device and ctx.nnodes == 1:
        try:
            flags.require()   # the same driver on every rank of the host: every rank skips, or none
        except flags.FlagsUnavailable as exc:
            return [point.skipped(f"held collectives need the driver's stream memory operations: {exc}")] \
                if ctx.rank == 0 else []
    try:
        op = _Op(OPS[point.op], point.size_bytes, point.dtype, point.api, ctx, state)
        oom = ""
    except torch.cuda.OutOfMemoryError as exc:
        op, oom = None, str(exc).splitlines()[0]
    if ranks.max(1.0 if oom else 0.0):  # every rank skips together, or none does
        del op
        torch.cuda.empty_cache()
        return [point.skipped(f"out of memory on some rank: {oom or 'see that rank'}")] if ctx.rank == 0 else []

    op.fill()
    op()
    if ctx.device == "cuda":
        torch.cuda.synchronize()
    verified = ranks.all(op.correct())
    release = state.release() if held_on_device else None
    in_graph = point.launch == "graph" or (release is not None and _holds_in_graph(op.spec))
    clock = timing.device_clock(point.launch, ranks.barrier, ranks.reduce, release) if ctx.device == "cuda" \
        else HostClock(sync=ranks.barrier)
    timer = timing.measure_graph if in_graph else timing.measure
    # Held behind each rank's own latch, the last-released rank's span is the ops' own time (below):
    # the timing core decides on it. Released together, every rank's span is, as eager.
    last_released = point.launch == "held" and release is None
    trials = timer(op, clock, ctx.timing, ranks.least if last_released else ranks.reduce)
    if in_graph:
        verified = verified and _graph_correct(op, ranks)
    times = [t.time_s for t in trials]
    slowest, fastest = ranks.reduce(times, "max"), ranks.reduce(times, "min")
    if ctx.rank != 0:
        return []
    if last_released:
        # Every rank's ops end together, the last of them released by its latch: that rank's span
        # is the ops' own time, the others' add the wait for it.
        slowest = fastest
    # Else the slowest rank sets the pace of a collective: each trial keeps the maximum over
    # ranks, and the minimum beside it, so a straggler shows.
    trials = [replace(t, time_s=hi, fastest_rank_s=lo) for t, hi, lo in zip(trials, slowest, fastest)]
    return trial_rows(point, trials, point.size_bytes, OPS[point.op].bus_factor(ctx.world_size), verified)
