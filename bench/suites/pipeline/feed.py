"""The loop: batches from a DataLoader, moved to the GPU as a training job moves them, checked
as they are consumed, each stage timed as the loop runs it (the seconds ride with the batch)."""
from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from typing import Any

from bench import lazy
from bench.measure.memory import page_faults
from bench.suites.pipeline.model import CPU, EPOCH, FAULTS, PIN_THREAD, Loop, Producer
from bench.suites.pipeline.source import (ENDLESS, PERIOD, collate_of, loader, moved, samples, shape, tensors,
                                          user_step)

torch = lazy.module("torch")

_seen = threading.local()


def new_faults(thread: bool = False) -> int:
    """Page faults this process (`thread`: this thread) took since this thread's last call in this
    process (none at its first): read once a batch where it runs beside the main thread (a
    worker, the pin thread)."""
    now, pid = page_faults(thread), os.getpid()
    last = getattr(_seen, "mark", None)
    _seen.mark = (pid, now)
    return now - last[1] if last and last[0] == pid else 0


class LoaderBatch:
    """A batch as the loop's DataLoader hands it on: the collated data (of any structure), the
    index of its first sample and how many it holds, and the seconds its stages have spent on it
    so far, each in the process or thread that ran it; the page faults the threads beside the
    main thread took for it (`faults`: its worker's, the pin thread's); and the CPU seconds the
    receiving side's stages ran (`cpu`: the hand-off's and pinning's, by the thread's clock: what
    their time was not waiting). The DataLoader pins it through its pin_memory method (timed
    there, on the pin thread or the main thread); the process that receives it from a worker
    times rebuilding it (the hand-off)."""

    def __init__(self, data: Any, spent: dict[str, float], first: int = 0, count: int = 0,
                 faults: dict[str, int] | None = None, cpu: dict[str, float] | None = None) -> None:
        self.data, self.spent, self.first, self.count = data, spent, first, count
        self.faults, self.cpu = faults or {}, cpu or {}

    def pin_memory(self, device=None) -> "LoaderBatch":
        start, ran = time.perf_counter(), time.thread_time()
        data = torch.utils.data._utils.pin_memory.pin_memory(self.data)
        self.data = None   # the received batch released here, as the loader's pin step releases it (its segment unmapped)
        spent, cpu = {**self.spent, "pin": time.perf_counter() - start}, {**self.cpu, "pin": time.thread_time() - ran}
        beside = threading.current_thread() is not threading.main_thread()   # the loader's pin thread
        return LoaderBatch(data, spent, self.first, self.count,
                           {**self.faults, PIN_THREAD: new_faults(thread=True)} if beside else self.faults, cpu)

    def __reduce__(self):
        return _received, (_Now(), _ThreadNow(), self.data, self.spent, self.first, self.count, self.faults)


class _Now:
    """Unpickles as the receiver's clock at the moment unpickling reaches it: before the batch's
    tensor, whose shared memory the receiver then maps."""

    def __reduce__(self):
        return time.perf_counter, ()


class _ThreadNow:
    """Unpickles as the receiving thread's CPU clock, as _Now does its wall clock."""

    def __reduce__(self):
        return time.thread_time, ()


def _received(start: float, ran: float, data: Any, spent: dict[str, float], first: int, count: int,
              faults: dict[str, int]) -> LoaderBatch:
    return LoaderBatch(data, {**spent, "handoff": time.perf_counter() - start}, first, count, faults,
                       {"handoff": time.thread_time() - ran})


class TimedSamples:
    """The loop's dataset and collate_fn around a producer: a worker (forked, with its own copy)
    adds up the seconds its dataset calls take, and its collate hands them on with the batch,
    and which samples it holds (a user's batch is checked by that, its bytes unknown here)."""

    def __init__(self, dataset, collate=None) -> None:
        self.dataset, self.making = dataset, 0.0
        self.collate_samples = collate or torch.utils.data.default_collate

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> tuple[int, Any]:
        start = time.perf_counter()
        sample = self.dataset[i]
        self.making += time.perf_counter() - start
        return i, sample

    def collate(self, items: list) -> LoaderBatch:
        start = time.perf_counter()
        batch = self.collate_samples([sample for _, sample in items])
        spent = {"make": self.making, "collate": time.perf_counter() - start}
        self.making = 0.0
        in_worker = torch.utils.data.get_worker_info() is not None   # else the main thread, counted at its marks
        return LoaderBatch(batch, spent, items[0][0], len(items), {"workers": new_faults()} if in_worker else None)


