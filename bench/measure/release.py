"""One start for every rank of a host: held operations wait on a word of shared host memory that
rank 0 raises once every rank has queued its trial.

Behind each rank's own sleep latch, the ranks' held collectives start as far apart as their
latches ended: a rank that starts late finds the first few operations' data already sent, and its
span, the shortest, reads the collective a few per cent fast, by as much as that head start, which
differs from process to process (docs/method.md, "Eager and held"). Every GPU of a host polls the
one word, so their streams start within a poll of each other whatever the host's pace; nothing
then needs to outlast the queuing. The word lives in a file under /dev/shm that each rank maps and
registers with CUDA (as NCCL's shared-memory transport does); rank 0 removes the file's name once
every rank holds it, so no run leaves one behind.

A rank's queuing can itself wait on its GPU: a launch that finds the stream's launch queue, or
NCCL's own queues, full of work held behind the word returns only once that work runs. Should
rank 0 be the one waiting, nothing would raise the word; so from the moment it holds its stream
a watchdog thread raises it at the latest RAISE_WITHIN_S later, the trial then shows as one that
gave way (and is run again), and the rank's log says so, with every thread's stack.
"""
from __future__ import annotations

import faulthandler
import mmap
import os
import struct
import sys
import tempfile
import threading
import time
import uuid

from bench import lazy
from bench.measure import flags

tdist = lazy.module("torch.distributed")
torch = lazy.module("torch")

WORD = struct.Struct("<I")
PAGE = 4096
# Rank 0 raises the word at the latest this long after it held its own stream: a rank that has
# not said it queued by then (its host stalled in a launch) shows as a trial that gave way. A held
# trial queues at most a few hundred launches, milliseconds on the slowest host seen.
RAISE_WITHIN_S = 2.0


class SharedRelease:
    """The start word (offset 0) and a word per rank saying how many trials it has queued, in one
    page every rank of the host maps. `join` is collective: every rank calls it together."""

    def __init__(self, rank: int, world: int, page: mmap.mmap) -> None:
        if 4 * (world + 1) > PAGE:
            raise ValueError(f"{world} ranks need more than one page of words")
        self.rank, self.world, self._page = rank, world, page
        self.count = 0
        self._device_address: int | None = None
        self._watch = threading.Condition()
        self._deadline: float | None = None   # rank 0's: when the watchdog raises the word, while armed
        self._watchdog: threading.Thread | None = None

    @classmethod
    def join(cls, rank: int, world: int) -> SharedRelease:
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        names = [os.path.join(folder, f"xferbench-start-{uuid.uuid4().hex}")] if rank == 0 else [None]
        if rank == 0:
            fd = os.open(names[0], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.ftruncate(fd, PAGE)
            os.close(fd)
        tdist.broadcast_object_list(names, src=0)
        fd = os.open(names[0], os.O_RDWR)
        try:
            page = mmap.mmap(fd, PAGE)
        finally:
            os.close(fd)
        tdist.barrier()
        if rank == 0:
            os.unlink(names[0])
        return cls(rank, world, page)

    def _word(self, index: int) -> int:
        return WORD.unpack_from(self._page, 4 * index)[0]

    def _raise(self, index: int, value: int) -> None:
        WORD.pack_into(self._page, 4 * index, value)

    def hold(self) -> None:
        """The current stream waits, from here, until rank 0 raises the start word to this trial's count."""
        if self._device_address is None:
            self._device_address = flags.register_host(self._page, PAGE)
        self.count = (self.count + 1) & 0xFFFFFFFF
        self.arm()
        flags.wait_for(torch.cuda.current_stream(), self._device_address, self.count)

    def arm(self) -> None:
        """Rank 0: the word is raised to this trial's count RAISE_WITHIN_S from now, unless open()
        raises it first."""
        if self.rank != 0:
            return
        with self._watch:
            self._deadline = time.monotonic() + RAISE_WITHIN_S
            self._watch.notify()
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._guard, name="xferbench-start-word", daemon=True)
            self._watchdog.start()

    def _guard(self) -> None:
        with self._watch:
            while True:
                if self._deadline is None:
                    self._watch.wait()
                elif (left := self._deadline - time.monotonic()) > 0:
                    self._watch.wait(left)
                else:
                    self._raise(0, self.count)
                    self._deadline = None
                    self._say_why()

    def _say_why(self) -> None:
        """The rank's log: which ranks had not queued when the watchdog raised the word, and where
        this one's threads were, if it was among them."""
        late = self._late_ranks()
        print(f"xferbench: the watchdog raised the start word of held trial {self.count} "
              f"{RAISE_WITHIN_S:g} s after this rank held its stream; not yet queued: rank(s) "
              f"{', '.join(map(str, late))}" + ("; this rank among them, a launch of its own waiting, it may be, "
                                               "on the work held behind the word: every thread's stack follows"
                                               if 0 in late else ""),
              file=sys.stderr, flush=True)
        if 0 in late:
            faulthandler.dump_traceback(sys.stderr, all_threads=True)

    def _late_ranks(self) -> list[int]:
        return [r for r in range(self.world) if (self._word(1 + r) - self.count) & 0xFFFFFFFF >= 0x80000000]

    def open(self) -> bool:
        """Says this rank has queued its trial; rank 0 then waits for every rank to say so and
        raises the start word. True where rank 0 raised it without hearing from every rank, or
        its watchdog had (arm)."""
        self._raise(1 + self.rank, self.count)
        if self.rank != 0:
            return False
        with self._watch:
            deadline = self._deadline
        while deadline is not None and self._late_ranks():
            if time.monotonic() > deadline:
                break
            os.sched_yield()
        with self._watch:
            late = self._deadline is None or time.monotonic() > self._deadline
            self._deadline = None
            self._raise(0, self.count)
        return late
