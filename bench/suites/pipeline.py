"""The input pipeline of a training job: what a DataLoader-fed loop delivers to the GPU.

A map-style dataset makes each sample in the loader's workers (numpy, as a decoding dataset
would: sample i is `sample_size` bytes of value i % 251); the DataLoader collates `batch`
samples, pins them or not (pin_memory), and the loop moves each batch to the GPU as a training
job does, with .to(non_blocking=...), or one batch ahead on a side stream (prefetch: the copy of
the next batch runs while the current one is consumed). Consuming a batch is checking it on the
GPU: every byte against the sample indices the batch must hold, so a lost, repeated or
reordered batch fails the point. Each operation of the timing core is one batch, on the host
clock (the loop's host work is part of what it delivers).

Beside each batch size, a pinned host-to-device copy of that size (op h2d) gives the link's
figure, so the table can say what fraction of it the pipeline reaches. Without a GPU the suite
measures the loader alone (op loader; each sample's first and last byte checked on the host).

Points: by default (grid=ablation) the last value of each switch's list (pinned, non_blocking,
prefetch, the most workers) and each switch changed alone; grid=full is every combination.
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
import re
import sys
from dataclasses import dataclass, field, replace
from typing import List

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from bench import ConfigError, timing
from bench.results import Sample
from bench.settings import Choice, nonempty, positive, require
from bench.sizes import format_size, parse_size, sweep
from bench.suites import Context, Point, format_bytes, host_available_bytes, trial_rows
from bench.suites.copy import same_data
from bench.timing import EventClock, HostClock

NAME = "pipeline"
DISTRIBUTED = False
PERIOD = 251            # sample i holds i % PERIOD: a prime, so consecutive batches of 2^k samples differ
PREFETCH_FACTOR = 2     # the DataLoader's default: batches each worker keeps ready
MIN_BATCHES = 2         # at least this many batches a trial


class Grid(Choice):
    ablation = "ablation"   # the last value of every list, and each switch changed alone
    full = "full"           # every combination


@dataclass
class Settings:
    workers: List[int] = field(default_factory=lambda: [0, 2, 4])     # DataLoader num_workers
    pin_memory: List[bool] = field(default_factory=lambda: [False, True])
    non_blocking: List[bool] = field(default_factory=lambda: [False, True])
    prefetch: List[bool] = field(default_factory=lambda: [False, True])   # the next batch's copy on a side stream
    grid: Grid = Grid.ablation
    sample_size: str = "64KiB"      # one sample's bytes; a batch holds batch size / sample_size samples
    min_size: str = "64KiB"         # batch sizes, in bytes: min_size, x size_factor, ..., max_size
    max_size: str = "256MiB"
    size_factor: int = 4
    min_trial_s: float = 0.02       # a trial lasts at least this long (and timing.min_trial_s)

    def __post_init__(self) -> None:
        for key in ("workers", "pin_memory", "non_blocking", "prefetch"):
            nonempty(f"pipeline.{key}", getattr(self, key))
        for w in self.workers:
            require(w >= 0, "pipeline.workers", w, "must be >= 0")
        sample = parse_size(self.sample_size, "pipeline.sample_size")
        lo, hi = parse_size(self.min_size, "pipeline.min_size"), parse_size(self.max_size, "pipeline.max_size")
        require(lo <= hi, "pipeline.min_size", self.min_size, f"is larger than pipeline.max_size={self.max_size}")
        require(sample <= lo, "pipeline.sample_size", self.sample_size,
                f"is larger than pipeline.min_size={self.min_size}: a batch holds at least one sample")
        require(self.size_factor >= 2, "pipeline.size_factor", self.size_factor, "must be an integer >= 2")
        positive("pipeline.min_trial_s", self.min_trial_s)


@dataclass(frozen=True)
class Loop:
    """One way of feeding the GPU: loader workers, pinned batches, non_blocking copies, prefetch."""

    workers: int
    pin_memory: bool = False
    non_blocking: bool = False
    prefetch: bool = False

    @property
    def memory(self) -> str:
        return "pinned" if self.pin_memory else "pageable"

    def mode(self, device: str = "cuda") -> str:
        """The row's mode: 'workers=4 non_blocking prefetch'; on a CPU, only the workers."""
        if device != "cuda":
            return f"workers={self.workers}"
        return " ".join([f"workers={self.workers}", "non_blocking" if self.non_blocking else "blocking",
                         *(["prefetch"] if self.prefetch else [])])

    @classmethod
    def of(cls, memory: str, mode: str) -> "Loop":
        """The loop a row's memory and mode name."""
        words = str(mode).split()
        workers = int(re.fullmatch(r"workers=(\d+)", words[0]).group(1))
        return cls(workers, memory == "pinned", "non_blocking" in words, "prefetch" in words)