class SpentMarks:
    """A loop's marks that also read what its stages spent between two of them: a trial's parts
    (stream.measure_stream), seconds by stage name; page faults: `faults` as the workers' and
    the pin thread's batches carry them, and this process's, read at the marks, as FAULTS +
    `own` (less the pin thread's, which runs in it); and `cpu`, CPU seconds by stage, as CPU +
    the stage's name."""

    def __init__(self, marks, spent: dict[str, float], faults: dict[str, float] | None = None,
                 own: str | None = None, cpu: dict[str, float] | None = None) -> None:
        self.marks, self.spent, self.own = marks, spent, own
        self.faults = faults if faults is not None else {}
        self.cpu = cpu if cpu is not None else {}

    def _counted(self) -> dict[str, float]:
        mine = {FAULTS + self.own: page_faults()} if self.own is not None else {}
        return {**self.spent, **{FAULTS + k: v for k, v in self.faults.items()}, **mine,
                **{CPU + k: v for k, v in self.cpu.items()}}

    def mark(self) -> tuple:
        return self.marks.mark(), self._counted()

    def seconds(self, start: tuple, end: tuple) -> float:
        return self.marks.seconds(start[0], end[0])

    def parts(self, start: tuple, end: tuple) -> dict[str, float]:
        out = {k: v - start[1].get(k, 0.0) for k, v in end[1].items()}
        if self.own is not None and FAULTS + PIN_THREAD in out:
            out[FAULTS + self.own] -= out[FAULTS + PIN_THREAD]
        return out


class Check:
    """The data check: each batch against the samples it must hold, from sample index `first`.
    On a GPU every byte (at HBM speed it costs little beside the copy); on the host each
    sample's first and last byte (a full pass would halve what the loader alone shows)."""

    def __init__(self, batch: int, device: torch.device) -> None:
        self.batch, self.gpu = batch, device.type == "cuda"
        self.expected = (torch.arange(batch + PERIOD) % PERIOD).to(torch.uint8).to(device)
        self.errors = torch.zeros((), dtype=torch.int64, device=device)
        self.checked = 0     # batches checked
        self.short = 0       # batches with fewer samples than asked for

    def __call__(self, batch: torch.Tensor, first: int, carried: int | None = None) -> None:
        start = first % PERIOD
        want = self.expected[start:start + len(batch)]
        if self.gpu:
            self.errors += batch.ne(want[:, None]).sum()
        else:
            self.errors += (batch[:, 0] != want).sum() + (batch[:, -1] != want).sum()
        self.short += len(batch) != self.batch
        self.checked += 1

    def passed(self) -> bool:
        """Every batch checked held the samples it should, and some were checked."""
        if self.gpu:
            torch.cuda.synchronize(self.errors.device)
        return self.checked > 0 and self.short == 0 and int(self.errors) == 0


class UserCheck:
    """What can be checked of a user's batches, whose bytes are unknown here: each holds `batch`
    samples, the next ones in order (none lost, repeated or reordered: the indices its worker
    collated), and the structure, dtypes and shapes of the first. On a GPU consuming it reads
    every byte (a sum of each tensor), as the synthetic check does there; on the host no byte,
    as the synthetic check reads two a sample."""

    def __init__(self, batch: int, device: torch.device) -> None:
        self.batch, self.gpu = batch, device.type == "cuda"
        self.read = torch.zeros((), dtype=torch.float64, device=device)
        self.first_shape = None
        self.checked = self.wrong = 0

    def __call__(self, data: Any, first: int, carried: int | None = None) -> None:
        found = shape(data)
        if self.first_shape is None:
            self.first_shape = found
        leaves = list(tensors(data))
        self.wrong += (found != self.first_shape or not leaves or len(leaves[0]) != self.batch
                       or (carried is not None and carried != first))
        for t in leaves if self.gpu else ():
            self.read += t.sum(dtype=torch.float64) if not t.is_complex() else t.abs().sum(dtype=torch.float64)
        self.checked += 1

    def passed(self) -> bool:
        if self.gpu:
            torch.cuda.synchronize(self.read.device)
        return self.checked > 0 and self.wrong == 0


def check_of(loop: Loop, batch: int, device: torch.device) -> Check | UserCheck:
    return UserCheck(batch, device) if loop.producer == Producer.user else Check(batch, device)


