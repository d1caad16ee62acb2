"""Does a staged copy (GPU 0 -> pinned host -> GPU 1) hold its pace when both legs and both hand-offs
are one graph? (issue 41, item 1; not yet run)

One process, two GPUs. A round trip: GPU 0 copies its 4 KiB (or 8 B, 64 KiB) into a pinned staging
buffer, GPU 1's stream waits for that copy (an event edge), copies the staging buffer in, and GPU 0's
stream waits for GPU 1's copy before the next round trip, as the suite's held staged copies hand off
through a word of host memory (held-2). Captured: K round trips in one graph that spans both GPUs,
replayed R times behind a sleep latch on GPU 0, timed by events on GPU 0's stream. Beside it, the
same K round trips queued eagerly behind the same latch (events between the streams, as held-1 did).
Prints, per size, the median and range of each way's per-trip time over TRIALS trials.
Usage: python3 staged_graph_probe.py LABEL
"""
import statistics
import sys

import torch

K, R, TRIALS = 64, 4, 9
SIZES = (8, 4096, 65536)


def sleep_cycles(seconds: float) -> int:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); torch.cuda._sleep(10_000_000); b.record(); b.synchronize()
    return int(seconds * 10_000_000 / (a.elapsed_time(b) / 1e3))


def trips(src, host, dst, s0, s1, k: int) -> None:
    """k round trips queued on s0 (GPU 0) and s1 (GPU 1), s0 current at entry and exit."""
    for _ in range(k):
        with torch.cuda.stream(s0):
            host.copy_(src, non_blocking=True)
        s1.wait_stream(s0)
        with torch.cuda.stream(s1):
            dst.copy_(host, non_blocking=True)
        s0.wait_stream(s1)


def timed(run, s0, cycles: int, count: int) -> float:
    with torch.cuda.device(0), torch.cuda.stream(s0):
        torch.cuda._sleep(cycles)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(s0)
        run()
        gave = a.query()
        b.record(s0)
    b.synchronize()
    return float("nan") if gave else a.elapsed_time(b) * 1e3 / count


def main(label: str) -> None:
    with torch.cuda.device(0):
        cycles = sleep_cycles(20e-3)
    s0, s1 = torch.cuda.Stream(device=0), torch.cuda.Stream(device=1)
    for n in SIZES:
        src = torch.arange(n, dtype=torch.uint8, device="cuda:0")
        dst = torch.zeros(n, dtype=torch.uint8, device="cuda:1")
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        trips(src, host, dst, s0, s1, 2)
        torch.cuda.synchronize(0); torch.cuda.synchronize(1)
        assert torch.equal(dst.cpu(), src.cpu())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(0):
            s0.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s0):
                graph.capture_begin()
                trips(src, host, dst, s0, s1, K)
                graph.capture_end()
        graph.replay()
        torch.cuda.synchronize(0); torch.cuda.synchronize(1)
        ways = {"eager-held": (lambda: trips(src, host, dst, s0, s1, K), K),
                "graph-held": (lambda: [graph.replay() for _ in range(R)], R * K)}
        out = []
        for name, (run, count) in ways.items():
            times = [timed(run, s0, cycles, count) for _ in range(TRIALS)]
            ok = [t for t in times if t == t]
            out.append(f"{name}={statistics.median(ok):.2f}[{min(ok):.2f}-{max(ok):.2f}]/{len(ok)}" if ok else f"{name}=gave-way")
        print(f"{label} {n}B " + " ".join(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
