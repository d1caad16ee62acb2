"""Probe: the host's memory bandwidth on a GPU host, several ways, and against every GPU at once.
Prints one line per reading; a JSON of all readings to argv[1]."""
import ctypes, json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
import torch
sys.path.insert(0, os.getcwd())
from bench.measure import numa

N = 1 << 30
out = []
def rec(**kw):
    out.append(kw); print(json.dumps(kw), flush=True)

src = numa.allocate_on([], N); src.copy_(torch.randint(0, 256, (N,), dtype=torch.uint8))
dst = numa.allocate_on([], N); dst.zero_()
cpus = len(os.sched_getaffinity(0))

def timed(fn, reps=3):
    fn(); best = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); best.append(time.perf_counter() - t)
    best.sort(); return best[len(best) // 2]

for th in [1, 2, 4, 8, 16, 32, 64]:
    if th > cpus: continue
    torch.set_num_threads(th)
    rec(way="torch copy_", threads=th, gbps=N / timed(lambda: dst.copy_(src)) / 1e9)
    rec(way="torch sum int64 (read)", threads=th, gbps=N / timed(lambda: src.view(torch.int64).sum()) / 1e9)
    rec(way="torch fill_ (write)", threads=th, gbps=N / timed(lambda: dst.fill_(7)) / 1e9)
torch.set_num_threads(cpus)
s_ptr, d_ptr = src.data_ptr(), dst.data_ptr()
for th in [1, 2, 4, 8, 16, 32, 64]:
    if th > cpus: continue
    chunk = N // th
    with ThreadPoolExecutor(th) as pool:
        def run():
            list(pool.map(lambda k: ctypes.memmove(d_ptr + k * chunk, s_ptr + k * chunk, chunk), range(th)))
        rec(way="ctypes memmove threads", threads=th, gbps=N / timed(run) / 1e9)

# Every GPU at once h2d (pinned, 256 MiB, copy engines), alone and beside a 64-thread host copy.
g = torch.cuda.device_count()
S = 256 << 20
hsrc = [torch.empty(S, dtype=torch.uint8, pin_memory=True).fill_(1) for _ in range(g)]
ddst = [torch.empty(S, dtype=torch.uint8, device=f"cuda:{i}") for i in range(g)]
hdst = [torch.empty(S, dtype=torch.uint8, pin_memory=True) for _ in range(g)]
streams = [torch.cuda.Stream(device=i) for i in range(g)]
def gpus(op, reps=8):
    for i in range(g):
        with torch.cuda.stream(streams[i]):
            for _ in range(reps):
                (ddst[i].copy_(hsrc[i], non_blocking=True) if op == "h2d" else hdst[i].copy_(ddst[i], non_blocking=True))
    for s in streams: s.synchronize()
for op in ("h2d", "d2h"):
    rec(way=f"{g} GPUs {op} at once", threads=0, gbps=g * S * 8 / timed(lambda: gpus(op)) / 1e9)
import threading
stop = threading.Event(); copied = [0, 0.0]
def background():
    torch.set_num_threads(cpus); t = time.perf_counter()
    while not stop.is_set():
        dst.copy_(src); copied[0] += N
    copied[1] = time.perf_counter() - t
for op in ("h2d", "d2h"):
    copied[:] = [0, 0.0]; stop.clear()
    th = threading.Thread(target=background); th.start(); time.sleep(0.2)
    gb = g * S * 8 / timed(lambda: gpus(op)) / 1e9
    stop.set(); th.join()
    rec(way=f"{g} GPUs {op} at once beside a host copy", threads=0, gbps=gb, host_copy_gbps=copied[0] / copied[1] / 1e9)
json.dump(out, open(sys.argv[1], "w"), indent=1)
