"""Does a held small collective's figure follow the GPU's SM clock? (issue 41, item 1)

Two ranks (one per GPU). Six rounds, each: the SM clock read two ways (NVML's current SM clock,
and the rate torch.cuda._sleep's spin counts cycles at, timed by events), the GPU's temperature,
power and clock event reasons, then broadcast 8 B and reduce 64 B held behind a 20 ms spin
(256 ops, median of 5 trials). Run it in several processes, and once with every CPU busy.
Usage: python3 clock_probe.py LABEL
"""
import ctypes
import os
import statistics
import sys

import torch
import torch.distributed as dist

HOLD_S, OPS, TRIALS, ROUNDS = 20e-3, 256, 5, 6


class Nvml:
    def __init__(self, index: int) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.lib.nvmlInit_v2()
        self.handle = ctypes.c_void_p()
        uuid = "GPU-" + str(torch.cuda.get_device_properties(index).uuid)
        if self.lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self.handle)) != 0:
            self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle))

    def _u(self, fn, *args) -> int:
        v = ctypes.c_uint()
        getattr(self.lib, fn)(self.handle, *args, ctypes.byref(v))
        return v.value

    def read(self) -> str:
        reasons = ctypes.c_ulonglong()
        self.lib.nvmlDeviceGetCurrentClocksEventReasons(self.handle, ctypes.byref(reasons))
        return (f"nvml_sm={self._u('nvmlDeviceGetClockInfo', 1)} max={self._u('nvmlDeviceGetMaxClockInfo', 1)} "
                f"mem={self._u('nvmlDeviceGetClockInfo', 2)} temp={self._u('nvmlDeviceGetTemperature', 0)}C "
                f"power={self._u('nvmlDeviceGetPowerUsage') / 1000:.0f}W reasons={reasons.value:#x}")


def mhz() -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    a.record(); torch.cuda._sleep(20_000_000); b.record(); b.synchronize()
    return 20_000_000 / (a.elapsed_time(b) * 1e3)


def held(fn, cyc: int, bar) -> float:
    bar()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cyc)
    a.record()
    for _ in range(OPS):
        fn()
    gave = a.query()
    b.record(); b.synchronize()
    return a.elapsed_time(b) * 1e3 / OPS if not gave else float("nan")


def rank_main(rank: int, label: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29519")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    nvml = Nvml(rank)
    cyc = int(HOLD_S * mhz() * 1e6)
    bar = lambda: (torch.cuda.synchronize(), dist.barrier(device_ids=[rank]), torch.cuda.synchronize())
    t8, t64 = torch.ones(2, device="cuda"), torch.ones(16, device="cuda")
    ops = {"bcast8": lambda: dist.broadcast(t8, 0), "reduce64": lambda: dist.reduce(t64, 0)}
    for fn in ops.values():
        for _ in range(3):
            held(fn, cyc, bar)
    for r in range(ROUNDS):
        before, state = mhz(), nvml.read()
        figs = {name: statistics.median(held(fn, cyc, bar) for _ in range(TRIALS)) for name, fn in ops.items()}
        after = mhz()
        print(f"{label} rank{rank} round{r} spin_mhz={before:.0f}/{after:.0f} {state} "
              + " ".join(f"{k}={v:.3f}" for k, v in figs.items()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.spawn(rank_main, args=(sys.argv[1],), nprocs=2)
