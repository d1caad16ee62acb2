"""The input pipeline of a training job: what a DataLoader-fed loop delivers to the GPU, and the
stage that limits it.

The loop (feed.py). A map-style dataset makes each sample in the loader's workers; the
DataLoader collates `batch` samples, hands the batch from the worker to the main process (a new
shared-memory segment a batch), pins it or not (pin_memory: the pin-memory thread copies it into
page-locked memory); the loop moves it to the GPU as a training job does, with
.to(non_blocking=...) or one batch ahead on a side stream (prefetch), and consumes it by
checking it: on the GPU every byte against the sample indices the batch must hold, so a lost,
repeated or reordered batch fails the point (without a GPU each sample's first and last byte).
Producers (source.py): `numpy` makes each sample with numpy (a decoding dataset's per-sample
cost); `free` returns views of a buffer made once, so the DataLoader's own machinery shows
without a producer's limit; sample i holds the byte i mod 251 either way. Or the user's own
Dataset (pipeline.dataset=package.module:factory, pipeline.collate_fn): its bytes are unknown
here, so its batches are checked for what can be: their samples in order, none lost, and the
same structure, dtypes and shapes (docs/training.md).

Steady state. A point is one continuous stream of batches (timing.stream_iters/stream_trials):
a warm-up that drains what the workers queued, then trials that cut the stream at marks, each
at least twice what the workers hold ahead and pipeline.min_trial_s long. The marks are CUDA
events on the consuming stream, or the host's clock without a GPU.

Rounds (rounds.py). A batch size's points (its stages alone and its loops) are measured in
pipeline.rounds interleaved rounds, A B C ... A B C ..., each a short segment of each point,
with the host's single-thread pace (timing.host_pace, in host_pace_s) read before each round and
after the last (op host_pace): a
point's figure is the median over its rounds, its spread the slowest and fastest round.

Stages alone (measure.py), at each batch size, each isolated as the loop runs it, on what it
receives: make, collate (in `workers` workers at once, or the main process), handoff (the
DataLoader carrying fresh, unwritten shared-memory batches), pin, h2d (pinned: the link;
pageable: as received), consume (the check on the GPU; without one of each batch as received).
Stages in the loop: the batch carries the seconds each stage spent on it (LoaderBatch), so the
loop's own stage times come from the same trials; the bound (the slowest group of stages one
thread runs one after another, stages_of) and the fraction of it the loop reaches hold where
the host's absolute pace does not.

Threads. pipeline.threads sets torch.set_num_threads in the loop's main process and workers
(0: torch's default, one thread per core): the ablation grid measures the loops at each value
beside each other, and the advice names a setting that moves a loop beyond its spread.

Rows: docs/columns.md. Points: per sample size and batch size, the host's pace, the stages any
loop needs, then the loops of every producer: by default (grid=ablation) the last value of each
switch's list, each switch changed alone, and the DataLoader's defaults (at each thread
setting); grid=full is every combination.
"""
from __future__ import annotations

import os


from bench import ConfigError, lazy
from bench.contract import Context, Point, Suite
from bench.measure.memory import format_bytes, gpu_free_bytes, host_available_bytes
from bench.results import Sample
from bench.sizes import parse_size
from bench.suites.pipeline.figure import pipeline_figure
from bench.suites.pipeline.measure import Segment, measure_point
from bench.suites.pipeline.model import (COLLATE, CONSUME, H2D, HANDOFF, LOOP_OP, MAKE, PIN, PACE_OP, STAGES, Grid, Loop, Pace,
                                         Producer, Settings, Stage, batch_sizes, dataloader_defaults, descriptor,
                                         loops, sample_dtype, stages_of)
from bench.suites.pipeline.rounds import measure_rounds, round_timing
from bench.suites.pipeline.source import PERIOD, user_dataset, user_sample
from bench.suites.pipeline.tables import advice, advice_lines, judged, stage_table, summary_tables, table

pd = lazy.module("pandas")

torch = lazy.module("torch")

__all__ = ["COLLATE", "CONSUME", "H2D", "HANDOFF", "LOOP_OP", "MAKE", "PIN", "PACE_OP", "STAGES", "Grid", "Loop", "Pace", "Pipeline", "Producer",
           "Segment", "Settings", "Stage", "advice", "advice_lines", "batch_sizes", "dataloader_defaults",
           "descriptor", "loops", "measure_point", "pipeline_figure", "stage_table", "stages_of", "table"]


def _free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def samples_of(p: Settings) -> list[tuple[int, str, int | None]]:
    """(sample bytes, the rows' dtype, the most samples a batch may hold) of each sample the
    suite measures: the user's dataset's one collated sample (made here: a bad factory is one
    line before anything runs), else each of pipeline.sample_sizes."""
    if p.dataset:
        size, dtype = user_sample(p.user)
        return [(size, dtype, len(user_dataset(p.dataset)))]
    return [(s, sample_dtype(s), None) for s in dict.fromkeys(parse_size(x) for x in p.sample_sizes)]


