"""What sets a held one-way staged copy's pace in one process and not the next? (issue 41, item 1)
Second version: where the staging buffer lies (torch's small pinned block, a big one, 2 MiB-aligned).

GPU 0 -> pinned host -> GPU 1, handed off through words of host memory as the suite's held staged
copies are (bench.measure.flags), K round trips a trial held behind a sleep on GPU 0.
Per size: for each of PAIRS stream pairs, TRIALS trials -> the pair's median; ways:
  suite   staging = torch pinned buffer of the suite's size (BIG), first n bytes
  small   staging = its own pinned buffer of n bytes
  d2h     GPU 0's leg alone (same streams)      h2d  GPU 1's leg alone (sleep on GPU 1)
Prints one line per (way, size): median over pairs, then each pair's median.
Usage: python3 staged_state_probe.py LABEL
"""
import statistics
import sys

import torch

from bench.measure.flags import HostFlags

K, TRIALS, PAIRS = 128, 3, 4
SIZES = (16384, 65536)
BIG = 256 << 20


def sleep_cycles(dev: int, seconds: float) -> int:
    with torch.cuda.device(dev):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); torch.cuda._sleep(10_000_000); b.record(); b.synchronize()
    return int(seconds * 10_000_000 / (a.elapsed_time(b) / 1e3))


_KEEP = []


def aligned(n: int):
    """n bytes of host memory on a 2 MiB boundary (transparent huge pages asked for), registered with CUDA."""
    import ctypes, mmap
    libc = ctypes.CDLL("libc.so.6")
    ptr = ctypes.c_void_p()
    assert libc.posix_memalign(ctypes.byref(ptr), 2 << 20, 2 << 20) == 0
    libc.madvise(ptr, ctypes.c_size_t(2 << 20), 14)   # MADV_HUGEPAGE
    ctypes.memset(ptr, 0, 2 << 20)
    buf = (ctypes.c_uint8 * (2 << 20)).from_address(ptr.value)
    t = torch.frombuffer(buf, dtype=torch.uint8)
    assert int(torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel(), 0)) == 0
    _KEEP.append((buf, t))
    return t[:n]


def trial(dev: int, stream, cycles: int, queue, count: int) -> float:
    with torch.cuda.device(dev), torch.cuda.stream(stream):
        torch.cuda._sleep(cycles)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        queue()
        gave = a.query()
        b.record(stream)
    b.synchronize()
    return float("nan") if gave else a.elapsed_time(b) * 1e3 / count


def main(label: str) -> None:
    cyc = [sleep_cycles(0, 60e-3), sleep_cycles(1, 60e-3)]
    s0 = [torch.cuda.Stream(device=0) for _ in range(PAIRS)]
    s1 = [torch.cuda.Stream(device=1) for _ in range(PAIRS)]
    flags = HostFlags(2)
    big = torch.empty(BIG, dtype=torch.uint8, pin_memory=True)
    src = torch.randint(0, 256, (max(SIZES),), dtype=torch.uint8, device="cuda:0")
    dst = torch.zeros(max(SIZES), dtype=torch.uint8, device="cuda:1")
    for n in SIZES:
        small = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        huge = aligned(n)
        a, b = src[:n], dst[:n]

        def round_trips(stage, p):
            def queue():
                for _ in range(K):
                    with torch.cuda.stream(s0[p]):
                        stage.copy_(a, non_blocking=True)
                    flags.hand_off(s0[p], s1[p], 0)
                    with torch.cuda.stream(s1[p]):
                        b.copy_(stage, non_blocking=True)
                    flags.hand_off(s1[p], s0[p], 1)
            return queue

        def legs(stage, p, d2h):
            def queue():
                with torch.cuda.stream(s0[p] if d2h else s1[p]):
                    for _ in range(K):
                        (stage.copy_(a, non_blocking=True) if d2h else b.copy_(stage, non_blocking=True))
            return queue

        ways = {}
        for name, stage in (("small", small), ("big", big[:n]), ("huge", huge)):
            ways[f"rt-{name}"] = lambda p, st=stage: (0, s0[p], round_trips(st, p))
            ways[f"h2d-{name}"] = lambda p, st=stage: (1, s1[p], legs(st, p, False))
            ways[f"d2h-{name}"] = lambda p, st=stage: (0, s0[p], legs(st, p, True))
        for way, make in ways.items():
            per_pair = []
            for p in range(PAIRS):
                dev, stream, queue = make(p)
                queue()   # warm-up, unheld
                torch.cuda.synchronize(0); torch.cuda.synchronize(1)
                times = [t for t in (trial(dev, stream, cyc[dev], queue, K) for _ in range(TRIALS)) if t == t]
                per_pair.append(statistics.median(times) if times else float("nan"))
            torch.cuda.synchronize(0); torch.cuda.synchronize(1)
            if way.startswith("rt"):
                assert torch.equal(b.cpu(), a.cpu()), "staged data differ"
            ok = [t for t in per_pair if t == t] or [float("nan")]
            print(f"{label} {way:5s} {n:6d}B median {statistics.median(ok):6.2f} min {min(ok):6.2f} max {max(ok):6.2f} | "
                  + " ".join(f"{t:.2f}" for t in per_pair), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
