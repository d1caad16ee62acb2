"""Collectives through torch.distributed (api 'torch') and through NCCL called directly (api
'nccl'): NCCL on GPUs (one rank each), gloo between CPU processes (torch only).

Both apis run the same ops on the same buffers, sizes and checks, so torch's time over NCCL's
is what a PyTorch job pays over the library's own cost. The nccl api uses the libnccl.so.2 that
torch loaded (bench/nccl.py) with a communicator of its own, on torch's current stream, so
graph capture works the same way for both.

Sizes, algbw and busbw follow nccl-tests: S is the op's total message size (all_gather: the
gathered output; reduce_scatter: the input; all_to_all: one rank's send buffer), algbw = S/t,
busbw = algbw x factor. t is the slowest rank's time per op. As with nccl-tests' -c, every
point is first run once on known data and checked against the exact answer; the timed ops
then reuse the same buffers (in-place ops change their data, so the check precedes timing).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import List, Optional

import torch
import torch.distributed as tdist

from bench import ConfigError
from bench.results import Sample
from bench.settings import Choice, nonempty, positive, require
from bench.sizes import parse_size
from bench.suites import Context, Point, check_fits, local_rank_limit, trial_rows
from bench import timing
from bench.timing import EventClock, HostClock

NAME = "collectives"
DISTRIBUTED = True
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "int8": torch.int8,
          "uint8": torch.uint8}


class CollectiveOp(Choice):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    broadcast = "broadcast"
    reduce = "reduce"
    all_to_all = "all_to_all"
    sendrecv = "sendrecv"


DType = Choice("DType", [(name, name) for name in DTYPES])


class Transport(Choice):
    default = "default"
    socket = "socket"   # NCCL over sockets: the inter-node path on one box


class Api(Choice):
    torch = "torch"     # torch.distributed, what a PyTorch job calls
    nccl = "nccl"       # the NCCL library called directly: the floor under torch


@dataclass
class Settings:
    ops: List[CollectiveOp] = field(default_factory=lambda: list(CollectiveOp))
    dtypes: List[DType] = field(default_factory=lambda: [DType.float32])
    nproc: List[int] = field(default_factory=list)   # ranks on this node; [] = one per GPU (2 on a CPU)
    oversubscribe: bool = False                      # more ranks than CPU cores (slow); memory still caps them
    transport: Transport = Transport.default
    timeout_s: float = 300.0                         # a dead or hung rank ends the run after this long
    api: List[Api] = field(default_factory=lambda: list(Api))  # gloo (no GPU) runs torch only
    # The nccl api up to this size (null: every size). Above 16 MiB both apis time the same wire:
    # torch/nccl was 0.94-1.04 from 16 MiB to 4 GiB on 2x H200, so only torch runs there.
    nccl_max_size: Optional[str] = "16MiB"

    def __post_init__(self) -> None:
        nonempty("collectives.ops", self.ops)
        nonempty("collectives.api", self.api)
        nonempty("collectives.dtypes", self.dtypes)
        for n in self.nproc:
            require(n >= 1, "collectives.nproc", n, "must be >= 1")
        positive("collectives.timeout_s", self.timeout_s)
        if self.nccl_max_size is not None:
            parse_size(self.nccl_max_size, "collectives.nccl_max_size")


_REDUCING = {"all_reduce", "reduce_scatter", "reduce"}
_SPLIT = {"all_gather", "reduce_scatter", "all_to_all"}  # S is divided among the ranks
# torch 2.13 renamed the tensor forms of these two; older releases have only the old names.
_all_gather = getattr(tdist, "all_gather_single", None) or tdist.all_gather_into_tensor
_reduce_scatter = getattr(tdist, "reduce_scatter_single", None) or tdist.reduce_scatter_tensor


def bus_factor(op: str, n: int) -> float:
    if n == 1:
        return 0.0   # one rank moves nothing between GPUs (nccl-tests' all_reduce formula gives 0 too)
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in _SPLIT:
        return (n - 1) / n
    return 1.0


def backend(ctx: Context) -> str:
    return "nccl" if ctx.device == "cuda" else "gloo"


def _asked(cfg, ctx: Context) -> list[int]:
    return list(cfg.collectives.nproc) or [ctx.gpu_count if ctx.device == "cuda" else 2]


def world_sizes(cfg, ctx: Context) -> list[int]:
    """The ranks of each world measured: collectives.nproc, or one per GPU (2 on a CPU); capped at
    one rank per GPU present and at ctx.max_ranks (check() sets it from this machine's cores and
    host memory), so [2,4,8] scales as far as the machine goes."""
    limits = ([ctx.gpu_count] if ctx.device == "cuda" else []) + ([ctx.max_ranks] if ctx.max_ranks else [])
    return list(dict.fromkeys(min([n, *limits]) for n in _asked(cfg, ctx)))


def apis(cfg, ctx: Context) -> list[str]:
    """The apis measured here: NCCL needs GPUs, so gloo runs torch.distributed only."""
    return [str(a) for a in cfg.collectives.api if ctx.device == "cuda" or a == Api.torch]


def check(cfg, ctx: Context) -> str | None:
    c = cfg.collectives
    if not apis(cfg, ctx):
        raise ConfigError("collectives.api=[nccl] calls NCCL, which needs CUDA GPUs; without them use "
                          "collectives.api=[torch] (gloo)")
    if Api.nccl in c.api and ctx.device == "cuda":
        from bench import nccl

        try:
            nccl.load()
        except nccl.NcclUnavailable as exc:
            raise ConfigError(f"collectives.api includes nccl: {exc}") from None
    if c.transport == "socket" and ctx.device != "cuda":
        raise ConfigError("collectives.transport=socket forces NCCL's socket path and needs GPUs; "
                          "without them the run already uses gloo over local sockets")
    from bench.config import external_rank

    if external_rank() is not None:
        return None
    if not c.nproc and ctx.device == "cuda" and ctx.gpu_count < 2:
        return f"needs 2 or more GPUs, found {ctx.gpu_count} (collectives.nproc=1 forces a 1-rank run)"
    # Buffers of a rank in host memory: on a CPU about 3 x sizes.max; on GPUs they are on the GPU.
    buffers = 0 if ctx.device == "cuda" else 3 * max(ctx.sizes)
    ctx.max_ranks, limited_by = local_rank_limit("collectives", buffers, "3 x sizes.max" if buffers else "",
                                                  c.oversubscribe)
    sizes, asked = world_sizes(cfg, ctx), max(_asked(cfg, ctx))
    if max(sizes) < asked:
        gpus = ctx.device == "cuda" and ctx.gpu_count == max(sizes)
        why = f"the {ctx.gpu_count} GPU(s) present (one rank per GPU)" if gpus else limited_by
        print(f"xferbench: collectives.nproc={_asked(cfg, ctx)} capped at {why}: world sizes {sizes}", file=sys.stderr)
    if max(sizes) < 2 and all(op == "sendrecv" for op in c.ops):
        raise ConfigError("collectives.ops=[sendrecv] needs 2 or more ranks")
    ctx.world_size = max(sizes)
    if ctx.device == "cuda":
        check_fits("collectives (about 2 x sizes.max per GPU)", 2 * max(ctx.sizes), range(max(sizes)))
    return None


def _elsize(dtype: str) -> int:
    return torch.empty(0, dtype=DTYPES[dtype]).element_size()


def message_bytes(op: str, size: int, dtype: str, n: int) -> int:
    """The size actually measured: whole elements, and for split ops whole elements per rank."""
    unit = _elsize(dtype) * (n if op in _SPLIT else 1)
    return max(unit, size // unit * unit)


def points(cfg, ctx: Context) -> list[Point]:
    n = ctx.world_size
    ops = [op for op in cfg.collectives.ops if not (op == "sendrecv" and n < 2)]
    mode = "socket" if cfg.collectives.transport == "socket" else "default"
    nccl_max = parse_size(cfg.collectives.nccl_max_size) if cfg.collectives.nccl_max_size else None
    out, seen = [], set()
    for size in ctx.sizes:
        for op in ops:
            for dtype in cfg.collectives.dtypes:
                nbytes = message_bytes(op, size, dtype, n)
                for launch in ctx.launches:
                    # One rank sends nothing: its captured ops are local copies or empty graphs,
                    # and their replays time nothing of the interconnect.
                    if launch == "graph" and (nbytes > ctx.graph_max_bytes or n == 1):
                        continue
                    for api in apis(cfg, ctx):
                        if api == Api.nccl and nccl_max is not None and nbytes > nccl_max:
                            continue
                        p = Point(NAME, op, nbytes, mode=mode, backend=backend(ctx), world_size=n,
                                  nnodes=ctx.nnodes, dtype=dtype, launch=launch, api=api)
                        if p not in seen:
                            seen.add(p)
                            out.append(p)
    return out


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


def _device(ctx: Context) -> torch.device:
    return torch.device("cuda", ctx.local_rank) if ctx.device == "cuda" else torch.device("cpu")


def communicator(ctx: Context):
    """This rank's direct NCCL communicator, made on first use (every rank gets there together)."""
    comm = ctx.extra.get("nccl_comm")
    if comm is None:
        from bench import nccl

        uid = [nccl.unique_id() if ctx.rank == 0 else None]
        tdist.broadcast_object_list(uid, src=0)
        comm = ctx.extra["nccl_comm"] = nccl.Communicator(ctx.rank, ctx.world_size, uid[0], ctx.local_rank)
    return comm


