"""Staged copies (GPU 0 -> pinned host -> GPU 1) held behind a spin on GPU 0: per-trial µs per copy,
with the hand-off between the GPUs made five ways, to find one whose pace does not flip trial by trial.

  events:  as the p2p suite does today: torch's wait_stream (an event recorded on one GPU's stream,
           waited on by the other's), forward after the device-to-host leg and back after the second;
  values:  the same two hand-offs through the driver's stream memory operations on a flag in pinned
           host memory (cuStreamWriteValue32 after a leg, cuStreamWaitValue32 before the next);
  slots:   a staging slot per copy: only the forward hand-off, so copies overlap (another quantity);
  legs:    each leg's chain alone on its own GPU (no hand-off): d2h on GPU 0, h2d on GPU 1;
then events and values again once peer access is on between the GPUs (it is process-wide, so last).
Usage: python3 staged_handoff.py SIZE_BYTES
"""
import ctypes
import statistics
import sys

import torch

HOLD_S, OPS, TRIALS = 20e-3, 64, 16
nb = int(sys.argv[1])


def cycles(seconds: float) -> int:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); torch.cuda._sleep(10_000_000); b.record(); b.synchronize()
    return int(seconds * 10_000_000 / (a.elapsed_time(b) / 1e3))


cuda = ctypes.CDLL("libcuda.so.1")


def _fn(*names):
    for name in names:
        try:
            return getattr(cuda, name)
        except AttributeError:
            pass
    raise SystemExit(f"none of {names} in libcuda")


wait_value = _fn("cuStreamWaitValue32_v2", "cuStreamWaitValue32")
write_value = _fn("cuStreamWriteValue32_v2", "cuStreamWriteValue32")
for f in (wait_value, write_value):
    f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    f.restype = ctypes.c_int


def _ok(code: int) -> None:
    if code:
        raise SystemExit(f"stream memory operation failed: CUresult {code}")


src = torch.randint(0, 255, (nb,), dtype=torch.uint8, device="cuda:0")
dst = torch.empty(nb, dtype=torch.uint8, device="cuda:1")
slots = torch.empty(OPS * nb, dtype=torch.uint8, pin_memory=True)
flags = torch.zeros(2, dtype=torch.int32, pin_memory=True)   # [0]: leg 1 done, [1]: leg 2 done
fwd, back = flags.data_ptr(), flags.data_ptr() + 4
s0, s1 = torch.cuda.Stream(0), torch.cuda.Stream(1)
cyc = {}
for d in (0, 1):
    with torch.cuda.device(d):
        cyc[d] = cycles(HOLD_S)
seq = [0]


def chain(way: str, k: int) -> None:
    stg = slots[k * nb:(k + 1) * nb] if way == "slots" else slots[:nb]
    with torch.cuda.stream(s0):
        stg.copy_(src, non_blocking=True)
    if way.startswith("values"):
        seq[0] += 1
        with torch.cuda.device(0):
            _ok(write_value(s0.cuda_stream, fwd, seq[0], 0))
        with torch.cuda.device(1):
            _ok(wait_value(s1.cuda_stream, fwd, seq[0], 0))   # GEQ
    else:
        s1.wait_stream(s0)
    with torch.cuda.stream(s1):
        dst.copy_(stg, non_blocking=True)
    if way == "slots":
        return
    if way.startswith("values"):
        with torch.cuda.device(1):
            _ok(write_value(s1.cuda_stream, back, seq[0], 0))
        with torch.cuda.device(0):
            _ok(wait_value(s0.cuda_stream, back, seq[0], 0))
    else:
        s0.wait_stream(s1)


def trial(way: str) -> float:
    with torch.cuda.device(0):
        cur = torch.cuda.current_stream()
        torch.cuda._sleep(cyc[0])
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(cur); s0.wait_event(a)
        for k in range(OPS):
            chain(way, k)
        gave = a.query()
        s0.wait_stream(s1); cur.wait_stream(s0); b.record(cur); b.synchronize()
        return a.elapsed_time(b) * 1e3 / OPS if not gave else float("nan")


def leg(device: int) -> float:
    """One leg's chain alone, held on its own GPU."""
    with torch.cuda.device(device):
        cur = torch.cuda.current_stream()
        torch.cuda._sleep(cyc[device])
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(cur)
        for _ in range(OPS):
            if device == 0:
                slots[:nb].copy_(src, non_blocking=True)
            else:
                dst.copy_(slots[:nb], non_blocking=True)
        gave = a.query()
        b.record(cur); b.synchronize()
        return a.elapsed_time(b) * 1e3 / OPS if not gave else float("nan")


def report(res: dict) -> None:
    for way, v in res.items():
        ok = sorted(x for x in v if x == x)
        slow = sum(x > 1.3 * ok[0] for x in ok)
        print(f"{nb}B {way:13s} median {statistics.median(ok):6.2f} min {ok[0]:6.2f} max {ok[-1]:6.2f} "
              f"over1.3xmin {slow:2d}/{len(v)}  " + " ".join(f"{x:.1f}" for x in v), flush=True)


ways = ["events", "values", "slots"]
res = {w: [] for w in ways + ["legs d2h", "legs h2d"]}
for _ in range(TRIALS):
    for w in ways:
        res[w].append(trial(w))
    res["legs d2h"].append(leg(0))
    res["legs h2d"].append(leg(1))
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
assert torch.equal(dst.cpu(), src.cpu())
report(res)
peer = torch.empty_like(dst); peer.copy_(src); dst.copy_(peer.to("cuda:0"))   # torch turns peer access on
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
res = {"events+peer": [], "values+peer": []}
for _ in range(TRIALS):
    for w in res:
        res[w].append(trial(w.split("+")[0]))
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
assert torch.equal(dst.cpu(), src.cpu())
report(res)
