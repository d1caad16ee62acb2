"""Probe: small-copy and small-collective latency timed eager, held behind a sleep latch, and from a graph.
python3 .dev/probe_latency.py TAG OUTDIR  (world = every GPU for collectives)"""
import ctypes, json, os, statistics, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [8, 4096, 65536]
N = 200
TRIALS = 11


def cudart():
    for line in open("/proc/self/maps"):
        f = line.split(maxsplit=5)
        if len(f) == 6 and "libcudart.so" in os.path.basename(f[5].strip()):
            lib = ctypes.CDLL(f[5].strip())
            lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            lib.cudaMemcpyAsync.restype = ctypes.c_int
            return lib
    raise RuntimeError("no libcudart mapped")


HZ = {}


def hz(dev):
    if dev not in HZ:
        with torch.cuda.device(dev):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000); torch.cuda.synchronize()
            a.record(); torch.cuda._sleep(20_000_000); b.record(); b.synchronize()
            HZ[dev] = 20_000_000 / (a.elapsed_time(b) / 1e3)
    return HZ[dev]


def eager(enq, dev):
    out = []
    for _ in range(TRIALS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); enq(N); b.record(); b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / N)
    return out


def held(enq, dev, min_rank=None):
    out, late, hold = [], 0, 300e-6
    for _ in range(TRIALS):
        if min_rank is not None:
            min_rank("barrier")
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(hold * hz(dev)))
        a.record()
        t0 = time.perf_counter(); enq(N); spent = time.perf_counter() - t0
        gave_way = a.query()
        b.record(); b.synchronize()
        late += gave_way
        hold = max(hold, 2 * spent + 200e-6)
        out.append(a.elapsed_time(b) * 1e3 / N)
    return out, late


def graph(enq, dev):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        enq(1)
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        enq(N)
    g.replay(); torch.cuda.synchronize()
    out = []
    for _ in range(TRIALS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / N)
    return out


def summ(name, vals, rec, extra=None):
    med = statistics.median(vals)
    rec.append({"name": name, "median_us": med, "min_us": min(vals), "max_us": max(vals), **(extra or {})})
    print(f"{name:55s} {med:8.2f} us  ({min(vals):.2f}-{max(vals):.2f}) {extra or ''}", flush=True)


def copies(rec):
    rt = cudart()
    ngpu = torch.cuda.device_count()
    torch.cuda.set_device(0)
    for size in SIZES:
        dev = torch.empty(size, dtype=torch.uint8, device="cuda:0")
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        for op, (dst, src) in {"h2d": (dev, host), "d2h": (host, dev)}.items():
            enq = lambda n, d=dst, s=src: [d.copy_(s, non_blocking=True) for _ in range(n)]
            enq(3); torch.cuda.synchronize()
            summ(f"{op} {size}B eager", eager(enq, 0), rec)
            v, late = held(enq, 0); summ(f"{op} {size}B held", v, rec, {"late": late})
            summ(f"{op} {size}B graph", graph(enq, 0), rec)
        if ngpu < 2:
            continue
        d1 = torch.empty(size, dtype=torch.uint8, device="cuda:1")
        d1.copy_(dev); torch.cuda.synchronize()   # enables peer access
        enq_t = lambda n: [d1.copy_(dev, non_blocking=True) for _ in range(n)]

        def enq_rt(n):
            st = torch.cuda.current_stream().cuda_stream
            for _ in range(n):
                r = rt.cudaMemcpyAsync(d1.data_ptr(), dev.data_ptr(), size, 4, st)
                assert r == 0, r
        for name, enq in (("torch copy_", enq_t), ("cudaMemcpyAsync", enq_rt)):
            enq(3); torch.cuda.synchronize()
            summ(f"p2p 0->1 {size}B {name} eager", eager(enq, 0), rec)
            v, late = held(enq, 0); summ(f"p2p 0->1 {size}B {name} held", v, rec, {"late": late})
            try:
                summ(f"p2p 0->1 {size}B {name} graph", graph(enq, 0), rec)
            except Exception as e:
                print(f"p2p {name} graph failed: {str(e).splitlines()[0]}"); torch.cuda.synchronize()
        # staged through pinned host memory, torch's way on two streams
        stage = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        s0 = torch.cuda.Stream(0); s1 = torch.cuda.Stream(1)

        def enq_st(n):
            cur = torch.cuda.current_stream()
            s0.wait_stream(cur)
            for _ in range(n):
                with torch.cuda.stream(s0):
                    stage.copy_(dev, non_blocking=True)
                s1.wait_stream(s0)
                with torch.cuda.stream(s1):
                    d1.copy_(stage, non_blocking=True)
                s0.wait_stream(s1)
            cur.wait_stream(s0)
        enq_st(2); torch.cuda.synchronize()
        summ(f"p2p staged 0->1 {size}B eager", eager(enq_st, 0), rec)
        v, late = held(enq_st, 0); summ(f"p2p staged 0->1 {size}B held", v, rec, {"late": late})


def rank_main(rank, world, tag, outdir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    sys.path.insert(0, os.getcwd())
    from bench.measure import nccl
    comm = nccl.join(rank, world, rank)
    rec = []

    def agree(v, op):
        t = torch.tensor([v], dtype=torch.float64, device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN)
        return t.item()

    def barrier(_=None):
        agree(0.0, "max")
    for size in SIZES:
        x = torch.ones(size // 4, device="cuda")
        raw = comm.prepare("all_reduce", x)
        for api, enq in (("torch", lambda n: [dist.all_reduce(x) for _ in range(n)]),
                         ("nccl", lambda n: [raw(torch.cuda.current_stream().cuda_stream) for _ in range(n)])):
            enq(3); torch.cuda.synchronize(); barrier()
            e = []
            for _ in range(TRIALS):
                barrier()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); enq(N); b.record(); b.synchronize()
                e.append(a.elapsed_time(b) * 1e3 / N)
            hv, late = held(enq, rank, min_rank=barrier)
            mx = [agree(v, "max") for v in e]; hmx = [agree(v, "max") for v in hv]; hmn = [agree(v, "min") for v in hv]
            late = agree(late, "max")
            if api == "torch":
                barrier()
                g = graph(enq, rank); gmx = [agree(v, "max") for v in g]
            if rank == 0:
                summ(f"all_reduce {api} n={world} {size}B eager(max)", mx, rec)
                summ(f"all_reduce {api} n={world} {size}B held(max)", hmx, rec, {"late": late})
                summ(f"all_reduce {api} n={world} {size}B held(min)", hmn, rec)
                if api == "torch":
                    summ(f"all_reduce {api} n={world} {size}B graph(max)", gmx, rec)
            barrier()
    if rank == 0:
        json.dump(rec, open(os.path.join(outdir, f"coll-{tag}.json"), "w"), indent=1)
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    tag, outdir = sys.argv[1], sys.argv[2]
    rec = []
    copies(rec)
    json.dump(rec, open(os.path.join(outdir, f"copy-{tag}.json"), "w"), indent=1)
    world = torch.cuda.device_count()
    if world >= 2:
        mp.spawn(rank_main, args=(world, tag, outdir), nprocs=world, join=True)
