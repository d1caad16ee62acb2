"""Probe: where the pin thread's time goes in a loop with workers (free producer, pinned, non_blocking,
prefetch): wall and CPU time of the pin thread per batch; workers' CPU; variants: sharing strategy
file_system, switch interval 0.5 ms."""
import sys, time, os, threading
sys.path.insert(0, '.')
import torch, torch.multiprocessing as tmp
from bench.suites import pipeline as P

dev = torch.device('cuda', 0) if torch.cuda.is_available() else torch.device('cpu')
SAMPLE = 64 << 10
log = []
orig_pin = P.LoaderBatch.pin_memory
def pin(self, device=None):
    t0, c0 = time.perf_counter(), time.thread_time()
    out = orig_pin(self, device)
    log.append((t0, c0, time.perf_counter(), time.thread_time(), out.spent.get("handoff", 0.0)))
    return out
P.LoaderBatch.pin_memory = pin

def cpu_of(pid):
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')

def run(size, workers, seconds=1.5, label=""):
    loop = P.Loop(P.Producer.free, SAMPLE, workers=workers, pin_memory=True, non_blocking=True, prefetch=True)
    feed = P.Feed(size // SAMPLE, SAMPLE, loop, dev)
    feed(loop.queued + 4); (torch.cuda.synchronize() if dev.type == "cuda" else None)
    pids = [w.pid for w in feed.batches._workers] if workers else []
    log.clear()
    w0 = sum(cpu_of(p) for p in pids); r0 = os.times()
    spent0 = dict(feed.spent)
    n, s = 0, time.perf_counter()
    while time.perf_counter() - s < seconds:
        feed(1); n += 1
    (torch.cuda.synchronize() if dev.type == "cuda" else None); wall = time.perf_counter() - s
    w1 = sum(cpu_of(p) for p in pids); r1 = os.times()
    spent = {k: round((v - spent0.get(k, 0)) / n * 1e3, 3) for k, v in feed.spent.items()}
    feed.close()
    L = log[2:-2]
    per = wall / n * 1e3
    if len(L) > 3:
        gaps = [(b[0] - a[0]) * 1e3 for a, b in zip(L, L[1:])]
        cpus = [(b[1] - a[1]) * 1e3 for a, b in zip(L, L[1:])]
        pins = [(x[2] - x[0]) * 1e3 for x in L]
        hand = [x[4] * 1e3 for x in L]
        import statistics as st
        pinthr = f"pin thread per batch: wall {st.median(gaps):.3f} cpu {st.median(cpus):.3f} pin {st.median(pins):.3f} handoff {st.median(hand):.3f}"
    else:
        pinthr = ""
    print(f"{label} {size>>20}MiB w={workers}: {size * n / wall / 1e9:.2f} GB/s, {per:.3f} ms/batch; {pinthr}; "
          f"workers cpu/batch {(w1 - w0) / n * 1e3:.3f} ms; main proc cpu/batch {((r1.user - r0.user) + (r1.system - r0.system)) / n * 1e3:.3f} ms; spent ms/batch {spent}", flush=True)

for size in (1 << 20, 4 << 20, 16 << 20):
    run(size, 8, label="fd")
run(4 << 20, 4, label="fd")
tmp.set_sharing_strategy('file_system')
for size in (1 << 20, 4 << 20, 16 << 20):
    run(size, 8, label="file_system")
tmp.set_sharing_strategy('file_descriptor')
sys.setswitchinterval(0.0005)
for size in (1 << 20, 4 << 20):
    run(size, 8, label="switch0.5ms")
