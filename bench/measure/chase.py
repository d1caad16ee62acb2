"""Link latency: dependent 8-byte loads by a GPU's SMs around a ring in another memory (pinned
host memory, a peer GPU's), timed as an operation of the timing core."""
from __future__ import annotations

from bench import lazy
from bench.measure import kernels

torch = lazy.module("torch")

RING_BYTES = 2 << 20          # the ring, as nvbandwidth's latency tests use
NOTE = ("time_s: one dependent 8-byte load by the dst GPU's SMs of memory on src "
        f"(pointer chase, {kernels.LINE}-byte stride, 2 MiB ring, SMs in turn); no bandwidth")


class Chase:
    """An enqueue(n) for link latency: n dependent loads by `gpu`'s SMs, so the timing core's time
    per operation is the time per access. The loads go in launches of up to STEPS_PER_SM, each on
    the next SM in turn: a trial's time is an average over SMs, as nvbandwidth's is, rather than
    the latency of the one SM a single launch lands on; a launch's start costs under 0.5% of its
    loads' time."""

    STEPS_PER_SM = 1024

    def __init__(self, ring, gpu: int) -> None:
        self.ring, self.gpu = ring, gpu
        self.sms, self.next_sm = kernels.sm_count(gpu), 0
        self.last = None   # (steps, the one-element tensor the last launch ends on)

    def __call__(self, n: int) -> None:
        while n > 0:
            steps = min(n, self.STEPS_PER_SM)
            self.last = (steps, kernels.pointer_chase(self.ring, steps, self.gpu, self.next_sm))
            self.next_sm = (self.next_sm + 1) % self.sms
            n -= steps

    def verified(self) -> bool:
        """The GPU's last chase ended where the host's walk of the same ring does."""
        torch.cuda.synchronize(self.gpu)
        steps, out = self.last
        return int(out.item()) == kernels.follow(self.ring, steps)
