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
"""
from __future__ import annotations

import mmap
import os
import struct
import tempfile
import time
import uuid

from bench import lazy
from bench.measure import flags

tdist = lazy.module("torch.distributed")
torch = lazy.module("torch")

WORD = struct.Struct("<I")
PAGE = 4096
# Rank 0 raises the word at the latest this long after it queued its own trial: a rank that never
# says it has queued (its host stalled in a launch) then shows as a trial that gave way.
WAIT_FOR_RANKS_S = 10.0


class SharedRelease:
    """The start word (offset 0) and a word per rank saying how many trials it has queued, in one
    page every rank of the host maps. `join` is collective: every rank calls it together."""

    def __init__(self, rank: int, world: int, page: mmap.mmap) -> None:
        if 4 * (world + 1) > PAGE:
            raise ValueError(f"{world} ranks need more than one page of words")
        self.rank, self.world, self._page = rank, world, page
        self.count = 0
        self._device_address: int | None = None

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
        flags.wait_for(torch.cuda.current_stream(), self._device_address, self.count)

    def open(self) -> bool:
        """Says this rank has queued its trial; rank 0 then waits for every rank to say so and
        raises the start word. True where rank 0 raised it without hearing from every rank."""
        self._raise(1 + self.rank, self.count)
        if self.rank != 0:
            return False
        deadline = time.monotonic() + WAIT_FOR_RANKS_S
        late = False
        while any((self._word(1 + r) - self.count) & 0xFFFFFFFF >= 0x80000000 for r in range(self.world)):
            if time.monotonic() > deadline:
                late = True
                break
            os.sched_yield()
        self._raise(0, self.count)
        return late
