"""Pairs: a transfer (h2d, d2h, peer, or all_reduce across the ranks) on a stream of its own
beside a bf16 matrix product on another.

Each is first timed alone; a round then holds c transfers and m products, counts chosen from
those times so that both streams are busy about equally long. Rounds run on two streams, the
transfer issued first as a loop that prefetches its next batch does, each round ending when
both streams are done; and, as the control, on one stream. overlap = serial / concurrent, where
serial = c x transfer alone + m x product alone: 1.0 is none, and a balanced round reaches 2.0
at best.
"""
from __future__ import annotations

import math
from typing import Callable

from bench import lazy
from bench.contract import Context, Point
from bench.measure import timing
from bench.measure.checks import same_data
from bench.measure.consensus import Consensus
from bench.measure.timing import EventClock, HostClock, Trial
from bench.results import Sample
from bench.suites.overlap.model import ALL_REDUCE
from bench.suites.overlap.state import OverlapState
from bench.suites.overlap.trials import median_op, settle
from bench.suites.overlap.work import Matmul, Transfer, rank_device

torch = lazy.module("torch")

MOST_PER_ROUND = 8      # a round holds at most this many of the longer operation
BALANCE_GAP = 0.05      # a round's two sides may differ by this much: overlap can then reach 1.95


def copy_transfer(point: Point, state: OverlapState) -> Transfer:
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


def measure_pair(point: Point, ctx: Context, transfer: Transfer, product: Matmul, ranks: Consensus,
                 streams: tuple) -> list[Sample]:
    if transfer.host_blocks:
        clock = HostClock(torch.cuda.synchronize)
    else:
        clock = EventClock(before_start=ranks.barrier)
    t, agree = ctx.timing, ranks.reduce
    copy_alone = settle(timing.measure(transfer.run, clock, t, agree), ranks)
    compute_alone = settle(timing.measure(product, clock, t, agree), ranks)
    c, m = balance(median_op(copy_alone), median_op(compute_alone))
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
    compute rows none: TFLOP/s is reading._flops_of(mode) / time_s."""
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


def all_reduce_point(point: Point, ctx: Context, state: OverlapState) -> list[Sample]:
    if ctx.world_size < 2:
        return [point.skipped("needs 2 or more GPUs, one rank each")] if ctx.rank == 0 else []
    ranks = Consensus(rank_device(ctx))
    try:  # everything allocated before any collective: a rank out of memory must not leave one waiting
        buf = torch.full((point.size_bytes // 2,), float(ctx.rank + 1), dtype=torch.bfloat16, device=rank_device(ctx))
        product, oom = state.product(point.params.matmul), ""
    except torch.cuda.OutOfMemoryError as exc:
        oom = str(exc).splitlines()[0]
    if ranks.max(1.0 if oom else 0.0):   # every rank skips together, or none does
        torch.cuda.empty_cache()
        return [point.skipped(f"out of memory on some rank: {oom or 'see that rank'}")] if ctx.rank == 0 else []
    rows = measure_pair(point, ctx, _all_reduce(buf, ctx, ranks, state), product, ranks, state.streams())
    return rows if ctx.rank == 0 else []


def _all_reduce(buf, ctx: Context, ranks: Consensus, state: OverlapState) -> Transfer:
    """A bf16 all_reduce of buf (holding rank + 1) through NCCL on the current stream; checked once,
    before timing (the timed ones sum in place, so their values grow)."""
    comm, n = state.communicator(), ctx.world_size
    launch = comm.prepare(comm.all_reduce_calls(buf))
    launch(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    ok = ranks.all(bool((buf == n * (n + 1) // 2).all()))   # exact in bf16 up to 22 ranks

    def run(k: int) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(k):
            launch(stream)

    return Transfer(run, lambda: ok, bus_factor=ALL_REDUCE.bus_factor(n))
