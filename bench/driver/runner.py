"""Runs a suite's points in order: progress, resume, and out-of-memory points kept as skipped."""
from __future__ import annotations

import sys
from typing import Any, TextIO

from bench import lazy
from bench.driver.sweep import Planned
from bench.journal import RunWriter
from bench.results import point_key

torch = lazy.module("torch")
tqdm = lazy.module("tqdm")


def _out_of_memory(exc: BaseException) -> bool:
    """torch's allocators' failures: CUDA's, and the CPU's (a RuntimeError saying so)."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return "can't allocate memory" in text or "DefaultCPUAllocator" in text


def run_suite(planned: Planned, state: Any, writer: RunWriter | None, progress: bool = True,
              done: set | None = None, stream: TextIO | None = None) -> int:
    """Measure every point of planned.ctx's world not already done; rows go to disk as each point
    finishes. `state` is the suite's (planned.start()).

    `writer` is None on ranks other than 0 of a distributed suite: they measure, rank 0 writes,
    and `done` (rank 0's finished points, sent to every rank) keeps them all in step. The
    progress bar goes to `stream` (a spawned rank 0's copy of the terminal), else stderr.
    Returns the number of points measured.
    """
    suite, settings, ctx = planned.suite, planned.settings, planned.ctx
    if done is None:
        done = writer.done if writer is not None else set()
    todo = [p for p in suite.points(settings, ctx) if point_key(p) not in done]
    stream = stream or sys.stderr
    # In a log file (CI) a bar redrawn ten times a second is noise: one line every 10 s there.
    bar = tqdm.tqdm(total=len(todo), desc=f"{suite.name:<11}", unit="pt", disable=not progress or ctx.rank != 0, file=stream,
               dynamic_ncols=True, leave=True, mininterval=0.1 if stream.isatty() else 10)
    distributed = planned.distribution() is not None
    for group in _together(suite, todo):
        bar.set_postfix_str(group[0].label(), refresh=False)
        try:
            measured = (suite.measure_together(group, settings, ctx, state) if len(group) > 1
                        else [suite.measure(group[0], settings, ctx, state)])
        except (torch.cuda.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            if distributed or not _out_of_memory(exc):  # distributed: the ranks must agree
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            where = "GPU" if isinstance(exc, torch.cuda.OutOfMemoryError) else "host"
            reason = f"out of memory ({where}): {(str(exc) or type(exc).__name__).splitlines()[0]}"
            measured = [[point.skipped(reason)] for point in group]
        if writer is not None:
            for rows in measured:
                writer.add_point(rows)
        bar.update(len(group))
    bar.close()
    return len(todo)


def _together(suite, todo: list) -> list[list]:
    """The points to measure, in runs of consecutive points the suite measures as one."""
    groups: list[list] = []
    last = None
    for point in todo:
        key = suite.together(point)
        if key is not None and groups and key == last:
            groups[-1].append(point)
        else:
            groups.append([point])
        last = key
    return groups
