"""Does the page a staged copy's hand-off word (or its staging buffer) lies on set the copy's pace?

Staged 4 KiB copies GPU 0 -> pinned host -> GPU 1 and back, each hand-off through a word of pinned
host memory (cuStreamWriteValue32 / cuStreamWaitValue32, the suite's method held-2), held behind a
20 ms spin on GPU 0, 64 copies a trial. Four flag words, each on its own 2 MiB pinned allocation,
and three staging buffers, each on its own: every (flag, buffer) pair twelve times, interleaved;
the median µs per copy by flag and by buffer, then each leg alone (d2h on GPU 0, h2d on GPU 1) by
buffer. A flag or buffer whose median stands apart, in every process, is the page's.
Usage: python3 flag_probe.py LABEL
"""
import ctypes
import statistics
import sys

import torch

HOLD_S, OPS, ROUNDS, NB = 20e-3, 64, 12, 4096
label = sys.argv[1]
cuda = ctypes.CDLL("libcuda.so.1")
wait_value = getattr(cuda, "cuStreamWaitValue32_v2", None) or cuda.cuStreamWaitValue32
write_value = getattr(cuda, "cuStreamWriteValue32_v2", None) or cuda.cuStreamWriteValue32
for f in (wait_value, write_value):
    f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    f.restype = ctypes.c_int


def cycles(seconds: float) -> int:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); torch.cuda._sleep(10_000_000); b.record(); b.synchronize()
    return int(seconds * 10_000_000 / (a.elapsed_time(b) / 1e3))


src = torch.randint(0, 255, (NB,), dtype=torch.uint8, device="cuda:0")
dst = torch.empty(NB, dtype=torch.uint8, device="cuda:1")
flags = [torch.zeros(1 << 19, dtype=torch.int32, pin_memory=True) for _ in range(4)]
bufs = [torch.empty(2 << 20, dtype=torch.uint8, pin_memory=True) for _ in range(3)]
s0, s1 = torch.cuda.Stream(0), torch.cuda.Stream(1)
cyc = {}
for d in (0, 1):
    with torch.cuda.device(d):
        cyc[d] = cycles(HOLD_S)
seq = [0]


def ok(code: int) -> None:
    if code:
        raise SystemExit(f"CUresult {code}")


def trial(flag, buf) -> float:
    fwd, back = flag.data_ptr(), flag.data_ptr() + 4
    stg = buf[:NB]
    with torch.cuda.device(0):
        cur = torch.cuda.current_stream()
        torch.cuda._sleep(cyc[0])
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(cur); s0.wait_event(a)
        for _ in range(OPS):
            seq[0] += 1
            with torch.cuda.stream(s0):
                stg.copy_(src, non_blocking=True)
            ok(write_value(s0.cuda_stream, fwd, seq[0], 0))
            with torch.cuda.device(1):
                ok(wait_value(s1.cuda_stream, fwd, seq[0], 0))
                with torch.cuda.stream(s1):
                    dst.copy_(stg, non_blocking=True)
                ok(write_value(s1.cuda_stream, back, seq[0], 0))
            ok(wait_value(s0.cuda_stream, back, seq[0], 0))
        gave = a.query()
        cur.wait_stream(s0); b.record(cur); b.synchronize()
        return a.elapsed_time(b) * 1e3 / OPS if not gave else float("nan")


def leg(device: int, buf) -> float:
    with torch.cuda.device(device):
        cur = torch.cuda.current_stream()
        torch.cuda._sleep(cyc[device])
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(cur)
        for _ in range(OPS):
            (buf[:NB].copy_(src, non_blocking=True) if device == 0 else dst.copy_(buf[:NB], non_blocking=True))
        gave = a.query()
        b.record(cur); b.synchronize()
        return a.elapsed_time(b) * 1e3 / OPS if not gave else float("nan")


res = {(f, b): [] for f in range(len(flags)) for b in range(len(bufs))}
legs = {(d, b): [] for d in (0, 1) for b in range(len(bufs))}
for f, b in res:
    trial(flags[f], bufs[b])
for _ in range(ROUNDS):
    for f, b in res:
        res[f, b].append(trial(flags[f], bufs[b]))
    for d, b in legs:
        legs[d, b].append(leg(d, bufs[b]))
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
assert torch.equal(dst.cpu(), src.cpu())
med = lambda xs: statistics.median(x for x in xs if x == x)
by_flag = [med([x for (f, b), v in res.items() if f == k for x in v]) for k in range(len(flags))]
by_buf = [med([x for (f, b), v in res.items() if b == k for x in v]) for k in range(len(bufs))]
print(f"{label} round-trip by flag " + " ".join(f"{x:.2f}" for x in by_flag)
      + " | by buffer " + " ".join(f"{x:.2f}" for x in by_buf)
      + " | pairs " + " ".join(f"f{f}b{b}={med(v):.2f}" for (f, b), v in res.items())
      + " | legs d2h " + " ".join(f"{med(legs[0, b]):.2f}" for b in range(len(bufs)))
      + " h2d " + " ".join(f"{med(legs[1, b]):.2f}" for b in range(len(bufs))), flush=True)