def loops(p: Settings, device: str) -> list[Loop]:
    """The loops measured: on a CPU one per worker count; on a GPU the grid of the four switches."""
    if device != "cuda":
        return [Loop(int(w)) for w in dict.fromkeys(p.workers)]
    lists = [list(dict.fromkeys(x)) for x in (p.workers, p.pin_memory, p.non_blocking, p.prefetch)]
    if p.grid == Grid.full:
        combos = list(itertools.product(*lists))
    else:
        base = [values[-1] for values in lists]
        combos = [tuple(base)] + [tuple(base[:i] + [v] + base[i + 1:])
                                  for i, values in enumerate(lists) for v in values if v != base[i]]
    return [Loop(int(w), bool(pin), bool(nb), bool(pf)) for w, pin, nb, pf in combos]


def batch_sizes(cfg, device: str) -> list[int]:
    """Batch bytes from min_size to max_size in x size_factor steps, whole samples each; without
    a GPU they stop at sizes.cpu_max."""
    p = cfg.pipeline
    sample = parse_size(p.sample_size)
    lo, hi = parse_size(p.min_size), parse_size(p.max_size)
    if device != "cuda" and cfg.sizes.cpu_max is not None:
        hi = max(lo, min(hi, parse_size(cfg.sizes.cpu_max)))
    return list(dict.fromkeys(s // sample * sample for s in sweep(lo, hi, p.size_factor)))


def check(cfg, ctx: Context) -> str | None:
    p = cfg.pipeline
    big, workers = max(batch_sizes(cfg, ctx.device)), max(p.workers)
    queued = (workers * PREFETCH_FACTOR + 2) * big   # ready in the workers' queue, being pinned, in the loop
    shm, shared = _free_bytes("/dev/shm"), workers * PREFETCH_FACTOR * big
    if shared and shm is not None and shared > shm:
        raise ConfigError(f"pipeline.max_size: {workers} workers pass up to {format_bytes(shared)} of batches "
                          f"through /dev/shm, which has {format_bytes(shm)} free; lower pipeline.max_size or "
                          "pipeline.workers, or enlarge /dev/shm (docker run --shm-size)")
    available = host_available_bytes()
    if available is not None and 2 * queued > available:  # a worker's batch is made once, then collated
        raise ConfigError(f"pipeline.max_size: the pipeline needs about {format_bytes(2 * queued)} of host memory but "
                          f"only {format_bytes(available)} is available; lower pipeline.max_size or pipeline.workers")
    if ctx.device == "cuda":
        free = torch.cuda.mem_get_info(0)[0]
        if 6 * big > free:   # the link's buffer, batches in flight, the check's temporaries
            raise ConfigError(f"pipeline.max_size: the pipeline needs about {format_bytes(6 * big)} on cuda:0 but only "
                              f"{format_bytes(free)} is free; lower pipeline.max_size")
    return None


def _free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def sample_dtype(sample_size: int) -> str:
    """A row's dtype: one sample, 'uint8[65536]'."""
    return f"uint8[{sample_size}]"


def sample_bytes(dtype: str) -> int:
    return int(re.fullmatch(r"uint8\[(\d+)\]", str(dtype)).group(1))


def points(cfg, ctx: Context) -> list[Point]:
    sample = parse_size(cfg.pipeline.sample_size)
    gpu = ctx.device == "cuda"
    out = []
    for size in batch_sizes(cfg, ctx.device):
        if gpu:
            out.append(Point(NAME, "h2d", size, memory="pinned", backend="cuda", src="host", dst="cuda:0"))
        for loop in loops(cfg.pipeline, ctx.device):
            out.append(Point(NAME, "loader_to_gpu" if gpu else "loader", size,
                             memory=loop.memory if gpu else "pageable", mode=loop.mode(ctx.device),
                             backend=ctx.device, src="host", dst="cuda:0" if gpu else "host",
                             dtype=sample_dtype(sample)))
    return out


# ---------------------------------------------------------------- the loader and the loop


class SyntheticSamples(Dataset):
    """Sample i: `size` bytes of value i % PERIOD, made with numpy (no torch thread pool in the
    worker) as a decoding dataset would. Endless: the loop takes as many batches as it needs."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.full(self.size, i % PERIOD, dtype=np.uint8))


def _context():
    # Workers are forked, as Linux has always done for DataLoaders: a spawned or forkserver
    # worker imports torch anew (seconds per point). They never touch CUDA, so forking a
    # process that uses it is safe.
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


class Feed:
    """Batches from a DataLoader over SyntheticSamples, moved to `device` as the loop says and
    checked as they are consumed; calling it with n consumes n batches."""

    def __init__(self, batch: int, sample: int, loop: Loop, device: torch.device) -> None:
        self.batch, self.loop, self.device = batch, loop, device
        self.gpu = device.type == "cuda"
        forked = loop.workers > 0
        self.loader = DataLoader(SyntheticSamples(sample), batch_size=batch, num_workers=loop.workers,
                                 pin_memory=loop.pin_memory, multiprocessing_context=_context() if forked else None,
                                 prefetch_factor=PREFETCH_FACTOR if forked else None)
        self.batches = iter(self.loader)
        self.consumed = 0            # batches checked: the next one holds samples consumed * batch onwards
        self.short = 0               # batches with fewer samples than asked for
        self.errors = torch.zeros((), dtype=torch.int64, device=device)
        self.expected = (torch.arange(batch + PERIOD) % PERIOD).to(torch.uint8).to(device)
        self.stream = torch.cuda.Stream(device) if loop.prefetch else None
        self.ahead: torch.Tensor | None = None

    @property
    def queued(self) -> int:
        """Batches the workers make before the loop asks: the warm-up drains them."""
        return self.loop.workers * PREFETCH_FACTOR

    def __call__(self, n: int) -> None:
        for _ in range(n):
            self._check(self._next())

    def _move(self, batch: torch.Tensor) -> torch.Tensor:
        return batch.to(self.device, non_blocking=self.loop.non_blocking) if self.gpu else batch

    def _next(self) -> torch.Tensor:
        if self.stream is None:
            return self._move(next(self.batches))
        if self.ahead is None:
            self.ahead = self._load_ahead()
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        batch, self.ahead = self.ahead, None
        batch.record_stream(current)     # made on the side stream, freed after use on this one
        self.ahead = self._load_ahead()  # the next copy runs while this batch is consumed
        return batch

    def _load_ahead(self) -> torch.Tensor:
        with torch.cuda.stream(self.stream):
            return self._move(next(self.batches))

    def _check(self, batch: torch.Tensor) -> None:
        first = self.consumed * self.batch % PERIOD
        want = self.expected[first:first + len(batch)]
        if self.gpu:   # every byte: at HBM speed this costs little beside the copy
            self.errors += batch.ne(want[:, None]).sum()
        else:          # each sample's ends: a full pass would halve what the loader alone shows
            self.errors += (batch[:, 0] != want).sum() + (batch[:, -1] != want).sum()
        self.short += len(batch) != self.batch
        self.consumed += 1

    def correct(self) -> bool:
        """Every batch consumed held the samples it should, and some were consumed."""
        if self.gpu:
            torch.cuda.synchronize(self.device)
        return self.consumed > 0 and self.short == 0 and int(self.errors) == 0

    def close(self) -> None:
        """Stop the workers now, not whenever the iterator is collected."""
        self.ahead = None
        self.batches = None


def loop_timing(ctx: Context, min_trial_s: float, feed: Feed) -> timing.TimingConfig:
    """The core's settings for a loop: a warm-up that drains what the workers made before the
    loop started, trials of at least min_trial_s and MIN_BATCHES batches."""
    t = ctx.timing
    return replace(t, warmup=max(t.warmup, feed.queued + 1), min_trial_s=max(t.min_trial_s, min_trial_s),
                   min_iters=max(t.min_iters, MIN_BATCHES))


def _loop_point(point: Point, cfg, ctx: Context) -> list[Sample]:
    sample = sample_bytes(point.dtype)
    device = torch.device("cuda", ctx.local_rank) if ctx.device == "cuda" else torch.device("cpu")
    feed = Feed(point.size_bytes // sample, sample, Loop.of(point.memory, point.mode), device)
    try:
        clock = HostClock(torch.cuda.synchronize if feed.gpu else lambda: None)
        trials = timing.measure(feed, clock, loop_timing(ctx, cfg.pipeline.min_trial_s, feed))
        verified = feed.correct()
    finally:
        feed.close()
    return trial_rows(point, trials, point.size_bytes, 1.0, verified,
                      "" if verified else "data check failed: a batch differs from the samples it should hold")


def _link_point(point: Point, cfg, ctx: Context) -> list[Sample]:
    """A pinned host-to-device copy of one batch's size: the link's figure beside the loops'."""
    big, n = max(batch_sizes(cfg, ctx.device)), point.size_bytes
    bufs = ctx.extra.setdefault("pipeline_link", {})
    if not bufs:
        bufs["dst"] = torch.empty(big, dtype=torch.uint8, device=torch.device("cuda", ctx.local_rank))
        bufs["src"] = torch.empty(big, dtype=torch.uint8, pin_memory=True).copy_(
            torch.randint(0, 256, (big,), dtype=torch.uint8, device=bufs["dst"].device))
    dst, src = bufs["dst"][:n], bufs["src"][:n]
    dst.zero_()

    def copies(k: int) -> None:
        for _ in range(k):
            dst.copy_(src, non_blocking=True)

    trials = timing.measure(copies, EventClock(), ctx.timing)
    torch.cuda.synchronize()
    return trial_rows(point, trials, n, 1.0, same_data(dst, src))


def measure(point: Point, cfg, ctx: Context) -> list[Sample]:
    if point.op == "h2d":
        return _link_point(point, cfg, ctx)
    return _loop_point(point, cfg, ctx)


# ---------------------------------------------------------------- the table of a run's rows


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per loop and batch size: samples/s, GB/s delivered, and that as a fraction of the
    pinned h2d copy of the same size in the same run (medians of trials)."""
    rows = frame[(frame["suite"] == NAME) & (frame["status"] == "ok") & (frame["part"] == "total")]
    loops_ = rows[rows["op"] != "h2d"]
    if loops_.empty:
        return pd.DataFrame()
    runs = [k for k in ("instance", "run_id") if k in rows.columns and rows[k].nunique() > 1]
    keys = runs + ["op", "memory", "mode", "dtype", "size_bytes"]
    out = loops_.groupby(keys, sort=False).agg(time_s=("time_s", "median"), gbps=("algbw_gbps", "median")).reset_index()
    link = rows[rows["op"] == "h2d"].groupby(runs + ["size_bytes"])["algbw_gbps"].median().rename("link_gbps")
    out = out.join(link, on=runs + ["size_bytes"])
    out = out.sort_values(runs + ["op", "memory", "mode", "size_bytes"], kind="stable")
    batch = out["size_bytes"] // out["dtype"].map(sample_bytes)
    out.insert(len(keys), "batch", batch)
    out["samples_per_s"] = (batch / out.pop("time_s")).round(0).astype("int64")
    out["gbps"] = out["gbps"].round(2)
    out["of_link"] = (out["gbps"] / out["link_gbps"]).round(3)
    out["link_gbps"] = out["link_gbps"].round(1)
    out["size"] = out.pop("size_bytes").map(format_size)
    out = out[runs + ["op", "memory", "mode", "size", "batch", "samples_per_s", "gbps", "link_gbps", "of_link"]]
    return out.dropna(axis="columns", how="all")   # no link without a GPU


def main(argv: list[str] | None = None) -> int:
    """python -m bench.suites.pipeline RESULTS...: the pipeline table."""
    from bench.results import ResultsError, load

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m bench.suites.pipeline RESULTS...", file=sys.stderr)
        return 2
    try:
        rows = table(load(args))
    except ResultsError as exc:
        print(f"pipeline: {exc}", file=sys.stderr)
        return 2
    if rows.empty:
        print("pipeline: no measured pipeline rows", file=sys.stderr)
        return 1
    print(rows.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
