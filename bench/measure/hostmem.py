"""The host's own memory bandwidth, STREAM-like: a copy, a read and a write of host buffers on a
chosen number of threads, bound to the CPUs whose memory they use.

Every GPU at once moves host memory as fast as the host can: a host->device copy reads it, a
device->host copy writes it, both directions do both. These figures are that ceiling, measured
on the same buffers' NUMA node as the copies (torch's intra-op threads run the loops).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from bench import lazy
from bench.measure import numa

torch = lazy.module("torch")

KINDS = ("copy", "read", "write")
FILL = 0x5A   # the byte a write leaves everywhere: checked after the timed writes


@contextmanager
def threads(count: int, cpus: Iterable[int]) -> Iterator[None]:
    """torch's intra-op pool at `count` threads, the calling thread bound to `cpus` (empty: anywhere)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        if cpus:
            with numa.bind_thread(cpus):
                yield
        else:
            yield
    finally:
        torch.set_num_threads(before)


class HostTraffic:
    """One kind of traffic over `dst` (and `src` for a copy), `n` times per call; `check()` after."""

    def __init__(self, kind: str, dst, src) -> None:
        self.kind, self.dst, self.src = kind, dst, src
        self.words = (src if kind == "read" else dst).view(torch.int64)
        self._want_sum = int(src.view(torch.int64).sum()) if kind == "read" else None
        self._sums: list[int] = []

    def __call__(self, n: int) -> None:
        op: Callable[[], object] = {"copy": lambda: self.dst.copy_(self.src),
                                    "read": lambda: self._sums.append(int(self.words.sum())),
                                    "write": lambda: self.dst.fill_(FILL)}[self.kind]
        for _ in range(n):
            op()

    def check(self) -> bool:
        """The copy's destination equals its source; every read summed the same; the write filled all."""
        if self.kind == "copy":
            return torch.equal(self.dst, self.src)
        if self.kind == "read":
            return bool(self._sums) and all(s == self._want_sum for s in self._sums)
        return bool((self.dst == FILL).all())
