"""Runs a suite's points in order: progress, resume, and out-of-memory points kept as skipped."""
from __future__ import annotations

import sys
from typing import Any, Callable, Iterator, TextIO

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
              done: set | None = None, stream: TextIO | None = None,
              stopped: Callable[[], None] | None = None, before: Callable[[Any], None] | None = None) -> int:
    """Measure every point of planned.ctx's world not already done; rows go to disk as the suite
    hands them over (a point, or one round of points measured in rounds). `state` is the suite's
    (planned.start()).

    `writer` is None on ranks other than 0 of a distributed suite: they measure, rank 0 writes,
    and `done` (rank 0's finished points, sent to every rank) keeps them all in step. A point the
    run holds only some rounds of (a run cut in them) is measured on from the rounds it lacks.
    The progress bar goes to `stream` (a spawned rank 0's copy of the terminal), else stderr.
    `stopped` is called after each piece is written: it raises where the run must end there;
    `before` with each point (the first of points measured as one) before it is measured.
    Returns the number of points measured.
    """
    suite, settings, ctx = planned.suite, planned.settings, planned.ctx
    if done is None:
        done = writer.done if writer is not None else set()
    stored = writer.rounds if writer is not None else {}

    def rounds(point) -> frozenset[int]:
        return frozenset(stored.get(point_key(point), ()))

    todo = [p for p in suite.points(settings, ctx)
            if point_key(p) not in done or not suite.complete(p, settings, rounds(p))]
    stream = stream or sys.stderr
    # In a log file (CI) a bar redrawn ten times a second is noise: one line every 10 s there.
    bar = tqdm.tqdm(total=len(todo), desc=f"{suite.name:<11}", unit="pt", disable=not progress or ctx.rank != 0, file=stream,
               dynamic_ncols=True, leave=True, mininterval=0.1 if stream.isatty() else 10)
    distributed = planned.distribution() is not None
    for group in _together(suite, todo):
        bar.set_postfix_str(group[0].label(), refresh=False)
        if before is not None:
            before(group[0])
        written: set = set()
        try:
            for rows in _measured(suite, group, settings, ctx, state, [rounds(p) for p in group]):
                if writer is not None:
                    writer.add_point(rows)
                written.update(point_key(r) for r in rows)
                if stopped is not None:
                    stopped()
        except (torch.cuda.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            if distributed or not _out_of_memory(exc):  # distributed: the ranks must agree
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            where = "GPU" if isinstance(exc, torch.cuda.OutOfMemoryError) else "host"
            reason = f"out of memory ({where}): {(str(exc) or type(exc).__name__).splitlines()[0]}"
            for point in group:   # those with rows keep them; a resume measures the rest of their rounds
                if writer is not None and point_key(point) not in written and not rounds(point):
                    writer.add_point([point.skipped(reason)])
        bar.update(len(group))
    bar.close()
    return len(todo)


def _measured(suite, group: list, settings: Any, ctx, state: Any, stored: list[frozenset[int]]) -> Iterator[list]:
    """The group's rows as the suite hands them over: a point alone in one piece."""
    if suite.together(group[0]) is None:
        yield suite.measure(group[0], settings, ctx, state)
    else:
        yield from suite.measure_together(group, settings, ctx, state, stored)


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
