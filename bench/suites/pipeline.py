"""The input pipeline of a training job: what a DataLoader-fed loop delivers to the GPU, and the
stage that limits it.

The loop. A map-style dataset makes each sample in the loader's workers; the DataLoader
collates `batch` samples, hands the batch from the worker to the main process (a new
shared-memory segment a batch), pins it or not (pin_memory: the pin-memory thread copies it
into page-locked memory); the loop moves it to the GPU as a training job does, with
.to(non_blocking=...) or one batch ahead on a side stream (prefetch), and consumes it by
checking it: on the GPU every byte against the sample indices the batch must hold, so a lost,
repeated or reordered batch fails the point (without a GPU each sample's first and last byte).
Two producers: `numpy` makes each sample with numpy (a decoding dataset's per-sample cost);
`free` returns views of a buffer made once, so the DataLoader's own machinery shows without a
producer's limit. Sample i holds the byte i mod 251 either way.

Steady state. A point is one continuous stream of batches (timing.measure_stream): a warm-up
that drains what the workers queued (workers x prefetch_factor batches, and one more), then
trials that cut the stream at marks instead of restarting it, each at least twice what the
workers hold ahead and pipeline.min_trial_s long. The marks are CUDA events on the consuming
stream (the moment the GPU finished a batch's check, with no synchronize between trials), or
the host's clock without a GPU. Trials further apart than DISAGREE say so in `note`.

Stages alone, at each batch size; each isolated as the loop runs it, on what it receives:
- make: the dataset's per-sample calls for each next batch, in each of `workers` DataLoader
  workers at once (workers=0: the main process), each timing only its own calls;
- collate: default_collate of each next batch's samples as the producer makes them (made
  untimed) and freeing the result, in those workers: into a new shared-memory segment each
  time, as the loader's workers do (workers=0: host memory);
- handoff: the DataLoader carrying a new, unwritten shared-memory batch per item from its
  workers to the main process, whose pages no one touches: the machinery's rate alone
  (workers=0: one batch made once, so the loader's own work a batch in the main process);
- pin: Tensor.pin_memory() of each batch as the main process receives it from the workers of
  a DataLoader over the free producer (a fresh mapping whose every page faults on first touch,
  freed right after, as the pin-memory thread does), timed around the call alone;
- h2d: pinned, a copy from page-locked memory back to back (the link); pageable, .to(cuda) of
  each batch as received, as pin is (the host stages a pageable copy through its own buffer);
- consume: the data check, on the GPU of a batch already there; without a GPU of each batch as
  received, as pin is (the check is the first to touch its pages).
Stages in the loop. The loop times its own stages as it runs them, in the same trials: the
batch carries the seconds each stage spent on it (LoaderBatch): make and collate in the worker
that made it, the hand-off as the receiving thread rebuilds it from the worker's shared memory
(workers=0: what next() took beyond the stages, the loader's own work), pin on the pin thread
(or the main thread without workers) with the received batch released, as the loader releases
it; h2d where the main thread waits through the copy (pageable, or pinned and blocking); consume
the rest of the main thread's step (launching the copy and the check, the check itself on the
host, releasing the batch). Host speed on a shared machine drifts by tens of percent from one
second to the next (docs/training.md): timed in the same trials, a loop and its stages move
together, so the bound and the fraction of it reached hold where absolute figures do not.

The stages a worker or the main thread runs one after another (stages_of) add their times
per batch: a loop delivers at most the slowest such group's rate, its `bound`, which is at
most its slowest stage's. The table takes each stage's rate from the loop's own timing where it
has one, else from the stage alone (the copy engine's link; runs from before loops timed their
stages), names the bottleneck, and gives the fraction of the bound the loop reaches and the
stage's rate alone beside its rate in the loop. (Busy times of workers at once are summed as
rates: if the host has fewer free cores than workers, the bound is optimistic.)

Rows (the tidy schema; time_s is seconds per batch, algbw_gbps its GB/s; dtype is one sample,
`uint8[65536]`; size_bytes the batch):
- loader_to_gpu (`loader` without a GPU): the loop, part=total; memory `pinned` or `pageable`
  (pin_memory); mode `numpy workers=4 prefetch_factor=2 [persistent] non_blocking|blocking
  [prefetch]`. Its stages as it ran them: the same point, part = the stage's name, time_s a
  batch's seconds in that stage (make and collate divided by the workers running them at once).
- stage_make, stage_collate (alone, part=total, as every stage alone): mode `numpy workers=4`,
  the producer and the workers at once.
- stage_handoff, stage_pin: mode `free workers=4`, the workers that fed them.
- stage_h2d: memory `pinned` (the link; no mode) or `pageable` (mode `free workers=4`).
- stage_consume: no mode on a GPU; without one `free workers=4`, the batches it checked.
Epoch restarts are no stage: a loop with epochs shows them as a lower fraction of its bound.

Points: per sample size and batch size, the stages any loop needs, then the loops of every
producer: by default (grid=ablation) the last value of each switch's list, each switch changed
alone, and the DataLoader's defaults (workers=0, no pinning, blocking copies); grid=full is
every combination. Workers above the host's usable cores are capped to them. With
epoch_batches the loader is iterated anew every epoch_batches batches and trials span whole
epochs (persistent_workers keeps the workers between epochs).
"""
from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Callable, List

from bench import ConfigError, lazy
from bench.config.settings import Choice, nonempty, positive, require
from bench.measure import timing
from bench.measure.checks import same_data
from bench.measure.memory import format_bytes, gpu_free_bytes, host_available_bytes
from bench.measure.timing import BusyMarks, EventMarks, HostMarks, Trial
from bench.results import Sample, params
from bench.sizes import format_size, parse_size
from bench.sizes import sweep as size_sweep
from bench.contract import Context, Point, Suite, trial_rows

np = lazy.module("numpy")
pd = lazy.module("pandas")
torch = lazy.module("torch")

PERIOD = 251            # sample i holds i % PERIOD: a prime, so consecutive batches of 2^k samples differ
MIN_BATCHES = 2         # at least this many batches a trial
ENDLESS = 1 << 40       # an epoch's samples when the loader is never iterated anew
ITEM_S = 0.01           # a worker stage's item lasts about this long: its hand-off is small beside it
DISAGREE = 0.2          # trials whose slowest and fastest differ by more than this share of their median


# ---------------------------------------------------------------- settings


class Grid(Choice):
    ablation = "ablation"   # the last value of every list, each switch changed alone, the DataLoader's defaults
    full = "full"           # every combination


class Producer(Choice):
    numpy = "numpy"         # each sample made with numpy in the worker, as a decoding dataset would
    free = "free"           # views of a buffer made once: samples cost nothing to make


