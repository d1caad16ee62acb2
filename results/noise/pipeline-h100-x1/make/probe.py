"""Why make runs slower in the loop than alone (numpy samples, no workers): page faults?"""
import time, resource, sys, json, os
import torch
from bench.suites.pipeline.source import NumpySamples
from bench.suites.pipeline.feed import Feed
from bench.suites.pipeline.model import Loop, Producer
torch.set_num_threads(1)
S = 64 << 10
dev = torch.device("cuda")
out = {"env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC")}}
def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for size in (1 << 20, 4 << 20):
    b = size // S
    ds = NumpySamples(S)
    for _ in range(20): [ds[i] for i in range(b)]
    f0 = faults(); t = time.perf_counter()
    for k in range(100): s = [ds[i] for i in range(b)]; s = None
    alone = (time.perf_counter() - t) / 100; fa = (faults() - f0) / 100
    for pin, nb, pre in ((True, True, True), (False, False, False)):
        f = Feed(b, S, Loop(Producer.numpy, S, 0, pin, nb, pre, threads=1), dev)
        f(30); m0 = f.spent["make"]; c0 = f.spent["collate"]; f0 = faults()
        f(150); torch.cuda.synchronize()
        make = (f.spent["make"] - m0) / 150; col = (f.spent["collate"] - c0) / 150; fl = (faults() - f0) / 150
        f.close()
        key = f"{size >> 20}MiB pin={pin}"
        out[key] = {"make_alone_ms": alone * 1e3, "faults_alone": fa, "make_loop_ms": make * 1e3,
                    "collate_loop_ms": col * 1e3, "faults_loop_per_batch": fl}
        print(key, {k: round(v, 3) for k, v in out[key].items()}, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
