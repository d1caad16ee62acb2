"""One rank's measurement of a point: the collective's buffers and one call through one api.

As with nccl-tests' -c, every point is first run once on known data and checked against the
exact answer; the timed ops then reuse the same buffers (in-place ops change their data, so the
check precedes timing). A trial's time is the slowest rank's, the fastest rank's beside it (held: the last-released
rank's span, which is the fastest's).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from bench import lazy
from bench.contract import Context, Point, trial_rows
from bench.links import bus_factor, split_op
from bench.measure import nccl, timing
from bench.measure.consensus import Consensus
from bench.measure.timing import HostClock
from bench.results import Sample
from bench.suites.collectives.settings import ELEMENT_BYTES, Api

torch = lazy.module("torch")
tdist = lazy.module("torch.distributed")

_REDUCING = {"all_reduce", "reduce_scatter", "reduce"}


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

    def communicator(self) -> nccl.Communicator:
        if self.comm is None:
            self.comm = nccl.join(self.ctx.rank, self.ctx.world_size, self.ctx.local_rank)
        return self.comm


class _Op:
    """Buffers and one call of a collective through one api; `correct` checks a single call's result."""

    def __init__(self, op: str, nbytes: int, dtype: str, api: str, ctx: Context, state: CollectivesState) -> None:
        self.op, self.ctx, self.n, self.rank = op, ctx, ctx.world_size, ctx.rank
        self.comm = state.communicator() if api == Api.nccl else None
        self.dtype, self.device = _dtype(dtype), rank_device(ctx)
        count = nbytes // ELEMENT_BYTES[dtype]
        self.chunk = count // self.n if split_op(op) else count
        size_in = {"all_gather": self.chunk}.get(op, count)
        size_out = {"all_gather": count, "reduce_scatter": self.chunk, "all_to_all": count}.get(op, 0)
        self.count = count
        self.inp = torch.empty(size_in, dtype=self.dtype, device=self.device)
        self.out = torch.empty(size_out, dtype=self.dtype, device=self.device) if size_out else None
        if op == "sendrecv":
            self.out = torch.empty(count, dtype=self.dtype, device=self.device)
        self._launch = self._nccl_launch() if self.comm is not None else None

    def fill(self) -> None:
        for lo in range(0, self.inp.numel(), _CHECK_CHUNK):
            count = min(_CHECK_CHUNK, self.inp.numel() - lo)
            self.inp[lo:lo + count] = _pattern(self.rank, lo, count, self.dtype, self.device, self.op in _REDUCING)
        if self.out is not None:
            self.out.zero_()

    def __call__(self, n: int = 1) -> None:
        if self._launch is not None:
            stream = torch.cuda.current_stream().cuda_stream  # the capture stream inside a capture
            for _ in range(n):
                self._launch(stream)
            return
        for _ in range(n):
            self._once()

    def _nccl_launch(self):
        """This op's NCCL call, its buffers checked once (eager small ops are host-bound)."""
        op, comm = self.op, self.comm
        if op == "all_reduce":
            return comm.prepare("all_reduce", self.inp)
        if op in ("all_gather", "reduce_scatter", "all_to_all"):
            return comm.prepare(op, self.out, self.inp)
        if op in ("broadcast", "reduce"):
            return comm.prepare(op, self.inp, 0)
        # the same ring as torch's: send to the next rank, receive from the previous
        return comm.prepare("sendrecv", self.inp, self.out, (self.rank + 1) % self.n, (self.rank - 1) % self.n)

    def _once(self) -> None:
        op = self.op
        if op == "all_reduce":
            tdist.all_reduce(self.inp)
        elif op == "all_gather":   # torch 2.13 renamed the tensor form; older releases have only the old name
            (getattr(tdist, "all_gather_single", None) or tdist.all_gather_into_tensor)(self.out, self.inp)
        elif op == "reduce_scatter":
            (getattr(tdist, "reduce_scatter_single", None) or tdist.reduce_scatter_tensor)(self.out, self.inp)
        elif op == "broadcast":
            tdist.broadcast(self.inp, src=0)
        elif op == "reduce":
            tdist.reduce(self.inp, dst=0)
        elif op == "all_to_all":
            tdist.all_to_all_single(self.out, self.inp)
        else:  # sendrecv: a ring, every rank sends to the next and receives from the previous
            nxt, prv = (self.rank + 1) % self.n, (self.rank - 1) % self.n
            reqs = tdist.batch_isend_irecv([tdist.P2POp(tdist.isend, self.inp, nxt),
                                            tdist.P2POp(tdist.irecv, self.out, prv)])
            for r in reqs:
                r.wait()

    def correct(self) -> bool:
        """This rank's result of one call on fresh data equals the exact answer."""
        red = self.op in _REDUCING

        def pat(r: int, offset: int = 0):
            return lambda lo, count: _pattern(r, offset + lo, count, self.dtype, self.device, red)

        def total(offset: int = 0):
            return lambda lo, count: sum(pat(r, offset)(lo, count).double() for r in range(self.n))

        def blocks(source_offset: int):  # block r of the output holds rank r's data
            return all(_matches(self.out[r * self.chunk:(r + 1) * self.chunk], pat(r, source_offset))
                       for r in range(self.n))

        if self.op == "all_reduce" or (self.op == "reduce" and self.rank == 0):
            return _matches(self.inp, total())
        if self.op == "reduce":
            return True  # only the root's buffer is defined after a reduce
        if self.op == "reduce_scatter":
            return _matches(self.out, total(self.rank * self.chunk))
        if self.op == "all_gather":
            return blocks(0)
        if self.op == "all_to_all":
            return blocks(self.rank * self.chunk)
        if self.op == "broadcast":
            return _matches(self.inp, pat(0))
        return _matches(self.out, pat((self.rank - 1) % self.n))


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


def measure_point(point: Point, ctx: Context, state: CollectivesState) -> list[Sample]:
    ranks = state.ranks
    try:
        op = _Op(point.op, point.size_bytes, point.dtype, point.api, ctx, state)
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
    clock = timing.device_clock(point.launch, ranks.barrier, ranks.max) if ctx.device == "cuda" \
        else HostClock(sync=ranks.barrier)
    timer = timing.measure_graph if point.launch == "graph" else timing.measure
    # Held, the last-released rank's span is the ops' own time (below): the timing core decides on it.
    trials = timer(op, clock, ctx.timing, ranks.min if point.launch == "held" else ranks.max)
    if point.launch == "graph":
        verified = verified and _graph_correct(op, ranks)
    times = [t.time_s for t in trials]
    slowest, fastest = ranks.reduce(times, "max"), ranks.reduce(times, "min")
    if ctx.rank != 0:
        return []
    if point.launch == "held":
        # Every rank's ops end together, the last of them released by its latch: that rank's span
        # is the ops' own time, the others' add the wait for it.
        slowest = fastest
    # Else the slowest rank sets the pace of a collective: each trial keeps the maximum over
    # ranks, and the minimum beside it, so a straggler shows.
    trials = [replace(t, time_s=hi, fastest_rank_s=lo) for t, hi, lo in zip(trials, slowest, fastest)]
    return trial_rows(point, trials, point.size_bytes, bus_factor(point.op, ctx.world_size), verified)