@dataclass
class Settings:
    producers: List[Producer] = field(default_factory=lambda: [Producer.numpy, Producer.free])
    sample_sizes: List[str] = field(default_factory=lambda: ["64KiB"])   # one sample's bytes
    workers: List[int] = field(default_factory=lambda: [0, 4, 8])     # DataLoader num_workers, capped at the cores
    pin_memory: List[bool] = field(default_factory=lambda: [False, True])
    non_blocking: List[bool] = field(default_factory=lambda: [False, True])
    prefetch: List[bool] = field(default_factory=lambda: [False, True])   # the next batch's copy on a side stream
    prefetch_factor: List[int] = field(default_factory=lambda: [2])      # batches each worker keeps ready
    persistent_workers: List[bool] = field(default_factory=lambda: [False])
    epoch_batches: int = 0          # iterate the loader anew every this many batches; 0: one endless epoch
    grid: Grid = Grid.ablation
    min_size: str = "64KiB"         # batch sizes, in bytes: min_size, x size_factor, ..., max_size
    max_size: str = "16MiB"
    size_factor: int = 4
    min_trial_s: float = 0.05       # a trial lasts at least this long (and timing.min_trial_s)

    def __post_init__(self) -> None:
        for key in ("producers", "sample_sizes", "workers", "pin_memory", "non_blocking", "prefetch",
                    "prefetch_factor", "persistent_workers"):
            nonempty(f"pipeline.{key}", getattr(self, key))
        for w in self.workers:
            require(w >= 0, "pipeline.workers", w, "must be >= 0")
        for f in self.prefetch_factor:
            require(f >= 1, "pipeline.prefetch_factor", f, "must be >= 1")
        require(self.epoch_batches >= 0, "pipeline.epoch_batches", self.epoch_batches, "must be >= 0")
        require(self.epoch_batches > 0 or not any(self.persistent_workers), "pipeline.persistent_workers",
                self.persistent_workers, "keeps workers between epochs; set pipeline.epoch_batches, "
                "else the loader runs one endless epoch")
        lo, hi = parse_size(self.min_size, "pipeline.min_size"), parse_size(self.max_size, "pipeline.max_size")
        require(lo <= hi, "pipeline.min_size", self.min_size, f"is larger than pipeline.max_size={self.max_size}")
        for s in self.sample_sizes:
            require(parse_size(s, "pipeline.sample_sizes") <= hi, "pipeline.sample_sizes", s,
                    f"is larger than pipeline.max_size={self.max_size}: a batch holds at least one sample")
        require(self.size_factor >= 2, "pipeline.size_factor", self.size_factor, "must be an integer >= 2")
        positive("pipeline.min_trial_s", self.min_trial_s)


# ---------------------------------------------------------------- what a row names: a loop or a stage


LOOP_OP = "loader_to_gpu"
MAKE, COLLATE, HANDOFF, PIN, H2D, CONSUME = ("stage_make", "stage_collate", "stage_handoff", "stage_pin",
                                             "stage_h2d", "stage_consume")
STAGES = (MAKE, COLLATE, HANDOFF, PIN, H2D, CONSUME)
STAGE_NAMES = tuple(op.removeprefix("stage_") for op in STAGES)   # a stage's name in rows and tables: 'make'
WORKER_STAGES = STAGE_NAMES[:2]   # make and collate: the stages a loader's workers run


@dataclass(frozen=True)
class Loop:
    """One way of feeding the GPU: the producer and the DataLoader's and the loop's switches."""

    producer: Producer = Producer.numpy
    sample_size: int = 0              # one sample's bytes
    workers: int = 0
    pin_memory: bool = False
    non_blocking: bool = False
    prefetch: bool = False            # the next batch's copy on a side stream
    prefetch_factor: int = 2
    persistent_workers: bool = False

    @property
    def memory(self) -> str:
        return "pinned" if self.pin_memory else "pageable"

    @property
    def queued(self) -> int:
        """Batches the workers can hold ahead of the loop."""
        return self.workers * self.prefetch_factor

    def normal(self, gpu: bool) -> "Loop":
        """The same loop with the switches that do nothing here at their defaults (no workers: no
        prefetch_factor or persistence; no GPU: nothing to pin or copy)."""
        loop = self if self.workers else replace(self, prefetch_factor=2, persistent_workers=False)
        return loop if gpu else replace(loop, pin_memory=False, non_blocking=False, prefetch=False)

    def mode(self, device: str = "cuda") -> str:
        """The row's mode: 'numpy workers=4 prefetch_factor=2 non_blocking prefetch'."""
        words = [self.producer.value, f"workers={self.workers}"]
        if self.workers:
            words += [f"prefetch_factor={self.prefetch_factor}", *(["persistent"] if self.persistent_workers else [])]
        if device == "cuda":
            words += ["non_blocking" if self.non_blocking else "blocking", *(["prefetch"] if self.prefetch else [])]
        return " ".join(words)


def dataloader_defaults(producer: Producer, sample_size: int) -> Loop:
    """What DataLoader(dataset, batch_size) and batch.to('cuda') do unless told otherwise."""
    return Loop(producer, sample_size)


@dataclass(frozen=True)
class Stage:
    """One stage alone: its op, and the producer and worker count it was measured with where
    they matter (-1: no workers involved)."""

    op: str
    producer: Producer | None = None
    workers: int = -1
    memory: str = ""
    sample_size: int = 0

    @property
    def name(self) -> str:
        return self.op.removeprefix("stage_")

    @property
    def label(self) -> str:
        """The name a bottleneck goes by: 'make', 'h2d pinned'."""
        return " ".join(x for x in (self.name, self.memory) if x)

    def mode(self) -> str:
        return " ".join([*([self.producer.value] if self.producer else []),
                         *([f"workers={self.workers}"] if self.workers >= 0 else [])])


def descriptor(described: dict) -> Loop | Stage:
    """The loop or stage a row's params describe (what its point carried)."""
    if "op" in described:
        producer = described["producer"]
        return Stage(**{**described, "producer": Producer(producer) if producer else None})
    return Loop(**{**described, "producer": Producer(described["producer"])})


def stages_of(loop: Loop, gpu: bool) -> dict[str, tuple[Stage, ...]]:
    """The stages a loop runs, grouped by who runs them one after another: its workers, the
    pin-memory thread, the main thread, the copy engine. A group's time per batch is the sum
    of its stages'; the groups run at once."""
    w, producer, sample = loop.workers, loop.producer, loop.sample_size
    make, collate = Stage(MAKE, producer, w, sample_size=sample), Stage(COLLATE, producer, w, sample_size=sample)
    groups: dict[str, tuple[Stage, ...]] = {}
    main: list[Stage] = []
    handoff = Stage(HANDOFF, Producer.free, w, sample_size=sample)   # without workers: the loader's own work a batch
    pin = Stage(PIN, Producer.free, w, sample_size=sample)
    if w:
        groups[f"{w} worker{'s' if w > 1 else ''}"] = (make, collate)
    else:
        main += [make, collate]
    if gpu and loop.pin_memory and w:
        groups["pin thread"] = (handoff, pin)      # it takes the batches from the workers
    else:
        main += [handoff, pin] if gpu and loop.pin_memory else [handoff]
    if gpu:
        if not loop.pin_memory:
            main.append(Stage(H2D, Producer.free, w, "pageable", sample))   # the host stages it: the thread waits
        elif not loop.non_blocking:
            main.append(Stage(H2D, memory="pinned", sample_size=sample))
        else:
            groups["copy engine"] = (Stage(H2D, memory="pinned", sample_size=sample),)
    # The check: on the GPU of a batch the copy just wrote; on the host of a batch as received,
    # whose pages it is the first to touch.
    groups["main thread"] = (*main, Stage(CONSUME, sample_size=sample) if gpu
                             else Stage(CONSUME, Producer.free, w, sample_size=sample))
    return groups