def _check(p: Settings, ctx: Context) -> None:
    gpu = ctx.device == "cuda"
    sampled = samples_of(p)
    sizes = [b for s, _, most in sampled for b in batch_sizes(p, ctx, s, most)]
    if not sizes:
        what = "the dataset's samples" if p.dataset else "a whole sample"
        raise ConfigError(f"pipeline.{'dataset' if p.dataset else 'sample_sizes'}: no batch size holds {what} "
                          f"(batch sizes up to {format_bytes(parse_size(p.max_size))}); "
                          f"{'raise pipeline.max_size or use a longer dataset' if p.dataset else 'lower the sample size or raise pipeline.max_size'}")
    if not ctx.here:
        return
    big = max(sizes)
    ahead = max(lp.queued for s, _, _ in sampled for lp in loops(p, ctx.device, s))
    shm, shared = _free_bytes("/dev/shm"), ahead * big
    if shared and shm is not None and shared > shm:
        raise ConfigError(f"pipeline.max_size: the workers pass up to {format_bytes(shared)} of batches "
                          f"through /dev/shm, which has {format_bytes(shm)} free; lower pipeline.max_size or "
                          "pipeline.workers, or enlarge /dev/shm (docker run --shm-size)")
    # Batches queued, being pinned and in the loop, each made once then collated; the free
    # producer's rows; the link's pinned buffer.
    need = 2 * (ahead + 2) * big + PERIOD * max(s for s, _, _ in sampled) + big
    available = host_available_bytes()
    if available is not None and need > available:
        raise ConfigError(f"pipeline.max_size: the pipeline needs about {format_bytes(need)} of host memory but "
                          f"only {format_bytes(available)} is available; lower pipeline.max_size or pipeline.workers")
    if gpu:
        free = gpu_free_bytes(0)
        if 6 * big > free:   # the link's buffer, batches in flight, the check's temporaries
            raise ConfigError(f"pipeline.max_size: the pipeline needs about {format_bytes(6 * big)} on cuda:0 but "
                              f"only {format_bytes(free)} is free; lower pipeline.max_size")


def sweep(p: Settings, ctx: Context) -> list[Point]:
    """Per sample and batch size: the host's pace, the stages any loop needs, then the loops."""
    gpu = ctx.device == "cuda"
    device_side = (H2D, CONSUME) if gpu else ()
    out = []
    for sample, dtype, most in samples_of(p):
        measured = loops(p, ctx.device, sample)
        needed = dict.fromkeys(st for lp in measured for group in stages_of(lp, gpu).values() for st in group)
        order = sorted(needed, key=lambda st: (STAGES.index(st.op), st.memory, str(st.producer), st.workers, st.threads))
        for size in batch_sizes(p, ctx, sample, most):
            out.append(Point(Pipeline.name, PACE_OP, 0, mode="timing.host_pace 1 thread",
                             backend=ctx.device, src="host", dst="host", dtype=dtype,
                             params=Pace(sample, size, p.user)))
            out += [Point(Pipeline.name, st.op, size, memory=st.memory, mode=st.mode(), backend=ctx.device,
                          src="host", dst="cuda:0" if st.op in device_side else "host", dtype=dtype, params=st)
                    for st in order]
            out += [Point(Pipeline.name, LOOP_OP if gpu else "loader", size, memory=lp.memory if gpu else "pageable",
                          mode=lp.mode(ctx.device), backend=ctx.device, src="host",
                          dst="cuda:0" if gpu else "host", dtype=dtype, params=lp) for lp in measured]
    return out


class Pipeline(Suite):
    name = "pipeline"
    title = "Input pipeline"
    Settings = Settings
    groups = ("training",)
    curves = False          # its own figures say what its rows mean
    order = 50
    # Between-run sigma of the judged figure, a loop's fraction of its own bound (judged): two
    # default runs on nvidia-h200 agreed to 0.01 at the median loop and 0.09 at the worst
    # (docs/training.md); the host's pace, which moved their GB/s by up to 1.42x, cancels in it.
    noise = {("gpu", "bandwidth"): 0.08, ("gpu", "latency"): 0.08}

    def check(self, p: Settings, ctx: Context) -> str | None:
        _check(p, ctx)
        return None

    def points(self, p: Settings, ctx: Context) -> list[Point]:
        return sweep(p, ctx)

    def together(self, point: Point):
        """A batch size's points, measured in interleaved rounds."""
        what = point.params
        return (point.dtype, what.batch_bytes if isinstance(what, Pace) else point.size_bytes)

    def measure_together(self, points: list[Point], p: Settings, ctx: Context, state) -> list[list[Sample]]:
        return measure_rounds(points, p, ctx, 0 if p.dataset else p.epoch_batches)

    def measure(self, point: Point, p: Settings, ctx: Context, state) -> list[Sample]:
        return measure_rounds([point], p, ctx, 0 if p.dataset else p.epoch_batches)[0]

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame | str]]:
        return summary_tables(frame)

    def figures(self, frame: pd.DataFrame, canvas) -> list:
        return pipeline_figure(frame, canvas)

    def judged(self, rows: pd.DataFrame) -> pd.DataFrame:
        return judged(rows)
