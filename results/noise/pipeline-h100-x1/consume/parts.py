"""Where the loop's consume time goes (issue 33): the main thread's step of a GPU loop, part by
part, host seconds per batch, beside the check alone (host time and GPU time)."""
import sys, time, statistics, json
import torch
from bench.suites.pipeline.feed import Feed, Check
from bench.suites.pipeline.model import Loop, Producer
from bench.suites.pipeline.source import tensors, moved

torch.set_num_threads(1)
dev = torch.device("cuda")
SAMPLE = 64 << 10

class Probe(Feed):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.t = {k: 0.0 for k in ("pull", "move", "streamctx", "wait", "record", "check", "release", "step")}
    def _timed_move(self, got):
        s = time.perf_counter(); out = moved(got.data, self.device, self.loop.non_blocking); got.data = None
        self.t["move"] += time.perf_counter() - s; return out
    def _load_ahead(self):
        s = time.perf_counter(); got, first = self._pull(); self.t["pull"] += time.perf_counter() - s
        s = time.perf_counter(); ctx = torch.cuda.stream(self.stream); ctx.__enter__(); self.t["streamctx"] += time.perf_counter() - s
        out = self._timed_move(got)
        s = time.perf_counter(); ctx.__exit__(None, None, None); self.t["streamctx"] += time.perf_counter() - s
        return out, first, got.first
    def step(self):
        s0 = time.perf_counter()
        if self.stream is None:
            s = time.perf_counter(); got, first = self._pull(); self.t["pull"] += time.perf_counter() - s
            batch = self._timed_move(got)
        else:
            if self.ahead is None:
                self.ahead = self._load_ahead()
            current = torch.cuda.current_stream(self.device)
            s = time.perf_counter(); current.wait_stream(self.stream); self.t["wait"] += time.perf_counter() - s
            (batch, first, carried), self.ahead = self.ahead, None
            s = time.perf_counter()
            for t in tensors(batch):
                t.record_stream(current)
            self.t["record"] += time.perf_counter() - s
            self.ahead = self._load_ahead()
        s = time.perf_counter(); self.check(batch, first); self.t["check"] += time.perf_counter() - s
        s = time.perf_counter(); batch = None; self.t["release"] += time.perf_counter() - s
        self.t["step"] += time.perf_counter() - s0

out = {}
for size in (256 << 10, 1 << 20, 4 << 20):
    batch = size // SAMPLE
    for pin, nb, pre in ((True, True, True), (True, True, False), (False, False, False)):
        loop = Loop(Producer.free, SAMPLE, 0, pin, nb, pre, threads=1)
        f = Probe(batch, SAMPLE, loop, dev)
        for _ in range(50): f.step()
        torch.cuda.synchronize()
        f.t = {k: 0.0 for k in f.t}
        n = 400
        for _ in range(n): f.step()
        torch.cuda.synchronize()
        us = {k: round(v / n * 1e6, 1) for k, v in f.t.items()}
        us["consume_as_loop_counts"] = round(us["step"] - us["pull"] - (0 if (pin and nb) else us["move"]), 1)
        name = f"{size>>10}KiB pin={pin} nb={nb} prefetch={pre}"
        out[name] = us
        print(name, us, flush=True)
        f.close()
    # the check alone: host time per call and GPU time
    resident = torch.zeros(batch, SAMPLE, dtype=torch.uint8, device=dev)
    chk = Check(batch, dev)
    for _ in range(50): chk(resident, 0)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s = time.perf_counter(); e0.record()
    for _ in range(400): chk(resident, 0)
    e1.record(); host = (time.perf_counter() - s) / 400; torch.cuda.synchronize()
    print(f"{size>>10}KiB check alone: host {host*1e6:.1f} us, gpu {e0.elapsed_time(e1)/400*1e3:.1f} us", flush=True)
    out[f"{size>>10}KiB check alone"] = {"host_us": host * 1e6, "gpu_us": e0.elapsed_time(e1) / 400 * 1e3}
json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "/dev/null", "w"), indent=1)