# ---------------------------------------------------------------- the sweep: points and checks


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def loops(p: Settings, device: str, sample_size: int, cores: int | None = None) -> list[Loop]:
    """The loops measured for each producer, for samples of sample_size: the grid of the switches
    (on a CPU, the loader's alone), worker counts capped at the host's cores."""
    gpu, cores = device == "cuda", cores or usable_cores()
    lists = {"workers": [min(int(w), cores) for w in p.workers], "pin_memory": p.pin_memory,
             "non_blocking": p.non_blocking, "prefetch": p.prefetch, "prefetch_factor": p.prefetch_factor,
             "persistent_workers": p.persistent_workers}
    if not gpu:
        lists.update(pin_memory=[False], non_blocking=[False], prefetch=[False])
    lists = {k: list(dict.fromkeys(v)) for k, v in lists.items()}
    out = []
    for producer in dict.fromkeys(p.producers):
        if p.grid == Grid.full:
            grid = [Loop(producer, sample_size, *combo) for combo in itertools.product(*lists.values())]
        else:
            base = Loop(producer, sample_size, **{k: v[-1] for k, v in lists.items()})
            grid = [base] + [replace(base, **{k: value}) for k, values in lists.items() for value in values
                             if value != getattr(base, k)] + [dataloader_defaults(producer, sample_size)]
        out += [loop.normal(gpu) for loop in grid]
    return list(dict.fromkeys(out))


def sample_sizes(p: Settings) -> list[int]:
    return list(dict.fromkeys(parse_size(s) for s in p.sample_sizes))


def batch_sizes(p: Settings, ctx: Context, sample: int) -> list[int]:
    """Batch bytes from min_size to max_size in x size_factor steps, whole samples each (at least
    one); without a GPU they stop at sizes.cpu_max (ctx.size_cap)."""
    lo, hi = parse_size(p.min_size), parse_size(p.max_size)
    if ctx.size_cap is not None:
        hi = max(lo, min(hi, ctx.size_cap))
    return list(dict.fromkeys(s // sample * sample for s in size_sweep(lo, hi, p.size_factor) if s >= sample))


def _free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def sample_dtype(sample_size: int) -> str:
    """A row's dtype: one sample, 'uint8[65536]'."""
    return f"uint8[{sample_size}]"


# ---------------------------------------------------------------- the producers


class NumpySamples:
    """Sample i: `size` bytes of value i % PERIOD, made with numpy (no torch thread pool in the
    worker) as a decoding dataset would."""

    def __init__(self, size: int, length: int = ENDLESS) -> None:
        self.size, self.length = size, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.full(self.size, i % PERIOD, dtype=np.uint8))


@functools.lru_cache(maxsize=1)
def free_rows(size: int) -> torch.Tensor:
    """PERIOD rows of `size` bytes, row j all j: made once in the main process, shared with the
    forked workers."""
    return torch.arange(PERIOD, dtype=torch.uint8)[:, None].expand(PERIOD, size).contiguous()


class FreeSamples:
    """Sample i: a view of row i % PERIOD of free_rows, which costs nothing to make."""

    def __init__(self, size: int, length: int = ENDLESS) -> None:
        self.rows, self.length = free_rows(size), length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.rows[i % PERIOD]


def samples(producer: Producer, size: int, length: int = ENDLESS):
    return {Producer.numpy: NumpySamples, Producer.free: FreeSamples}[Producer(producer)](size, length)


def _context():
    # Workers are forked, as Linux has always done for DataLoaders: a spawned or forkserver
    # worker imports torch anew (seconds per point). They never touch CUDA, so forking a
    # process that uses it is safe.
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def loader(dataset, batch: int | None, workers: int, prefetch_factor: int = 2, **kw):
    """A DataLoader with `workers` forked workers (batch None: each item as the dataset gives it)."""
    return torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=workers,
                      multiprocessing_context=_context() if workers else None,
                      prefetch_factor=prefetch_factor if workers else None, **kw)


# ---------------------------------------------------------------- the loop's stages, timed as it runs them


class LoaderBatch:
    """A batch as the loop's DataLoader hands it on: the collated tensor and the seconds its
    stages have spent on it so far, each in the process or thread that ran it. The DataLoader
    pins it through its pin_memory method (timed there, on the pin thread or the main thread);
    the process that receives it from a worker times rebuilding it (the hand-off)."""

    def __init__(self, data: torch.Tensor, spent: dict[str, float]) -> None:
        self.data, self.spent = data, spent

    def pin_memory(self, device=None) -> "LoaderBatch":
        start = time.perf_counter()
        data = self.data.pin_memory()
        self.data = None   # the received batch released here, as the loader's pin step releases it (its segment unmapped)
        return LoaderBatch(data, {**self.spent, "pin": time.perf_counter() - start})

    def __reduce__(self):
        return _received, (_Now(), self.data, self.spent)


class _Now:
    """Unpickles as the receiver's clock at the moment unpickling reaches it: before the batch's
    tensor, whose shared memory the receiver then maps."""

    def __reduce__(self):
        return time.perf_counter, ()


def _received(start: float, data: torch.Tensor, spent: dict[str, float]) -> LoaderBatch:
    return LoaderBatch(data, {**spent, "handoff": time.perf_counter() - start})


class TimedSamples:
    """The loop's dataset and collate_fn around a producer: a worker (forked, with its own copy)
    adds up the seconds its dataset calls take, and its collate hands them on with the batch."""

    def __init__(self, dataset) -> None:
        self.dataset, self.making = dataset, 0.0

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> torch.Tensor:
        start = time.perf_counter()
        sample = self.dataset[i]
        self.making += time.perf_counter() - start
        return sample

    def collate(self, samples: list) -> LoaderBatch:
        start = time.perf_counter()
        batch = torch.utils.data.default_collate(samples)
        spent = {"make": self.making, "collate": time.perf_counter() - start}
        self.making = 0.0
        return LoaderBatch(batch, spent)


class SpentMarks:
    """A loop's marks that also read what its stages spent between two of them: a trial's parts
    (timing.measure_stream), seconds by stage name."""

    def __init__(self, marks, spent: dict[str, float]) -> None:
        self.marks, self.spent = marks, spent

    def mark(self) -> tuple:
        return self.marks.mark(), dict(self.spent)

    def seconds(self, start: tuple, end: tuple) -> float:
        return self.marks.seconds(start[0], end[0])

    def parts(self, start: tuple, end: tuple) -> dict[str, float]:
        return {k: v - start[1].get(k, 0.0) for k, v in end[1].items()}


# ---------------------------------------------------------------- the loop


class Check:
    """The data check: each batch against the samples it must hold, from sample index `first`.
    On a GPU every byte (at HBM speed it costs little beside the copy); on the host each
    sample's first and last byte (a full pass would halve what the loader alone shows)."""

    def __init__(self, batch: int, device: torch.device) -> None:
        self.batch, self.gpu = batch, device.type == "cuda"
        self.expected = (torch.arange(batch + PERIOD) % PERIOD).to(torch.uint8).to(device)
        self.errors = torch.zeros((), dtype=torch.int64, device=device)
        self.checked = 0     # batches checked
        self.short = 0       # batches with fewer samples than asked for

    def __call__(self, batch: torch.Tensor, first: int) -> None:
        start = first % PERIOD
        want = self.expected[start:start + len(batch)]
        if self.gpu:
            self.errors += batch.ne(want[:, None]).sum()
        else:
            self.errors += (batch[:, 0] != want).sum() + (batch[:, -1] != want).sum()
        self.short += len(batch) != self.batch
        self.checked += 1

    def passed(self) -> bool:
        """Every batch checked held the samples it should, and some were checked."""
        if self.gpu:
            torch.cuda.synchronize(self.errors.device)
        return self.checked > 0 and self.short == 0 and int(self.errors) == 0