class _Op:
    """Buffers and one call of a collective through one api; `correct` checks a single call's result."""

    def __init__(self, op: str, nbytes: int, dtype: str, api: str, ctx: Context) -> None:
        self.op, self.ctx, self.n, self.rank = op, ctx, ctx.world_size, ctx.rank
        self.comm = communicator(ctx) if api == Api.nccl else None
        self.dtype, self.device = DTYPES[dtype], _device(ctx)
        count = nbytes // _elsize(dtype)
        self.chunk = count // self.n if op in _SPLIT else count
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
        elif op == "all_gather":
            _all_gather(self.out, self.inp)
        elif op == "reduce_scatter":
            _reduce_scatter(self.out, self.inp)
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


def _all(value: float, ctx: Context, op=tdist.ReduceOp.MAX) -> torch.Tensor:
    t = torch.tensor(value, dtype=torch.float64, device=_device(ctx)).reshape(-1)
    tdist.all_reduce(t, op=op)
    return t


def _barrier(ctx: Context) -> None:
    _all(0.0, ctx)


def _graph_correct(op: _Op, ctx: Context) -> bool:
    """One op captured in a graph, replayed on fresh data, gives the exact answer on every rank.

    A capture that recorded nothing (the op ran outside the capture stream) would time an empty
    graph; this check turns that into a failed point instead of an impossible bandwidth.
    """
    graph = torch.cuda.CUDAGraph()
    with timing.capture(graph):
        op(1)
    op.fill()
    torch.cuda.synchronize()
    _barrier(ctx)
    graph.replay()
    torch.cuda.synchronize()
    return bool(_all(1.0 if op.correct() else 0.0, ctx, tdist.ReduceOp.MIN).item())


