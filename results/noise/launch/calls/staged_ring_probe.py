"""Next to try for held staged copies (issue 41, item 1): does a ring of staging buffers, with the
reverse hand-off off the critical path, hold from process to process where today's round trips
(one buffer, two hand-offs a copy) stray 6-9% at 64 KiB in one process of five?

GPU 0 -> pinned host -> GPU 1 through words of host memory (bench.measure.flags), K copies a trial
held behind a sleep on GPU 0, PAIRS stream pairs x TRIALS trials, per size and way:
  one     today's: one staging buffer, GPU 0 waits for GPU 1's read before its next write
  ring-B  B staging buffers: GPU 0 waits only for the read of the copy B before (B = 2, 4)
Prints one line per (way, size): median over pairs, then each pair's median (µs per copy).
Usage: python3 staged_ring_probe.py LABEL     (not yet run)
"""
import statistics
import sys

import torch

from bench.measure.flags import HostFlags

K, TRIALS, PAIRS = 128, 3, 4
SIZES = (4096, 65536)


def sleep_cycles(seconds: float) -> int:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); torch.cuda._sleep(10_000_000); b.record(); b.synchronize()
    return int(seconds * 10_000_000 / (a.elapsed_time(b) / 1e3))


def main(label: str) -> None:
    with torch.cuda.device(0):
        cycles = sleep_cycles(60e-3)
    s0 = [torch.cuda.Stream(device=0) for _ in range(PAIRS)]
    s1 = [torch.cuda.Stream(device=1) for _ in range(PAIRS)]
    src = torch.randint(0, 256, (max(SIZES),), dtype=torch.uint8, device="cuda:0")
    dst = torch.zeros(max(SIZES), dtype=torch.uint8, device="cuda:1")
    for n in SIZES:
        for depth in (1, 2, 4):
            stages = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(depth)]
            flags = HostFlags(2 * depth)   # per slot: written (2s), read (2s + 1)
            a, b = src[:n], dst[:n]

            def queue(p):
                for k in range(K):
                    slot = k % depth
                    with torch.cuda.stream(s0[p]):
                        stages[slot].copy_(a, non_blocking=True)
                    flags.hand_off(s0[p], s1[p], 2 * slot)
                    with torch.cuda.stream(s1[p]):
                        b.copy_(stages[slot], non_blocking=True)
                    # the slot's next write waits for this read: `depth` copies later
                    flags.hand_off(s1[p], s0[p], 2 * slot + 1)

            per_pair = []
            for p in range(PAIRS):
                queue(p)
                torch.cuda.synchronize(0); torch.cuda.synchronize(1)
                times = []
                for _ in range(TRIALS):
                    with torch.cuda.device(0), torch.cuda.stream(s0[p]):
                        torch.cuda._sleep(cycles)
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record(s0[p])
                        queue(p)
                        gave = start.query()
                        end.record(s0[p])
                    end.synchronize()
                    if not gave:
                        times.append(start.elapsed_time(end) * 1e3 / K)
                per_pair.append(statistics.median(times) if times else float("nan"))
            torch.cuda.synchronize(0); torch.cuda.synchronize(1)
            assert torch.equal(b.cpu(), a.cpu()), "staged data differ"
            ok = [t for t in per_pair if t == t] or [float("nan")]
            way = "one" if depth == 1 else f"ring-{depth}"
            print(f"{label} {way:6s} {n:6d}B median {statistics.median(ok):6.2f} | "
                  + " ".join(f"{t:.2f}" for t in per_pair), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