class Feed:
    """The loop: batches from a DataLoader over the loop's producer, moved to `device` as the
    loop says and checked as they are consumed; calling it with n consumes n batches. With
    epoch_batches the loader is iterated anew at each epoch's end, as `for epoch in ...: for
    batch in loader` does."""

    def __init__(self, batch: int, sample: int, loop: Loop, device: torch.device, epoch_batches: int = 0) -> None:
        self.loop, self.device = loop, device
        self.gpu = device.type == "cuda"
        w = loop.workers
        timed = TimedSamples(samples(loop.producer, sample, epoch_batches * batch or ENDLESS))
        self.loader = loader(timed, batch, w, collate_fn=timed.collate,
                             pin_memory=loop.pin_memory and self.gpu, prefetch_factor=loop.prefetch_factor,
                             persistent_workers=loop.persistent_workers and w > 0)
        # Seconds each stage spent on the batches pulled so far, as the loop ran it: make and
        # collate summed over the workers; h2d only where the main thread waits through the copy;
        # consume the rest of the main thread's step (launching the copy and the check, the check
        # itself on the host, releasing the batch).
        self.spent: dict[str, float] = defaultdict(float)
        self.elsewhere = 0.0   # seconds of the main thread's steps spent in the loader or in a copy it waits for
        self.batches = iter(self.loader)
        self.next_sample = 0         # the first sample of the next batch the loader gives, in its epoch
        self.check = Check(batch, device)
        self.stream = torch.cuda.Stream(device) if self.gpu and loop.prefetch else None
        self.ahead: tuple[torch.Tensor, int] | None = None

    @property
    def queued(self) -> int:
        """Batches the workers make before the loop asks: the warm-up drains them."""
        return self.loop.queued

    @property
    def consumed(self) -> int:
        return self.check.checked

    def __call__(self, n: int) -> None:
        for _ in range(n):
            start, before = time.perf_counter(), self.elsewhere
            batch, first = self._next()
            self.check(batch, first)
            batch = None   # released inside the step that last used it, as every stage here releases its input
            self.spent["consume"] += time.perf_counter() - start - (self.elsewhere - before)

    def _pull(self) -> tuple[LoaderBatch, int]:
        start = time.perf_counter()
        try:
            got = next(self.batches)
        except StopIteration:   # an epoch's end
            self.batches = iter(self.loader)
            self.next_sample = 0
            got = next(self.batches)
        spent, took = got.spent, time.perf_counter() - start
        self.elsewhere += took
        if not self.loop.workers:   # all in this thread: what next() took beyond the stages is the loader's own
            spent = {**spent, "handoff": took - sum(spent.values())}
        for stage, seconds in spent.items():
            self.spent[stage] += seconds
        first, self.next_sample = self.next_sample, self.next_sample + len(got.data)
        return got, first

    def _move(self, got: LoaderBatch) -> torch.Tensor:
        """The batch where the loop consumes it; on a GPU the host's batch released after its copy
        (a pinned block goes back to the cache once the copy is done; a worker's segment is unmapped)."""
        if not self.gpu:
            return got.data
        start = time.perf_counter()
        moved = got.data.to(self.device, non_blocking=self.loop.non_blocking)
        got.data = None
        if not (self.loop.pin_memory and self.loop.non_blocking):   # else the copy engine's, not this thread's
            took = time.perf_counter() - start
            self.spent["h2d"] += took
            self.elsewhere += took
        return moved

    def _next(self) -> tuple[torch.Tensor, int]:
        if self.stream is None:
            got, first = self._pull()
            return self._move(got), first
        if self.ahead is None:
            self.ahead = self._load_ahead()
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        (batch, first), self.ahead = self.ahead, None
        batch.record_stream(current)     # made on the side stream, freed after use on this one
        self.ahead = self._load_ahead()  # the next copy runs while this batch is consumed
        return batch, first

    def _load_ahead(self) -> tuple[torch.Tensor, int]:
        got, first = self._pull()
        with torch.cuda.stream(self.stream):
            return self._move(got), first

    def correct(self) -> bool:
        return self.check.passed()

    def close(self) -> None:
        """Stop the workers now, not whenever the iterator is collected."""
        self.ahead = self.batches = self.loader = None


def stream_timing(ctx: Context, p: Settings) -> timing.TimingConfig:
    return replace(ctx.timing, min_trial_s=max(ctx.timing.min_trial_s, p.min_trial_s))


def loop_stream(feed: Feed, ctx: Context, p: Settings) -> list[Trial]:
    """The loop's trials: a warm-up that drains what the workers queued, trials of at least
    twice that, whole epochs each when there are epochs."""
    marks = SpentMarks(EventMarks() if feed.gpu else HostMarks(), feed.spent)
    return timing.measure_stream(feed, marks, stream_timing(ctx, p), warmup=feed.queued + 1,
                                 min_ops=max(MIN_BATCHES, 2 * feed.queued), multiple=p.epoch_batches or 1)


def disagreement(trials: list[Trial]) -> str:
    """A note when the trials of one point differ by more than DISAGREE of their median."""
    per = sorted(t.per_op_s for t in trials)
    mid = float(np.median(per))
    if len(per) < 2 or mid <= 0 or (per[-1] - per[0]) <= DISAGREE * mid:
        return ""
    return f"trials disagree: {per[0] / mid:.2f}x to {per[-1] / mid:.2f}x their median time"


def _rows(point: Point, trials: list[Trial], verified: bool, failure: str) -> list[Sample]:
    return trial_rows(point, trials, point.size_bytes, 1.0, verified, disagreement(trials) if verified else failure)


def _spent_rows(point: Point, trials: list[Trial], verified: bool) -> list[Sample]:
    """A loop's stages as it ran them, a row per trial and stage (part = the stage's name): time_s
    the seconds a batch cost that stage, divided among the workers that run it at once (make,
    collate), so that its GB/s is what the stage sustains in this loop."""
    workers = point.params.workers
    rows = []
    for i, t in enumerate(trials):
        for stage, seconds in t.parts.items():
            per = max(seconds, 0.0) / t.iters / (workers if workers and stage in WORKER_STAGES else 1)
            gbps = point.size_bytes / per / 1e9 if verified and per > 0 else float("nan")
            rows.append(point.sample(trial=i, iters=t.iters, part=stage, time_s=per, algbw_gbps=gbps,
                                     busbw_gbps=gbps, verified=verified, status="ok" if verified else "failed"))
    return rows


def _device(ctx: Context) -> torch.device:
    return torch.device("cuda", ctx.local_rank) if ctx.device == "cuda" else torch.device("cpu")


