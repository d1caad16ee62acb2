"""Probe: is the host's CPU capacity steady? Time series of a single-thread kernel, per-CPU rates,
steal and cgroup throttling, and a DataLoader segment series."""
import os, sys, time, json, subprocess
import numpy as np
sys.path.insert(0, '.')

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout
    except Exception as e:
        return str(e)

def steal():
    f = open('/proc/stat').readline().split()[1:]
    v = list(map(int, f)); return {'user': v[0], 'system': v[2], 'idle': v[3], 'steal': v[7] if len(v) > 7 else 0, 'total': sum(v)}

def cgstat():
    out = {}
    for p in ('/sys/fs/cgroup/cpu.stat',):
        try:
            for line in open(p):
                k, v = line.split(); out[k] = int(v)
        except OSError:
            pass
    return out

print("== facts")
print(sh("lscpu; cat /sys/fs/cgroup/cpu.max; cat /sys/fs/cgroup/cpuset.cpus.effective; cat /sys/kernel/mm/transparent_hugepage/enabled; cat /proc/loadavg; ps -eo pid,pcpu,comm --sort=-pcpu | head -8"))
print(sh("for c in /sys/devices/system/cpu/cpu[0-9]*; do echo $c $(cat $c/topology/thread_siblings_list 2>/dev/null) $(cat $c/cpufreq/scaling_cur_freq 2>/dev/null); done"))

buf = np.empty(64 << 10, np.uint8)
def kernel(n=200):
    for i in range(n):
        np.full(65536, i % 251, dtype=np.uint8)

def rate(seconds):
    n, s = 0, time.perf_counter()
    while time.perf_counter() - s < seconds:
        kernel(); n += 1
    return n * 200 / (time.perf_counter() - s)

print("== series: one thread, 25 ms windows, 12 s")
s0, c0 = steal(), cgstat()
series = [rate(0.025) for _ in range(480)]
s1, c1 = steal(), cgstat()
a = np.array(series)
print("calls/s p5 p50 p95 min max", np.percentile(a, [5, 50, 95]).round(0), a.min().round(0), a.max().round(0))
print("per-second medians", [round(float(np.median(a[i:i + 40])), 0) for i in range(0, 480, 40)])
print("steal share", (s1['steal'] - s0['steal']) / max(1, s1['total'] - s0['total']), "cg delta", {k: c1[k] - c0.get(k, 0) for k in c1})

print("== per cpu: 0.3 s each, two passes")
cpus = sorted(os.sched_getaffinity(0))
per = {c: [] for c in cpus}
for _ in range(2):
    for c in cpus:
        os.sched_setaffinity(0, {c}); per[c].append(round(rate(0.3)))
os.sched_setaffinity(0, set(cpus))
print(json.dumps(per))

print("== all cpus busy: 16 processes of the kernel, 3 s; then one alone")
import multiprocessing as mp
def spin(q, sec):
    q.put(rate(sec))
for k in (1, 4, 8, 16):
    q = mp.get_context('fork').Queue()
    s0, c0 = steal(), cgstat()
    ps = [mp.get_context('fork').Process(target=spin, args=(q, 2.0)) for _ in range(k)]
    [p.start() for p in ps]; [p.join() for p in ps]
    s1, c1 = steal(), cgstat()
    r = sorted(q.get() for _ in range(k))
    print(k, "procs: calls/s each min/median/max", round(r[0]), round(r[len(r)//2]), round(r[-1]), "steal", round((s1['steal'] - s0['steal']) / max(1, s1['total'] - s0['total']), 3),
          "cg", {kk: c1[kk] - c0.get(kk, 0) for kk in c1 if 'throttl' in kk})

print("== DataLoader: free workers=8 4MiB pinned, 20 segments of 0.25 s in one stream; and 6 fresh loaders")
import torch
from bench.suites import pipeline as P
dev = torch.device('cuda', 0) if torch.cuda.is_available() else torch.device('cpu')
SAMPLE, SIZE = 64 << 10, 4 << 20
loop = P.Loop(P.Producer.free, SAMPLE, workers=8, pin_memory=dev.type == 'cuda', non_blocking=True, prefetch=False)
def seg(feed, seconds=0.25):
    if dev.type == 'cuda': torch.cuda.synchronize()
    n, s = 0, time.perf_counter()
    while time.perf_counter() - s < seconds:
        feed(1); n += 1
    if dev.type == 'cuda': torch.cuda.synchronize()
    return round(n * SIZE / (time.perf_counter() - s) / 1e9, 2)
feed = P.Feed(SIZE // SAMPLE, SAMPLE, loop, dev); feed(loop.queued + 2)
s0, c0 = steal(), cgstat()
print("one stream", [seg(feed) for _ in range(20)])
s1, c1 = steal(), cgstat()
print("steal", round((s1['steal'] - s0['steal']) / max(1, s1['total'] - s0['total']), 3), {k: c1[k] - c0.get(k, 0) for k in c1})
feed.close()
fresh = []
for _ in range(6):
    f = P.Feed(SIZE // SAMPLE, SAMPLE, loop, dev); f(loop.queued + 2); fresh.append([seg(f) for _ in range(3)]); f.close()
print("fresh loaders", fresh)
print("== workers=0 free pinned 4MiB: fresh loaders")
loop0 = P.Loop(P.Producer.free, SAMPLE, workers=0, pin_memory=dev.type == 'cuda', non_blocking=True, prefetch=True)
fresh = []
for _ in range(6):
    f = P.Feed(SIZE // SAMPLE, SAMPLE, loop0, dev); f(2); fresh.append([seg(f) for _ in range(3)]); f.close()
print("fresh loaders", fresh)
print(sh("cat /proc/loadavg; ps -eo pid,pcpu,comm --sort=-pcpu | head -5"))
