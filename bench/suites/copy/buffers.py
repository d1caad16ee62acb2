"""The copy suite's state for a run: its buffers and streams, made as the first point needs them."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from bench import lazy
from bench.contract import Context
from bench.measure import kernels, numa
from bench.measure.chase import RING_BYTES
from bench.measure.latch import HELD_STREAMS
from bench.measure.lanes import Streams
from bench.suites.copy.points import HostPlan, gpus_of, host_plan_for, sweep
from bench.suites.copy.settings import Settings

torch = lazy.module("torch")

# Each GPU's buffers are at least this large: the caching allocator carves a small buffer out of
# a segment it shares and gives a large one a segment of its own, and a small copy's pace differs
# between the two, so a sweep of small sizes would not measure what the default sweep does.
DEVICE_FLOOR_BYTES = 64 << 20


class Store:
    """Buffers made on first use and sliced for every point: a source and a destination on each
    GPU, and each GPU's host buffers for one NUMA mode at a time. Each GPU's are as large as its
    largest point, each host memory's as its largest point in that memory: GPUs with only
    whole-machine points need no 1 GiB host buffers placed and pinned (about half a second a
    GiB), nor pageable copies capped at 256 MiB a 1 GiB buffer."""

    def __init__(self, sizes: dict[int, int], host_sizes: dict[tuple[int, str], int], plan: HostPlan) -> None:
        self.sizes, self.host_sizes, self.plan = sizes, host_sizes, plan
        self._device: dict[tuple[int, str], object] = {}
        self._host: dict[tuple, object] = {}
        self._mode: str | None = None

    def device(self, gpu: int, name: str):
        if (gpu, name) not in self._device:
            where, size = f"cuda:{gpu}", max(self.sizes[gpu], DEVICE_FLOOR_BYTES)
            if name == "src":
                seeded = torch.Generator(device=where).manual_seed(gpu + 1)
                buf = torch.randint(0, 256, (size,), dtype=torch.uint8, device=where, generator=seeded)
            else:
                buf = torch.empty(size, dtype=torch.uint8, device=where)
            self._device[gpu, name] = buf
        return self._device[gpu, name]

    def _use(self, mode: str) -> None:
        if mode != self._mode:
            self._host.clear()   # the last mode's buffers: their pages are unpinned as they are freed
            self._mode = mode

    def host(self, gpu: int, mode: str, memory: str, name: str):
        """`name` (src, dst) in `memory` (pinned, pageable) placed for `gpu` as `mode` says."""
        self._use(mode)
        if (gpu, memory, name) not in self._host:
            cpus, size = self.plan.places[gpu, mode].cpus, self.host_sizes.get((gpu, memory), self.sizes[gpu])
            buf = (numa.allocate_pinned_on if memory == "pinned" else numa.allocate_on)(cpus, size)
            if name == "src":
                buf.copy_(self.device(gpu, "src")[:size])
            self._host[gpu, memory, name] = buf
        return self._host[gpu, memory, name]

    def ring(self, gpu: int, mode: str):
        """A pointer-chase ring in pinned host memory placed like the GPU's host buffers."""
        self._use(mode)
        if (gpu, "ring", "") not in self._host:
            ring = numa.allocate_pinned_on(self.plan.places[gpu, mode].cpus, RING_BYTES).view(torch.int64)
            ring.copy_(kernels.make_ring(RING_BYTES))
            self._host[gpu, "ring", ""] = ring
        return self._host[gpu, "ring", ""]


@dataclass
class CopyState:
    """One run's buffers and streams, made as the first point needs them."""

    settings: Settings
    ctx: Context
    cpu_note: str = ""
    _store: Store | None = None
    _streams: Streams | None = None
    _held: dict = field(default_factory=dict)
    _h2h: tuple | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            largest: dict[int, int] = defaultdict(int)
            in_memory: dict[tuple[int, str], int] = defaultdict(int)
            for p in sweep(self.settings, self.ctx):
                for gpu in gpus_of(p):
                    largest[gpu] = max(largest[gpu], p.size_bytes)
                    in_memory[gpu, p.memory] = max(in_memory[gpu, p.memory], p.size_bytes)
            self._store = Store(largest, in_memory, host_plan_for(self.settings, self.ctx))
        return self._store

    @property
    def streams(self) -> Streams:
        if self._streams is None:
            self._streams = Streams(self.ctx.gpu_count)
        return self._streams

    def held_streams(self, gpu: int) -> list:
        """The ring of streams a held copy's trials go round on `gpu` (made together, as Streams)."""
        if gpu not in self._held:
            self._held[gpu] = [torch.cuda.Stream(device=gpu) for _ in range(HELD_STREAMS)]
        return self._held[gpu]

    def h2h(self) -> tuple:
        """A destination and a random source in host memory, of the sweep's largest size."""
        if self._h2h is None:
            size = max(self.ctx.sizes)
            self._h2h = (torch.empty(size, dtype=torch.uint8), torch.randint(0, 256, (size,), dtype=torch.uint8))
        return self._h2h