def _loop_point(point: Point, p: Settings, ctx: Context) -> list[Sample]:
    sample = point.params.sample_size
    feed = Feed(point.size_bytes // sample, sample, point.params, _device(ctx), p.epoch_batches)
    try:
        trials = loop_stream(feed, ctx, p)
        verified = feed.correct()
    finally:
        feed.close()
    whole = [replace(t, parts={}) for t in trials]
    return (_rows(point, whole, verified, "data check failed: a batch differs from the samples it should hold")
            + _spent_rows(point, trials, verified))


# ---------------------------------------------------------------- stages alone


class MakeBatch:
    """The fetcher's part of a batch: each of its samples from the dataset, one call each, as
    the loader asks for them; a call makes the next batch's and returns the seconds it took."""

    def __init__(self, dataset, batch: int) -> None:
        self.dataset, self.batch, self.next = dataset, batch, 0

    def samples(self) -> list:
        first, self.next = self.next, self.next + self.batch
        return [self.dataset[i] for i in range(first, first + self.batch)]

    def __call__(self) -> float:
        start = time.perf_counter()
        self.samples()
        return time.perf_counter() - start


class CollateBatch:
    """default_collate of each next batch's samples as the producer makes them (untimed), and
    freeing what it made: in a worker a new shared-memory segment each time, as the loader's
    is; in the main process host memory. A call returns the seconds collating took."""

    def __init__(self, dataset, batch: int) -> None:
        self.make = MakeBatch(dataset, batch)

    def __call__(self) -> float:
        samples = self.make.samples()
        start = time.perf_counter()
        batch = torch.utils.data.default_collate(samples)
        del batch
        return time.perf_counter() - start


class StageItems:
    """Item j: a stage's operation (which returns the seconds of its timed part) run until those
    add up to ITEM_S, in the process that serves it (a DataLoader worker, or the main process
    without workers): [seconds, runs, worker]."""

    def __init__(self, make_op: Callable[[], Callable[[], float]]) -> None:
        self.make_op, self.op = make_op, None

    def __len__(self) -> int:
        return ENDLESS

    def __getitem__(self, j: int) -> torch.Tensor:
        if self.op is None:
            self.op = self.make_op()   # in the process that runs it
        runs, busy = 0, 0.0
        while busy < ITEM_S:
            busy += self.op()
            runs += 1
        info = torch.utils.data.get_worker_info()
        return torch.tensor([busy, runs, info.id if info else 0], dtype=torch.float64)


class WorkerBusy:
    """Marks of several processes' busy seconds at once. A segment's seconds are those in which
    the processes, each at the rate its own busy time shows, would run the segment's operations
    together: the sum of their rates, an upper bound on what they deliver at once."""

    def __init__(self) -> None:
        self.busy: dict[int, float] = defaultdict(float)
        self.runs: dict[int, int] = defaultdict(int)

    def add(self, worker: int, seconds: float, runs: int) -> None:
        self.busy[worker] += seconds
        self.runs[worker] += runs

    def mark(self) -> tuple[dict, dict]:
        return dict(self.busy), dict(self.runs)

    def count(self, start: tuple[dict, dict], end: tuple[dict, dict]) -> int:
        return sum(n - start[1].get(w, 0) for w, n in end[1].items())

    def seconds(self, start: tuple[dict, dict], end: tuple[dict, dict]) -> float:
        done = {w: n - start[1].get(w, 0) for w, n in end[1].items()}
        rate = sum(d / (end[0][w] - start[0].get(w, 0.0)) for w, d in done.items() if d)
        return sum(done.values()) / rate if rate else 0.0


def _worker_stage(point: Point, st: Stage, p: Settings, ctx: Context) -> list[Sample]:
    """make or collate: st.workers DataLoader workers at once (none: the main process), each
    running the stage back to back and timing only that."""
    sample = point.params.sample_size
    batch = point.size_bytes // sample
    dataset = samples(st.producer, sample)
    check = Check(batch, torch.device("cpu"))   # the samples the stage makes or collates, once
    check(torch.utils.data.default_collate(MakeBatch(dataset, batch).samples()), 0)
    op = MakeBatch if st.op == MAKE else CollateBatch
    processes = max(st.workers, 1)
    items = iter(loader(StageItems(functools.partial(op, dataset, batch)), None, st.workers))
    marks = WorkerBusy()

    def step(n: int) -> None:
        for _ in range(n):
            busy, runs, worker = next(items).tolist()
            marks.add(int(worker), busy, int(runs))

    try:
        trials = timing.measure_stream(step, marks, stream_timing(ctx, p), warmup=2 * processes,
                                       min_ops=processes, multiple=processes)
    finally:
        items = None
    return _rows(point, trials, check.passed(), "data check failed: a sample differs from what it should hold")


class FreshBatches:
    """Item j: a new shared-memory tensor of `size` bytes, allocated as default_collate does in
    a worker but never written: what the hand-off alone carries. Without workers, one tensor
    made once: what remains is the loader's own work a batch in the main process."""

    def __init__(self, size: int, workers: int) -> None:
        self.size = size
        self.made = None if workers else torch.empty(size, dtype=torch.uint8)

    def __len__(self) -> int:
        return ENDLESS

    def __getitem__(self, j: int) -> torch.Tensor:
        if self.made is not None:
            return self.made
        elem = torch.empty(0, dtype=torch.uint8)
        storage = elem._typed_storage()._new_shared(self.size, device=elem.device)
        return elem.new(storage).resize_(self.size)


def _handoff(point: Point, st: Stage, p: Settings, ctx: Context) -> list[Sample]:
    """Batches through the DataLoader from st.workers workers, each a new segment no one writes
    or reads: the loader's machinery alone, by the main process's clock."""
    batches = iter(loader(FreshBatches(point.size_bytes, st.workers), None, st.workers))
    sizes = []

    def step(n: int) -> None:
        for _ in range(n):
            sizes.append(next(batches).numel())

    try:
        trials = timing.measure_stream(step, HostMarks(), stream_timing(ctx, p), warmup=2 * st.workers + 1,
                                       min_ops=max(MIN_BATCHES, 4 * st.workers))
    finally:
        batches = None
    verified = bool(sizes) and set(sizes) == {point.size_bytes}
    return _rows(point, trials, verified, "hand-off failed: a batch arrived with the wrong size")


def _received_stage(point: Point, st: Stage, p: Settings, ctx: Context) -> list[Sample]:
    """pin, a pageable h2d copy, or (without a GPU) the check: of each batch as the main process
    receives it from st.workers workers of a DataLoader over the free producer (none: collated
    in the main process), the batch freed right after as the loop frees it; timed around that
    alone."""
    sample = point.params.sample_size
    batch = point.size_bytes // sample
    device = _device(ctx)
    batches = iter(loader(samples(Producer.free, sample), batch, st.workers))
    check = Check(batch, device if st.op == H2D else torch.device("cpu"))
    marks, first = BusyMarks(), [0]

    def stage(received: torch.Tensor) -> torch.Tensor | None:
        """The stage on one batch; what it made, to check after the clock stops (the check itself: None)."""
        if st.op == PIN:
            return received.pin_memory()
        if st.op == H2D:
            out = received.to(device)
            torch.cuda.synchronize(device)
            return out
        check(received, first[0])
        return None

    def step(n: int) -> None:
        for _ in range(n):
            received = next(batches)
            size = len(received)
            if st.op == H2D:
                torch.cuda.synchronize(device)   # the last check is not this copy's time
            start = time.perf_counter()
            out = stage(received)
            received = None                      # freed here, as the loop frees it
            marks.add(time.perf_counter() - start)
            if out is not None:
                check(out, first[0])
            first[0] += size

    # Behind workers the DataLoader pins on its pin thread, which runs one intra-op thread
    # (torch.utils.data._utils.pin_memory): so does this pin. A pin of all the host's threads
    # from a fresh shared-memory batch, beside busy workers, runs at a fraction of that.
    threads = torch.get_num_threads()
    if st.op == PIN and st.workers > 0:
        torch.set_num_threads(1)
    try:
        trials = timing.measure_stream(step, marks, stream_timing(ctx, p), warmup=2 * st.workers + 1,
                                       min_ops=max(MIN_BATCHES, 4 * st.workers))
    finally:
        batches = None
        torch.set_num_threads(threads)
    return _rows(point, trials, check.passed(), "data check failed: a batch differs from the samples it should hold")


def _link(point: Point, p: Settings, ctx: Context) -> list[Sample]:
    """Pinned host-to-device copies of one batch's size, back to back: the link's figure."""
    device = _device(ctx)
    dst = torch.zeros(point.size_bytes, dtype=torch.uint8, device=device)
    src = torch.empty(point.size_bytes, dtype=torch.uint8, pin_memory=True).copy_(
        torch.randint(0, 256, (point.size_bytes,), dtype=torch.uint8, device=device))

    def step(n: int) -> None:
        for _ in range(n):
            dst.copy_(src, non_blocking=True)

    trials = timing.measure_stream(step, EventMarks(), stream_timing(ctx, p))
    torch.cuda.synchronize(device)
    return _rows(point, trials, same_data(dst, src), "data check failed: destination differs from source")


def _consume(point: Point, p: Settings, ctx: Context) -> list[Sample]:
    """The data check on the GPU of a batch already there, back to back."""
    sample = point.params.sample_size
    batch = point.size_bytes // sample
    device = _device(ctx)
    resident = torch.utils.data.default_collate(MakeBatch(FreeSamples(sample), batch).samples()).to(device)
    check = Check(batch, device)

    def step(n: int) -> None:
        for _ in range(n):
            check(resident, 0)

    trials = timing.measure_stream(step, EventMarks(), stream_timing(ctx, p))
    return _rows(point, trials, check.passed(), "data check failed: the resident batch reads wrong")


def _measure(point: Point, p: Settings, ctx: Context) -> list[Sample]:
    st = point.params
    if isinstance(st, Loop):
        return _loop_point(point, p, ctx)
    if st.op in (MAKE, COLLATE):
        return _worker_stage(point, st, p, ctx)
    if st.op == HANDOFF:
        return _handoff(point, st, p, ctx)
    if st.op == CONSUME and st.workers < 0:
        return _consume(point, p, ctx)
    if st.op == H2D and st.memory == "pinned":
        return _link(point, p, ctx)
    return _received_stage(point, st, p, ctx)


# ---------------------------------------------------------------- the tables of a run's rows


_ROW = ["op", "memory", "mode", "backend", "dtype", "params", "size_bytes"]


def _runs(rows: pd.DataFrame) -> list[str]:
    return [k for k in ("instance", "run_id") if k in rows.columns and rows[k].nunique() > 1]


def _medians(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Median GB/s and seconds per batch of every measured pipeline point, and the columns that
    tell runs apart."""
    rows = frame[(frame["suite"] == Pipeline.name) & (frame["status"] == "ok") & (frame["part"] == "total")
                 & (frame["params"] != "")]   # runs from before the points carried params: no descriptors
    runs = _runs(rows)
    if rows.empty:
        return pd.DataFrame(), runs
    med = rows.groupby(runs + _ROW, sort=False).agg(gbps=("algbw_gbps", "median"), time_s=("time_s", "median"))
    med = med.reset_index()
    med["what"] = [descriptor(d) for d in params(med)]
    return med, runs


def stage_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per stage point: GB/s alone (medians of trials)."""
    med, runs = _medians(frame)
    if med.empty:
        return pd.DataFrame()
    out = med[med["op"].isin(STAGES)].copy()
    if out.empty:
        return pd.DataFrame()
    named = list(out["what"])
    out["stage"] = [st.name for st in named]
    out["producer"] = [st.producer.value if st.producer else "" for st in named]
    out["workers"] = [st.workers for st in named]     # -1: none involved
    out["sample"] = [format_size(st.sample_size) for st in named]
    out = out.sort_values(runs + ["dtype", "size_bytes"], kind="stable")
    out["size"] = out["size_bytes"].map(format_size)
    cols = ["stage", "memory", "mode", "producer", "workers", "sample", "size", "size_bytes", "gbps"]
    return out[runs + cols].reset_index(drop=True)


def attribute(loop: Loop, gpu: bool, rate: Callable[[Stage], float | None]) -> dict | None:
    """The group of stages that limits a loop (the lowest rate of its stages one after another),
    and its slowest stage; None where a stage it needs was not measured."""
    best = None
    for who, group in stages_of(loop, gpu).items():
        rates = [rate(st) for st in group]
        if any(r is None or not r > 0 for r in rates):
            return None
        bound = 1 / sum(1 / r for r in rates)
        slowest = min(range(len(group)), key=lambda i: rates[i])
        if best is None or bound < best["bound_gbps"]:
            best = {"bottleneck": group[slowest].label, "on": who, "stage_gbps": rates[slowest], "bound_gbps": bound,
                    "stage": group[slowest]}
    return best


def _spent(frame: pd.DataFrame, runs: list[str]) -> dict[tuple, float]:
    """GB/s of each stage as the loops ran it (their rows of part = a stage's name), medians of
    trials: {(run keys, size_bytes, params text, stage name): GB/s}."""
    rows = frame[(frame["suite"] == Pipeline.name) & (frame["status"] == "ok") & frame["part"].isin(STAGE_NAMES)]
    if rows.empty:
        return {}
    med = rows.groupby(runs + ["size_bytes", "params", "part"], sort=False)["algbw_gbps"].median()
    return {key: gbps for key, gbps in med.items() if gbps > 0}


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per loop and batch size: samples/s and GB/s delivered; the bottleneck (the group
    of stages that limits it, `on`, and that group's slowest stage), that stage's GB/s in the loop
    and alone and the fraction of it the loop reaches, the group's bound (its stages one after
    another) and the fraction of that; the link (pinned h2d of that size) and the fraction of it.

    A stage's GB/s is the loop's own reading of it where the loop timed it (the host's stages,
    read in the same trials, so host speed that drifts between points moves loop and bound
    together), else the stage alone (the copy engine's and the GPU's, and runs from before loops
    timed their stages)."""
    med, runs = _medians(frame)
    if med.empty:
        return pd.DataFrame()
    is_stage = med["op"].isin(STAGES)
    loops_ = med[~is_stage].copy()
    if loops_.empty:
        return pd.DataFrame()
    rates: dict[tuple, float] = {}
    for row in med[is_stage].itertuples(index=False):
        key = tuple(getattr(row, k) for k in runs) + (row.size_bytes,)
        rates[key + (row.what,)] = row.gbps
    spent = _spent(frame, runs)
    found = []
    for row in loops_.itertuples(index=False):
        key = tuple(getattr(row, k) for k in runs) + (row.size_bytes,)
        loop = row.what

        def rate(st: Stage) -> float | None:
            return spent.get(key + (row.params, st.name)) or rates.get(key + (st,))

        att = attribute(loop, row.backend == "cuda", rate) or {}
        alone = rates.get(key + (att["stage"],)) if att else None
        link = rates.get(key + (Stage(H2D, memory="pinned", sample_size=loop.sample_size),))
        found.append({**{k: v for k, v in att.items() if k != "stage"}, "alone_gbps": alone,
                      "producer": loop.producer.value, "link_gbps": link})
    loops_ = pd.concat([loops_.reset_index(drop=True), pd.DataFrame(found)], axis=1)
    for col in ("bottleneck", "on", "stage_gbps", "alone_gbps", "bound_gbps", "link_gbps"):
        if col not in loops_:
            loops_[col] = np.nan
    sample = loops_["what"].map(lambda loop: loop.sample_size)
    loops_["sample"] = sample.map(format_size)
    loops_["batch"] = loops_["size_bytes"] // sample
    loops_["samples_per_s"] = (loops_["batch"] / loops_["time_s"]).round(0).astype("int64")
    for col in ("stage_gbps", "alone_gbps", "bound_gbps", "link_gbps"):
        loops_[col] = loops_[col].astype(float)
    loops_["of_stage"] = loops_["gbps"] / loops_["stage_gbps"]
    loops_["of_bound"] = loops_["gbps"] / loops_["bound_gbps"]
    loops_["of_link"] = loops_["gbps"] / loops_["link_gbps"]
    loops_ = loops_.sort_values(runs + ["producer", "dtype", "memory", "mode", "size_bytes"], kind="stable")
    loops_["size"] = loops_["size_bytes"].map(format_size)
    cols = runs + ["op", "memory", "mode", "producer", "sample", "size", "size_bytes", "batch", "samples_per_s", "gbps",
                   "bottleneck", "on", "stage_gbps", "of_stage", "alone_gbps", "bound_gbps", "of_bound", "link_gbps",
                   "of_link"]
    return loops_[cols].dropna(axis="columns", how="all").reset_index(drop=True)   # no link without a GPU


def advice(frame: pd.DataFrame) -> pd.DataFrame:
    """Per run, producer, sample and batch size: the best loop measured, its GB/s against the
    DataLoader's defaults', and what limits it: the link (pinned copies at the copy engine's
    pace) or the host (the stage named)."""
    loops_ = table(frame)
    if loops_.empty:
        return pd.DataFrame()
    runs = _runs(frame[frame["suite"] == Pipeline.name])
    out = []
    for key, g in loops_.groupby(runs + ["sample", "size_bytes"], sort=False):
        for producer, h in g.groupby("producer", sort=False):
            best = h.loc[h["gbps"].idxmax()]
            default_mode = dataloader_defaults(Producer(producer), 0).mode(
                "cuda" if best["op"] == LOOP_OP else "cpu")
            default = h[(h["mode"] == default_mode) & (h["memory"] == "pageable")]["gbps"]
            link = best.get("bottleneck") == Stage(H2D, memory="pinned").label   # the pinned copy itself
            out.append({**dict(zip(runs, key[:len(runs)])), "producer": producer, "sample": key[-2],
                        "size": best["size"], "size_bytes": key[-1], "best": f"{best['memory']} {best['mode']}",
                        "gbps": best["gbps"], "defaults_gbps": default.iloc[0] if len(default) else np.nan,
                        "limit": "link" if link else "host", "bottleneck": best.get("bottleneck", np.nan),
                        "on": best.get("on", np.nan), "stage_gbps": best.get("stage_gbps", np.nan),
                        "alone_gbps": best.get("alone_gbps", np.nan),
                        "bound_gbps": best.get("bound_gbps", np.nan), "of_bound": best.get("of_bound", np.nan),
                        "of_link": best.get("of_link", np.nan)})
    adv = pd.DataFrame(out)
    adv["gain"] = (adv["gbps"] / adv["defaults_gbps"].where(adv["defaults_gbps"] > 0)).round(2)
    return adv


def advice_lines(adv: pd.DataFrame) -> list[str]:
    """advice() as sentences, one per batch size and producer."""
    lines = []
    for row in adv.to_dict("records"):
        text = (f"{row['size']} batches of {row['sample']} {row['producer']} samples: best {row['best']}, "
                f"{row['gbps']:.2f} GB/s")
        if pd.notna(row["defaults_gbps"]):
            text += f", {row['gain']:.2f}x the DataLoader's defaults ({row['defaults_gbps']:.2f})"
        if pd.notna(row["bottleneck"]):
            alone = f", {row['alone_gbps']:.2f} alone" if pd.notna(row.get("alone_gbps")) else ""
            text += (f"; the {row['limit']} limits it: {row['bottleneck']} on the {row['on']}, "
                     f"{row['stage_gbps']:.2f} GB/s in the loop{alone}; {row['bound_gbps']:.2f} with what the "
                     f"{row['on']} run{'s' if row['on'] in ('main thread', 'pin thread', 'copy engine') else ''} "
                     f"beside it (the loop reaches {row['of_bound']:.0%} of that)")
        if pd.notna(row.get("of_link")):
            text += f"; {row['of_link']:.0%} of the link"
        lines.append(text)
    return lines


DIGITS = {"gbps": 2, "stage_gbps": 2, "of_stage": 3, "alone_gbps": 2, "bound_gbps": 2, "of_bound": 3, "link_gbps": 1, "of_link": 3}


def pipeline_figure(frame: pd.DataFrame, canvas) -> list:
    """The pipeline suite, a column per producer and sample size: above, GB/s each loop delivers
    against the batch size (dashed black: the link; dotted grey: the bound of the best loop);
    below, each stage alone (solid: the most workers measured, dashed: none, dotted: between),
    the link and the best loop in black."""
    # figures load matplotlib: imported when one is drawn, not by a measuring run
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.lines import Line2D

    from bench.analysis.figures.bars import per_series
    from bench.analysis.figures.style import log_y_axis, size_axis

    SERIES = canvas.SERIES
    loops = per_series(frame, table)
    if loops.empty:
        return []
    stages = per_series(frame, stage_table)
    loops = loops.assign(producer=loops["mode"].str.split().str[0],
                         setting=(loops["memory"] + " " + loops["mode"].str.split(n=1).str[1].fillna("")).str.strip())
    columns = sorted(set(zip(loops["producer"], loops["sample"])))
    series = sorted(loops[SERIES].unique())
    settings = sorted(loops["setting"].unique())
    line_colours = dict(zip(settings, sns.color_palette("tab10", len(settings))))
    stage_colours = dict(zip(STAGE_NAMES, sns.color_palette("Dark2", len(STAGE_NAMES))))
    fig, axes = plt.subplots(2 * len(series), len(columns), squeeze=False, layout="constrained",
                             figsize=(5.2 * len(columns) + 0.4, 3.4 * 2 * len(series) + 1.6))
    sizes = loops["size_bytes"].unique()
    for r, run in enumerate(series):
        for c, (producer, sample) in enumerate(columns):
            top, bottom = axes[2 * r][c], axes[2 * r + 1][c]
            d = loops[(loops[SERIES] == run) & (loops["producer"] == producer) & (loops["sample"] == sample)]
            for setting, g in d.groupby("setting"):
                g = g.sort_values("size_bytes")
                top.plot(g["size_bytes"], g["gbps"], color=line_colours[setting], marker="o", markersize=3)
            best = d.loc[d.groupby("size_bytes")["gbps"].idxmax()].sort_values("size_bytes")
            if "bound_gbps" in best:
                top.plot(best["size_bytes"], best["bound_gbps"], color="grey", linestyle=":", linewidth=1.2)
            if "link_gbps" in d:
                link = d.groupby("size_bytes")["link_gbps"].first().dropna()
                top.plot(link.index, link.values, color="black", linestyle="--", linewidth=1.2)
            top.set_title(f"{run} · {producer} samples of {sample}", fontsize=10)
            top.set_ylabel("GB/s the loop delivers", fontsize=9)
            s = stages[(stages[SERIES] == run) & (stages["sample"] == sample)] if not stages.empty else stages
            if not s.empty:
                s = s[~s["stage"].isin(WORKER_STAGES) | (s["producer"] == producer)]
                most = s["workers"].max()
                for (stage, memory, w), g in s.groupby(["stage", "memory", "workers"]):
                    g = g.sort_values("size_bytes")
                    if stage == "h2d" and memory == "pinned":   # the link, as above
                        bottom.plot(g["size_bytes"], g["gbps"], color="black", linestyle="--", linewidth=1.2)
                        continue
                    style = "-" if w in (-1, most) else "--" if w == 0 else ":"
                    bottom.plot(g["size_bytes"], g["gbps"], color=stage_colours[stage], linestyle=style, marker="o",
                                markersize=2.5, linewidth=1.3)
            bottom.plot(best["size_bytes"], best["gbps"], color="black", linewidth=2)
            bottom.set_ylabel("GB/s of each stage alone", fontsize=9)
            for ax in (top, bottom):
                values = np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()])
                values = values[values > 0]
                size_axis(ax, sizes)
                log_y_axis(ax, values.max() / values.min() if len(values) else 10)
                ax.grid(True, which="major", alpha=0.35)
                ax.set_xlabel("Batch size", fontsize=9)
    handles = [Line2D([], [], color=col, linewidth=2, label=name) for name, col in line_colours.items()]
    handles.append(Line2D([], [], color="grey", linestyle=":", label="bound of the best loop (its slowest stages)"))
    if "link_gbps" in loops:
        handles.append(Line2D([], [], color="black", linestyle="--", label="pinned h2d copy (the link)"))
    handles.append(Line2D([], [], color="black", linewidth=2, label="below: the best loop"))
    drawn = set()   # stages drawn in colour: the pinned copy is the link's black
    if not stages.empty:
        drawn = set(stages["stage"][(stages["stage"] != "h2d") | (stages["memory"] == "pageable")])
    handles += [Line2D([], [], color=col, linewidth=2, label=f"stage: {name}" + (" pageable" if name == "h2d" else ""))
                for name, col in stage_colours.items() if name in drawn]
    handles += [Line2D([], [], color="grey", linestyle=style, label=f"stage with {what}")
                for style, what in (("-", "the most workers"), ("--", "no workers"), (":", "other worker counts"))]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False, fontsize=8)
    fig.suptitle("Input pipeline: what a DataLoader-fed loop delivers, and each of its stages alone", fontsize=11)
    return canvas.save(fig, "pipeline", "Input pipeline: what each loop delivers against the batch size, and each "
                       "stage alone.")


def _check(p: Settings, ctx: Context) -> None:
    gpu = ctx.device == "cuda"
    sizes = [b for s in sample_sizes(p) for b in batch_sizes(p, ctx, s)]
    if not sizes:
        raise ConfigError(f"pipeline.sample_sizes: no batch size holds a whole sample (batch sizes up to "
                          f"{format_bytes(parse_size(p.max_size))}); lower the sample size or raise pipeline.max_size")
    if not ctx.here:
        return
    big = max(sizes)
    ahead = max(lp.queued for s in sample_sizes(p) for lp in loops(p, ctx.device, s))
    shm, shared = _free_bytes("/dev/shm"), ahead * big
    if shared and shm is not None and shared > shm:
        raise ConfigError(f"pipeline.max_size: the workers pass up to {format_bytes(shared)} of batches "
                          f"through /dev/shm, which has {format_bytes(shm)} free; lower pipeline.max_size or "
                          "pipeline.workers, or enlarge /dev/shm (docker run --shm-size)")
    # Batches queued, being pinned and in the loop, each made once then collated; the free
    # producer's rows; the link's pinned buffer.
    need = 2 * (ahead + 2) * big + PERIOD * max(sample_sizes(p)) + big
    available = host_available_bytes()
    if available is not None and need > available:
        raise ConfigError(f"pipeline.max_size: the pipeline needs about {format_bytes(need)} of host memory but "
                          f"only {format_bytes(available)} is available; lower pipeline.max_size or pipeline.workers")
    if gpu:
        free = gpu_free_bytes(0)
        if 6 * big > free:   # the link's buffer, batches in flight, the check's temporaries
            raise ConfigError(f"pipeline.max_size: the pipeline needs about {format_bytes(6 * big)} on cuda:0 but "
                              f"only {format_bytes(free)} is free; lower pipeline.max_size")


def sweep(p: Settings, ctx: Context) -> list[Point]:
    """Per sample size and batch size: the stages any loop needs, then the loops."""
    gpu = ctx.device == "cuda"
    device_side = (H2D, CONSUME) if gpu else ()
    out = []
    for sample in sample_sizes(p):
        dtype = sample_dtype(sample)
        measured = loops(p, ctx.device, sample)
        needed = dict.fromkeys(st for lp in measured for group in stages_of(lp, gpu).values() for st in group)
        order = sorted(needed, key=lambda st: (STAGES.index(st.op), st.memory, str(st.producer), st.workers))
        for size in batch_sizes(p, ctx, sample):
            out += [Point(Pipeline.name, st.op, size, memory=st.memory, mode=st.mode(), backend=ctx.device,
                          src="host", dst="cuda:0" if st.op in device_side else "host", dtype=dtype, params=st)
                    for st in order]
            out += [Point(Pipeline.name, LOOP_OP if gpu else "loader", size, memory=lp.memory if gpu else "pageable",
                          mode=lp.mode(ctx.device), backend=ctx.device, src="host",
                          dst="cuda:0" if gpu else "host", dtype=dtype, params=lp) for lp in measured]
    return out


class Pipeline(Suite):
    name = "pipeline"
    title = "Input pipeline"
    Settings = Settings
    groups = ("training",)
    curves = False          # its own figures say what its rows mean
    order = 50
    # Between-run sigma of log time, the noisiest op's: 4 default runs on nvidia-h200
    # (results/noise/pipeline-h200-x1, docs/training.md). A point's trials agree far better: what
    # moves is the host's state from one run to the next.
    noise = {("gpu", "bandwidth"): 0.185, ("gpu", "latency"): 0.224}

    def check(self, p: Settings, ctx: Context) -> str | None:
        _check(p, ctx)
        return None

    def points(self, p: Settings, ctx: Context) -> list[Point]:
        return sweep(p, ctx)

    def measure(self, point: Point, p: Settings, ctx: Context, state) -> list[Sample]:
        return _measure(point, p, ctx)

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame | str]]:
        rows = table(frame)
        if rows.empty:
            return []
        out = [("pipeline loops: GB/s delivered; the group of stages that bounds each, and the fraction of that "
                "bound reached", rows.drop(columns="size_bytes").round(DIGITS).fillna(""))]
        stages = stage_table(frame)
        if not stages.empty:
            out.append(("pipeline stages alone: GB/s",
                        stages.drop(columns=["size_bytes", "producer", "workers"]).round(DIGITS)))
        return out + [("pipeline: what to do", "\n".join(advice_lines(advice(frame))))]

    def figures(self, frame: pd.DataFrame, canvas) -> list:
        return pipeline_figure(frame, canvas)


if __name__ == "__main__":  # deprecated alias of xferbench-summary, imported only when run as a script
    from bench.cli.deprecated import forward
    forward("bench.suites.pipeline", "xferbench-summary", "bench.cli.summary")
