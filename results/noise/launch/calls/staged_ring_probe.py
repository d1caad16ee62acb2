"""Issue 41, item 1: does a ring of staging buffers, the reverse hand-off off the critical path,
hold from process to process where today's held staged copies (one buffer, two hand-offs a copy)
stray 6-9% at 64 KiB in one process of five?

GPU 0 -> pinned host -> GPU 1 (and, both ways, GPU 1 -> host -> GPU 0 at once) through words of
host memory, K copies a trial held behind a sleep on GPU 0, PAIRS stream pairs x TRIALS trials,
per size, way and depth B:
  B = 1  today's: GPU 0 writes copy k only once GPU 1 has read copy k-1
  B > 1  B staging slots: GPU 0 writes copy k once GPU 1 has read copy k-B (what NCCL's shared
         memory transport does with its FIFO of steps)
Prints one line per (way, size, depth): median over pairs, then each pair's median (µs per copy).
Usage: python3 staged_ring_probe.py LABEL
"""
import statistics
import sys

import torch

from bench.measure.flags import WRITE_DEFAULT, _driver, _stream_op, wait_for

K, TRIALS, PAIRS = 128, 3, 4
SIZES = (4096, 65536)
DEPTHS = (1, 2, 4, 8)


class Words:
    """Counts in pinned host memory: one stream raises a word, others wait for a value of it."""

    def __init__(self, n: int) -> None:
        self.t = torch.zeros(n, dtype=torch.int32, pin_memory=True)
        self.count = [0] * n

    def raise_(self, stream, w: int) -> int:
        self.count[w] += 1
        _stream_op(_driver().write, stream, self.t.data_ptr() + 4 * w, self.count[w], WRITE_DEFAULT)
        return self.count[w]

    def wait(self, stream, w: int, value: int) -> None:
        wait_for(stream, self.t.data_ptr() + 4 * w, value)


class Direction:
    def __init__(self, a: int, b: int, n: int, depth: int) -> None:
        self.depth = depth
        self.sa = [torch.cuda.Stream(device=a) for _ in range(PAIRS)]
        self.sb = [torch.cuda.Stream(device=b) for _ in range(PAIRS)]
        self.src = torch.randint(0, 256, (n,), dtype=torch.uint8, device=f"cuda:{a}")
        self.dst = torch.zeros(n, dtype=torch.uint8, device=f"cuda:{b}")
        self.stages = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(depth)]
        self.words = Words(2 * depth)          # per slot: written (2s), read (2s + 1)
        self.read_count = [0] * depth
        self.last = None

    def copy(self, p: int, k: int) -> None:
        slot = k % self.depth
        if self.read_count[slot]:
            self.words.wait(self.sa[p], 2 * slot + 1, self.read_count[slot])   # copy k-B was read
        with torch.cuda.stream(self.sa[p]):
            self.stages[slot].copy_(self.src, non_blocking=True)
        self.words.wait(self.sb[p], 2 * slot, self.words.raise_(self.sa[p], 2 * slot))
        with torch.cuda.stream(self.sb[p]):
            self.dst.copy_(self.stages[slot], non_blocking=True)
        self.read_count[slot] = self.words.raise_(self.sb[p], 2 * slot + 1)
        self.last = slot

    def join(self, stream) -> None:
        """`stream` waits for this direction's last read."""
        self.words.wait(stream, 2 * self.last + 1, self.read_count[self.last])


def sleep_cycles(seconds: float) -> int:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); torch.cuda._sleep(10_000_000); b.record(); b.synchronize()
    return int(seconds * 10_000_000 / (a.elapsed_time(b) / 1e3))


def main(label: str) -> None:
    with torch.cuda.device(0):
        cycles = sleep_cycles(60e-3)
    start_word = Words(1)
    for way in ("one", "both"):
        for n in SIZES:
            for depth in DEPTHS:
                dirs = [Direction(0, 1, n, depth)] + ([Direction(1, 0, n, depth)] if way == "both" else [])

                def queue(p):
                    for k in range(K):
                        for d in dirs:
                            d.copy(p, k)
                    for d in dirs:
                        d.join(dirs[0].sa[p])

                per_pair = []
                for p in range(PAIRS):
                    queue(p)
                    torch.cuda.synchronize(0); torch.cuda.synchronize(1)
                    times = []
                    for _ in range(TRIALS):
                        s0 = dirs[0].sa[p]
                        with torch.cuda.device(0), torch.cuda.stream(s0):
                            torch.cuda._sleep(cycles)
                            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            start.record(s0)
                            if way == "both":
                                start_word.wait(dirs[1].sa[p], 0, start_word.raise_(s0, 0))
                            queue(p)
                            gave = start.query()
                            end.record(s0)
                        end.synchronize()
                        if not gave:
                            times.append(start.elapsed_time(end) * 1e3 / K)
                    per_pair.append(statistics.median(times) if times else float("nan"))
                torch.cuda.synchronize(0); torch.cuda.synchronize(1)
                for d in dirs:
                    assert torch.equal(d.dst.cpu(), d.src.cpu()), "staged data differ"
                ok = [t for t in per_pair if t == t] or [float("nan")]
                print(f"{label} {way:4s} B={depth} {n:6d}B median {statistics.median(ok):6.2f} | "
                      + " ".join(f"{t:.2f}" for t in per_pair), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