def measure(point: Point, cfg, ctx: Context) -> list[Sample]:
    try:
        op = _Op(point.op, point.size_bytes, point.dtype, point.api, ctx)
        oom = ""
    except torch.cuda.OutOfMemoryError as exc:
        op, oom = None, str(exc).splitlines()[0]
    if _all(1.0 if oom else 0.0, ctx).item():  # every rank skips together, or none does
        del op
        torch.cuda.empty_cache()
        return [point.skipped(f"out of memory on some rank: {oom or 'see that rank'}")] if ctx.rank == 0 else []

    op.fill()
    op()
    if ctx.device == "cuda":
        torch.cuda.synchronize()
    verified = bool(_all(1.0 if op.correct() else 0.0, ctx, tdist.ReduceOp.MIN).item())

    agree = lambda x: _all(float(x), ctx).item()  # noqa: E731
    if ctx.device == "cuda":
        clock = EventClock(before_start=lambda: _barrier(ctx))
    else:
        clock = HostClock(sync=lambda: _barrier(ctx))
    timer = timing.measure_graph if point.launch == "graph" else timing.measure
    trials = timer(op, clock, ctx.timing, agree)
    if point.launch == "graph":
        verified = verified and _graph_correct(op, ctx)
    # The slowest rank sets the pace of a collective: each trial keeps the maximum over ranks,
    # and the minimum beside it, so a straggler shows.
    times = torch.tensor([t.time_s for t in trials], dtype=torch.float64, device=_device(ctx))
    slowest, fastest = times.clone(), times.clone()
    tdist.all_reduce(slowest, op=tdist.ReduceOp.MAX)
    tdist.all_reduce(fastest, op=tdist.ReduceOp.MIN)
    if ctx.rank != 0:
        return []
    trials = [replace(t, time_s=float(hi), fastest_rank_s=float(lo))
              for t, hi, lo in zip(trials, slowest.tolist(), fastest.tolist())]
    return trial_rows(point, trials, point.size_bytes, bus_factor(point.op, ctx.world_size), verified)
