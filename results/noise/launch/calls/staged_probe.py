"""Staged (GPU i -> pinned host -> GPU j) copies held behind a latch: per-trial µs per copy, three ways.
  none: as the p2p suite does today; latch: GPU j sleeps as long as GPU i's latch; busy: GPU j kept
  busy (a side-stream sleep) through the whole trial; peerwait: as none but the hand-off through events
  recorded without timing (cudaEventDisableTiming)."""
import sys, time, torch
from bench.measure.latch import sleep_cycles
i, j, n_ops, trials = int(sys.argv[1]), int(sys.argv[2]), 29, 30
nb = 4096
src = torch.randint(0, 255, (nb,), dtype=torch.uint8, device=f"cuda:{i}")
dst = torch.empty(nb, dtype=torch.uint8, device=f"cuda:{j}")
stg = torch.empty(nb, dtype=torch.uint8, pin_memory=True)
s_src = torch.cuda.Stream(i); s_dst = torch.cuda.Stream(j)
with torch.cuda.device(j):
    side = torch.cuda.Stream(j); cyc_j = sleep_cycles(1e-3)
with torch.cuda.device(i):
    cyc_i = sleep_cycles(1e-3)
def trial(way, hold_ms=3):
    with torch.cuda.device(i):
        cur = torch.cuda.current_stream()
        if way in ("latch", "busy"):
            with torch.cuda.device(j), torch.cuda.stream(side):
                torch.cuda._sleep(int(cyc_j * (hold_ms + (2 if way == "busy" else 0))))
        torch.cuda._sleep(int(cyc_i * hold_ms))
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(cur); s_src.wait_event(a)
        for _ in range(n_ops):
            with torch.cuda.stream(s_src):
                stg.copy_(src, non_blocking=True)
            if way == "peerwait":
                e = torch.cuda.Event(); e.record(s_src); s_dst.wait_event(e)
            else:
                s_dst.wait_stream(s_src)
            with torch.cuda.stream(s_dst):
                dst.copy_(stg, non_blocking=True)
            if way == "peerwait":
                e = torch.cuda.Event(); e.record(s_dst); s_src.wait_event(e)
            else:
                s_src.wait_stream(s_dst)
        gave = a.query()
        cur.wait_stream(s_src); b.record(cur); b.synchronize()
        return a.elapsed_time(b) * 1e3 / n_ops, gave
ways = ["none", "latch", "busy", "peerwait"]
res = {w: [] for w in ways}
for t in range(trials):
    for w in ways:
        res[w].append(trial(w))
torch.cuda.synchronize(i); torch.cuda.synchronize(j)
assert torch.equal(dst.cpu(), src.cpu())
for w in ways:
    v = sorted(x for x, _ in res[w]); gave = sum(g for _, g in res[w])
    print(f"{i}->{j} {w:9s} median {v[len(v)//2]:6.1f} min {v[0]:6.1f} max {v[-1]:6.1f} slow(>16us) {sum(x > 16 for x in v):2d}/{len(v)} gave_way {gave}  " + " ".join(f"{x:.1f}" for x, _ in res[w][:12]))
