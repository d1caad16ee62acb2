"""One rank's state through a run of the overlap suite, made as points need it."""
from __future__ import annotations

import datetime as dt

from bench import lazy
from bench.contract import Context
from bench.measure import nccl
from bench.suites.overlap.model import Settings, largest
from bench.suites.overlap.work import TINY, Matmul, rank_device

torch = lazy.module("torch")
tdist = lazy.module("torch.distributed")


class OverlapState:
    """One rank's run, made as points need it: buffers of the largest size (sliced per point; the
    device source holds random bytes, host sources a copy of them; points zero the destinations
    they use), the products, two streams, the idle sync's tensor, the host barrier's gloo group
    and the all_reduce's NCCL communicator."""

    def __init__(self, s: Settings, ctx: Context) -> None:
        self.settings, self.ctx = s, ctx
        self.size = largest(s.sizes)
        self._buffers: dict[str, object] = {}
        self._products: dict[int, Matmul] = {}
        self._streams: tuple | None = None
        self._ones = None
        self._host_group = None
        self.comm: nccl.Communicator | None = None

    def buffer(self, name: str):
        """src, dst (this GPU), peer_dst (the next GPU), or <pinned|pageable>_<src|dst> in host memory."""
        if name not in self._buffers:
            self._buffers[name] = self._make(name)
        return self._buffers[name]

    def _make(self, name: str):
        device, size = rank_device(self.ctx), self.size
        if name == "src":
            return torch.randint(0, 256, (size,), dtype=torch.uint8, device=device)
        if name == "dst":
            return torch.empty(size, dtype=torch.uint8, device=device)
        if name == "peer_dst":
            peer = torch.device("cuda", (self.ctx.local_rank + 1) % self.ctx.gpu_count)
            return torch.empty(size, dtype=torch.uint8, device=peer)
        memory, role = name.split("_")
        buf = torch.empty(size, dtype=torch.uint8, pin_memory=memory == "pinned")
        if role == "src":
            buf.copy_(self.buffer("src"))
        return buf

    def product(self, n: int) -> Matmul:
        if n not in self._products:
            self._products[n] = Matmul(n, rank_device(self.ctx), seed=n)
        return self._products[n]

    def streams(self) -> tuple:
        if self._streams is None:
            self._streams = (torch.cuda.Stream(rank_device(self.ctx)), torch.cuda.Stream(rank_device(self.ctx)))
        return self._streams

    def ones(self):
        if self._ones is None:
            self._ones = torch.ones(TINY, device=rank_device(self.ctx))
        return self._ones

    def host_barrier(self) -> None:
        """All ranks meet here, blocked on the host: an idle rank runs no GPU kernel meanwhile."""
        if self.ctx.world_size < 2:
            return
        if self._host_group is None:
            # Made at the first point, where every rank calls it; a rank waits here at most while
            # rank 0 measures one point.
            self._host_group = tdist.new_group(backend="gloo", timeout=dt.timedelta(seconds=self.settings.timeout_s))
        tdist.barrier(group=self._host_group)

    def communicator(self) -> nccl.Communicator:
        if self.comm is None:
            self.comm = nccl.join(self.ctx.rank, self.ctx.world_size, self.ctx.local_rank)
        return self.comm
