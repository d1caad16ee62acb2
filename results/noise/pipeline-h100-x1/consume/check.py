"""Why the check runs ~2x slower in the loop than back to back (issue 33): the check's host time
with different work between checks (untimed)."""
import sys, time, json
import torch
from bench.suites.pipeline.feed import Check

torch.set_num_threads(1)
dev = torch.device("cuda")
SAMPLE = 64 << 10
out = {}
side = torch.cuda.Stream(dev)
for size in (256 << 10, 1 << 20, 4 << 20):
    batch = size // SAMPLE
    resident = torch.zeros(batch, SAMPLE, dtype=torch.uint8, device=dev)
    pinned = torch.zeros(batch, SAMPLE, dtype=torch.uint8).pin_memory()
    pageable = torch.zeros(batch, SAMPLE, dtype=torch.uint8)
    scratch_a, scratch_b = torch.zeros(size, dtype=torch.uint8), torch.zeros(size, dtype=torch.uint8)
    big_a, big_b = torch.zeros(64 << 20, dtype=torch.uint8), torch.zeros(64 << 20, dtype=torch.uint8)
    def none(): return resident
    def memcpy(): scratch_a.copy_(scratch_b); return resident
    def evict(): big_a.copy_(big_b); return resident
    def pinned_nb(): return pinned.to(dev, non_blocking=True)
    def pinned_nb_side():
        with torch.cuda.stream(side):
            t = pinned.to(dev, non_blocking=True)
        torch.cuda.current_stream().wait_stream(side); t.record_stream(torch.cuda.current_stream()); return t
    def pageable_blocking(): return pageable.to(dev)
    def sync(): torch.cuda.synchronize(); return resident
    def new_alloc(): return resident.clone()
    for name, between in [("none", none), ("host memcpy of the batch", memcpy), ("64 MiB host memcpy", evict),
                          ("pinned nb copy", pinned_nb), ("pinned nb copy on a side stream", pinned_nb_side),
                          ("pageable copy", pageable_blocking), ("synchronize", sync), ("device clone", new_alloc)]:
        chk = Check(batch, dev)
        spent = 0.0
        for i in range(450):
            b = between()
            s = time.perf_counter(); chk(b, (i * batch) % 256 if name == "x" else 0); e = time.perf_counter()
            b = None
            if i >= 50: spent += e - s
        torch.cuda.synchronize()
        us = spent / 400 * 1e6
        out[f"{size >> 10}KiB {name}"] = us
        print(f"{size >> 10}KiB check after {name}: {us:.1f} us", flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
