"""The p2p suite's state for a run: its buffers, streams and rings, made as points need them."""
from __future__ import annotations

from bench import lazy
from bench.contract import Context
from bench.measure import kernels
from bench.measure.flags import HostFlags
from bench.measure.chase import RING_BYTES
from bench.measure.lanes import Streams

torch = lazy.module("torch")


class P2PState:
    """One run's buffers and streams, made as points need them: per GPU its largest-size src
    (random bytes, seeded per GPU so that one GPU's data cannot pass for another's), dst and
    gather (a slot per peer, for all_to_one); pinned host staging per direction and its hand-off
    flags; streams per GPU and direction; pointer-chase rings; the lanes' streams."""

    def __init__(self, ctx: Context) -> None:
        self.size, self.gpus = max(ctx.sizes), ctx.gpu_count
        self.lanes = Streams(ctx.gpu_count)
        self._buffers: dict[tuple[str, int | None], object] = {}
        self._streams: dict[tuple[int, str], list] = {}
        self._rings: dict[int, object] = {}
        self._flags: dict[str, HostFlags] = {}

    def buffer(self, name: str, device: int | None):
        key = (name, device)
        if key not in self._buffers:
            if device is None:
                buf = torch.empty(self.size, dtype=torch.uint8, pin_memory=True)
            elif name == "src":
                seeded = torch.Generator(device=f"cuda:{device}").manual_seed(device + 1)
                buf = torch.randint(0, 256, (self.size,), dtype=torch.uint8, device=f"cuda:{device}", generator=seeded)
            else:
                slots = self.gpus - 1 if name == "gather" else 1
                buf = torch.empty(self.size * slots, dtype=torch.uint8, device=f"cuda:{device}")
            self._buffers[key] = buf
        return self._buffers[key]

    def streams(self, device: int, direction: str, count: int) -> list:
        """`count` streams of a GPU and direction (a held copy's ring, else one): the two legs of a
        bidirectional copy share none."""
        ring = self._streams.setdefault((device, direction), [])
        ring += [torch.cuda.Stream(device=device) for _ in range(count - len(ring))]
        return ring[:count]

    def staging(self, direction: str, size: int, slots: int) -> tuple:
        """The `slots` pieces of `size` bytes of pinned host memory a direction's staged copies go
        through: one slot of its host buffer, or a ring of its own (held copies)."""
        if slots == 1:
            return (self.buffer(f"host_{direction}", None)[:size],)
        key = (f"ring_{direction}", None)
        if key not in self._buffers or self._buffers[key].numel() < slots * size:
            self._buffers[key] = torch.empty(slots * size, dtype=torch.uint8, pin_memory=True)
        return tuple(self._buffers[key][:slots * size].view(slots, size))

    def flags(self, direction: str) -> HostFlags:
        """A direction's staged hand-offs: word 0 counts copies written into host memory, word 1
        copies read out of it (p2p/measure.py: WRITTEN, READ)."""
        if direction not in self._flags:
            self._flags[direction] = HostFlags(2)
        return self._flags[direction]

    def ring(self, gpu: int):
        if gpu not in self._rings:
            self._rings[gpu] = kernels.make_ring(RING_BYTES, device=f"cuda:{gpu}")
        return self._rings[gpu]