class Feed:
    """The loop: batches from a DataLoader over the loop's producer, moved to `device` as the
    loop says and checked as they are consumed; calling it with n consumes n batches. With
    epoch_batches (or a user's dataset, one epoch of its whole batches) the loader is iterated
    anew at each epoch's end, as `for epoch in ...: for batch in loader` does."""

    def __init__(self, batch: int, sample: int, loop: Loop, device: torch.device, epoch_batches: int = 0) -> None:
        self.loop, self.device = loop, device
        self.gpu = device.type == "cuda"
        w = loop.workers
        user = loop.producer == Producer.user
        dataset = samples(loop.producer, sample, epoch_batches * batch or ENDLESS, loop.dataset)
        timed = TimedSamples(dataset, collate_of(loop.dataset) if user else None)
        self.loader = loader(timed, batch, w, collate_fn=timed.collate, drop_last=user,
                             pin_memory=loop.pin_memory and self.gpu, prefetch_factor=loop.prefetch_factor,
                             persistent_workers=loop.persistent_workers and w > 0, threads=loop.threads)
        # Seconds each stage spent on the batches pulled so far, as the loop ran it: make and
        # collate summed over the workers; the main thread's share of the copy, h2d where it waits
        # through it and launch where it only launches it (and orders the streams); consume the
        # rest of its step (the check, on the host the check itself, releasing the batch): the
        # work the check alone does, so that the two compare; and the user's step where there is
        # one, as this thread runs it (on a GPU its launches, and its waits where it synchronizes).
        self.spent: dict[str, float] = defaultdict(float)
        # Page faults the workers and the pin thread took for the batches pulled so far (the main
        # thread's are read at the marks): where the allocator gives memory back to the kernel,
        # each batch's pages come back one fault at a time.
        self.faults: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)   # CPU seconds of the hand-off and pinning, by stage
        self.elsewhere = 0.0   # seconds of the main thread's steps spent in the loader or on the batch's copy
        self.batches = iter(self.loader)
        self.next_sample = 0         # the first sample of the next batch the loader gives, in its epoch
        self.check = check_of(loop, batch, device)
        self.step = user_step(loop.step, str(device)) if loop.step else None   # the user's training step
        self.stream = torch.cuda.Stream(device) if self.gpu and loop.prefetch else None
        self.ahead: tuple[Any, int, int] | None = None

    @property
    def queued(self) -> int:
        """Batches the workers make before the loop asks: the warm-up drains them."""
        return self.loop.queued

    @property
    def consumed(self) -> int:
        return self.check.checked

    def __call__(self, n: int) -> None:
        for _ in range(n):
            start, before = time.perf_counter(), self.elsewhere
            batch, first, carried = self._next()
            self.check(batch, first, carried)
            if self.step is not None:
                stepped = time.perf_counter()
                self.step(batch)
                took = time.perf_counter() - stepped
                self.spent["step"] += took
                self.elsewhere += took
            batch = None   # released inside the step that last used it, as every stage here releases its input
            self.spent["consume"] += time.perf_counter() - start - (self.elsewhere - before)

    def _pull(self) -> tuple[LoaderBatch, int]:
        start, restarting = time.perf_counter(), 0.0
        try:
            got = next(self.batches)
        except StopIteration:   # an epoch's end
            restart = time.perf_counter()
            self.batches = iter(self.loader)
            self.next_sample = 0
            got = next(self.batches)
            restarting = time.perf_counter() - restart
            self.spent[EPOCH] += restarting
        spent, took = got.spent, time.perf_counter() - start
        self.elsewhere += took
        if not self.loop.workers:   # all in this thread: what next() took beyond the stages is the loader's own
            spent = {**spent, "handoff": took - restarting - sum(spent.values())}
        for stage, seconds in spent.items():
            self.spent[stage] += seconds
        for thread, faults in got.faults.items():
            self.faults[thread] += faults
        for stage, seconds in got.cpu.items():
            self.cpu[stage] += seconds
        first, self.next_sample = self.next_sample, self.next_sample + got.count
        return got, first

    def _move(self, got: LoaderBatch) -> Any:
        """The batch where the loop consumes it; on a GPU the host's batch released after its copy
        (a pinned block goes back to the cache once the copy is done; a worker's segment is unmapped)."""
        if not self.gpu:
            return got.data
        out = moved(got.data, self.device, self.loop.non_blocking)
        got.data = None
        return out

    def _copying(self, seconds: float) -> None:
        """The main thread's seconds on a batch's copy: waiting through it (h2d: a blocking copy, or
        a pageable one, which the host stages), else launching it and ordering the streams (launch:
        a pinned non_blocking copy runs on the copy engine meanwhile)."""
        self.spent["launch" if self.loop.pin_memory and self.loop.non_blocking else "h2d"] += seconds
        self.elsewhere += seconds

    def _next(self) -> tuple[Any, int, int]:
        if self.stream is None:
            got, first = self._pull()
            start = time.perf_counter()
            batch = self._move(got)
            if self.gpu:
                self._copying(time.perf_counter() - start)
            return batch, first, got.first
        if self.ahead is None:
            self.ahead = self._load_ahead()
        start = time.perf_counter()
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        (batch, first, carried), self.ahead = self.ahead, None
        for t in tensors(batch):
            t.record_stream(current)     # made on the side stream, freed after use on this one
        self._copying(time.perf_counter() - start)
        self.ahead = self._load_ahead()  # the next copy runs while this batch is consumed
        return batch, first, carried

    def _load_ahead(self) -> tuple[Any, int, int]:
        got, first = self._pull()
        start = time.perf_counter()
        with torch.cuda.stream(self.stream):
            batch = self._move(got)
        self._copying(time.perf_counter() - start)
        return batch, first, got.first

    def correct(self) -> bool:
        return self.check.passed()

    def close(self) -> None:
        """Stop the workers now, not whenever the iterator is collected."""
        self.ahead = self.batches = self.loader = None
