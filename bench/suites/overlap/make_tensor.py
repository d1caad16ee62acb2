"""make_tensor: a tensor filled on the host and moved (pageable or pinned), or filled on the device."""
from __future__ import annotations

from bench import lazy
from bench.contract import Context, Point, trial_rows
from bench.measure import timing
from bench.measure.timing import HostClock
from bench.results import Sample
from bench.suites.overlap.work import rank_device

torch = lazy.module("torch")


def make_point(point: Point, ctx: Context) -> list[Sample]:
    dev, n = rank_device(ctx), point.size_bytes
    made: list = [None]
    if point.memory == "device":
        def make():
            return torch.full((n,), 7, dtype=torch.uint8, device=dev)
    else:
        pinned = point.memory == "pinned"

        def make():
            return torch.full((n,), 7, dtype=torch.uint8, pin_memory=pinned).to(dev, non_blocking=pinned)

    def enqueue(k: int) -> None:
        for _ in range(k):
            made[0] = make()

    trials = timing.measure(enqueue, HostClock(torch.cuda.synchronize), ctx.timing)
    torch.cuda.synchronize()
    last = made[0]
    verified = last is not None and last.device == dev and bool((last == 7).all())
    return trial_rows(point, trials, n, 1.0, verified)
