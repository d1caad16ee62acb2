"""The pipeline suite's settings and what its rows name: the loops, the stages, the host's pace;
which stages a loop runs and who runs them; the grid of loops."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field, replace
from typing import List

from bench.config.settings import Choice, nonempty, positive, require
from bench.results import UNLESS_DEFAULT
from bench.sizes import parse_size


class Grid(Choice):
    # the loops the findings rest on: the last value of every list (the base) at each worker count,
    # thread setting, sharing and persistence (the twins the causes are measured by), the
    # DataLoader's defaults at each thread setting (docs/method.md: where the others never won)
    quick = "quick"
    ablation = "ablation"   # the last value of every list, each switch changed alone, the DataLoader's defaults
    full = "full"           # every combination


class Sharing(Choice):
    """How a worker's batch reaches the main process (torch.multiprocessing's sharing strategy)."""
    file_descriptor = "file_descriptor"   # Linux's default: each storage's descriptor fetched from its worker
    file_system = "file_system"           # a file name in /dev/shm: nothing asked of the worker


class Producer(Choice):
    numpy = "numpy"         # each sample made with numpy in the worker, as a decoding dataset would
    free = "free"           # views of a buffer made once: samples cost nothing to make
    user = "user"           # the user's own Dataset (pipeline.dataset); not a value of pipeline.producers


def _spec_ok(spec: str) -> bool:
    """'package.module:name': a dotted module path and an attribute."""
    module, sep, name = spec.partition(":")
    return bool(sep) and all(p.isidentifier() for p in module.split(".")) and name.isidentifier()


@dataclass
class Settings:
    producers: List[Producer] = field(default_factory=lambda: [Producer.numpy])
    sample_sizes: List[str] = field(default_factory=lambda: ["64KiB"])   # one sample's bytes
    workers: List[int] = field(default_factory=lambda: [0, 8])     # DataLoader num_workers, capped at the cores
    pin_memory: List[bool] = field(default_factory=lambda: [False, True])
    non_blocking: List[bool] = field(default_factory=lambda: [False, True])
    prefetch: List[bool] = field(default_factory=lambda: [False, True])   # the next batch's copy on a side stream
    prefetch_factor: List[int] = field(default_factory=lambda: [2])      # batches each worker keeps ready
    persistent_workers: List[bool] = field(default_factory=lambda: [False])
    threads: List[int] = field(default_factory=lambda: [0, 1])   # torch.set_num_threads in the loop; 0: torch's default
    # torch.multiprocessing.set_sharing_strategy for the workers' batches: [file_system, file_descriptor]
    # also measures the base loop with file_system beside
    sharing: List[Sharing] = field(default_factory=lambda: [Sharing.file_descriptor])
    epoch_batches: int = 0          # iterate the loader anew every this many batches; 0: one endless epoch
    grid: Grid = Grid.quick
    min_size: str = "256KiB"        # batch sizes, in bytes: min_size, x size_factor, ..., max_size
    max_size: str = "4MiB"
    size_factor: int = 16
    min_trial_s: float = 0.05       # a trial lasts at least this long (and timing.min_trial_s)
    rounds: int = 3                 # a batch size's points measured round-robin this many times
    dataset: str = ""               # package.module:factory, factory() -> a map-style Dataset: measured instead
    collate_fn: str = ""            # package.module:function, the DataLoader's collate_fn for pipeline.dataset
    step: str = ""                  # package.module:factory, factory(device) -> step(batch): the user's training step

    def __post_init__(self) -> None:
        for key in ("producers", "sample_sizes", "workers", "pin_memory", "non_blocking", "prefetch",
                    "prefetch_factor", "persistent_workers", "threads", "sharing"):
            nonempty(f"pipeline.{key}", getattr(self, key))
        require(Producer.user not in self.producers, "pipeline.producers", "user",
                "is the dataset pipeline.dataset names: set pipeline.dataset=package.module:factory")
        for w in self.workers:
            require(w >= 0, "pipeline.workers", w, "must be >= 0")
        for n in self.threads:
            require(n >= 0, "pipeline.threads", n, "must be >= 0 (0: torch's default)")
        for f in self.prefetch_factor:
            require(f >= 1, "pipeline.prefetch_factor", f, "must be >= 1")
        require(self.epoch_batches >= 0, "pipeline.epoch_batches", self.epoch_batches, "must be >= 0")
        require(self.epoch_batches > 0 or self.dataset or not any(self.persistent_workers), "pipeline.persistent_workers",
                self.persistent_workers, "keeps workers between epochs; set pipeline.epoch_batches (or pipeline.dataset), "
                "else the loader runs one endless epoch")
        lo, hi = parse_size(self.min_size, "pipeline.min_size"), parse_size(self.max_size, "pipeline.max_size")
        require(lo <= hi, "pipeline.min_size", self.min_size, f"is larger than pipeline.max_size={self.max_size}")
        for s in self.sample_sizes if not self.dataset else ():   # a dataset's samples are its own
            require(parse_size(s, "pipeline.sample_sizes") <= hi, "pipeline.sample_sizes", s,
                    f"is larger than pipeline.max_size={self.max_size}: a batch holds at least one sample")
        require(self.size_factor >= 2, "pipeline.size_factor", self.size_factor, "must be an integer >= 2")
        positive("pipeline.min_trial_s", self.min_trial_s)
        require(self.rounds >= 1, "pipeline.rounds", self.rounds, "must be >= 1")
        for key in ("dataset", "collate_fn", "step"):
            spec = getattr(self, key)
            require(not spec or _spec_ok(spec), f"pipeline.{key}", spec, "must be package.module:name")
        require(self.dataset or not self.collate_fn, "pipeline.collate_fn", self.collate_fn,
                "collates pipeline.dataset's samples; set pipeline.dataset too")

    @property
    def user(self) -> str:
        """The user's dataset and collate_fn as the rows name them ('' for the suite's producers)."""
        return " ".join(x for x in (self.dataset, self.collate_fn) if x)

    def sources(self) -> list[Producer]:
        return [Producer.user] if self.dataset else list(dict.fromkeys(self.producers))


# ---------------------------------------------------------------- what a row names: a loop, a stage, the pace


LOOP_OP = "loader_to_gpu"
PACE_OP = "host_pace"
MAKE, COLLATE, HANDOFF, PIN, H2D, LAUNCH, CONSUME = ("stage_make", "stage_collate", "stage_handoff", "stage_pin",
                                                     "stage_h2d", "stage_launch", "stage_consume")
STEP = "stage_step"   # the user's training step (pipeline.step) on each batch, after the check
STAGES = (MAKE, COLLATE, HANDOFF, PIN, H2D, LAUNCH, CONSUME, STEP)
# The consume stage alone's second reading (rows of this part): the check after a host copy of
# the batch, as a loop's main thread moves each batch's bytes through the host's caches.
COLD = "cold"
# Timed only as the loops run them: launching pinned non_blocking copies back to back alone
# would run at the copy's pace, not the launch's. Runs from before the loops timed it lack it.
LOOP_ONLY = (LAUNCH,)
STAGE_NAMES = tuple(op.removeprefix("stage_") for op in STAGES)   # a stage's name in rows and tables: 'make'
WORKER_STAGES = STAGE_NAMES[:2]   # make and collate: the stages a loader's workers run
# A trial's page faults ride in its parts beside the stages' seconds, under this prefix and the
# threads that took them: the main thread, the pin thread, the workers (stages_of's groups).
FAULTS = "faults:"
MAIN_THREAD, PIN_THREAD = "main thread", "pin thread"
# ... and the CPU seconds of the stages timed on the receiving side (the hand-off, pinning), by
# the thread's own clock, under this prefix and the stage's name.
CPU = "cpu:"
# A loop's rows of this part: the seconds a batch the main thread waited at epochs' starts, for the
# loader to start anew (non-persistent workers forked again) and give the epoch's first batch.
EPOCH = "epoch"


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
    threads: int = 0                  # torch.set_num_threads in the main process and workers; 0: torch's default
    dataset: str = ""                 # the user's dataset and collate_fn (Producer.user)
    sharing: Sharing = Sharing.file_descriptor   # how the workers' batches reach the main process
    step: str = field(default="", metadata=UNLESS_DEFAULT)   # the user's training step on each batch (pipeline.step)

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
        loop = self if self.workers else replace(self, prefetch_factor=2, persistent_workers=False,
                                                 sharing=Sharing.file_descriptor)
        return loop if gpu else replace(loop, pin_memory=False, non_blocking=False, prefetch=False)

    def mode(self, device: str = "cuda") -> str:
        """The row's mode: 'numpy workers=4 prefetch_factor=2 threads=1 non_blocking prefetch'."""
        words = [self.producer.value, f"workers={self.workers}"]
        if self.workers:
            words += [f"prefetch_factor={self.prefetch_factor}", *(["persistent"] if self.persistent_workers else [])]
        words += [f"threads={self.threads}"] if self.threads else []
        words += [self.sharing.value] if self.sharing != Sharing.file_descriptor else []
        if device == "cuda":
            words += ["non_blocking" if self.non_blocking else "blocking", *(["prefetch"] if self.prefetch else [])]
        return " ".join(words)


def dataloader_defaults(producer: Producer, sample_size: int, dataset: str = "", step: str = "") -> Loop:
    """What DataLoader(dataset, batch_size) and batch.to('cuda') do unless told otherwise."""
    return Loop(producer, sample_size, dataset=dataset, step=step)


@dataclass(frozen=True)
class Stage:
    """One stage alone: its op, and the producer and worker count it was measured with where
    they matter (-1: no workers involved); the main process's threads where it runs torch's work."""

    op: str
    producer: Producer | None = None
    workers: int = -1
    memory: str = ""
    sample_size: int = 0
    threads: int = 0
    dataset: str = ""
    sharing: Sharing = Sharing.file_descriptor   # the hand-off's, from workers
    step: str = field(default="", metadata=UNLESS_DEFAULT)   # the user's training step (STEP)

    @property
    def name(self) -> str:
        return self.op.removeprefix("stage_")

    @property
    def label(self) -> str:
        """The name a bottleneck goes by: 'make', 'h2d pinned'."""
        return " ".join(x for x in (self.name, self.memory) if x)

    def mode(self) -> str:
        return " ".join([*([self.step] if self.step else []), *([self.producer.value] if self.producer else []),
                         *([f"workers={self.workers}"] if self.workers >= 0 else []),
                         *([f"threads={self.threads}"] if self.threads else []),
                         *([self.sharing.value] if self.sharing != Sharing.file_descriptor else [])])


@dataclass(frozen=True)
class Pace:
    """The host's single-thread pace (timing.host_pace), read between the rounds of one batch
    size's points."""

    sample_size: int
    batch_bytes: int
    dataset: str = ""



def descriptor(described: dict) -> Loop | Stage | Pace:
    """The loop, stage or pace a row's params describe (what its point carried)."""
    if "batch_bytes" in described:
        return Pace(**described)
    sharing = {"sharing": Sharing(described["sharing"])} if "sharing" in described else {}   # later runs
    if "op" in described:
        producer = described["producer"]
        return Stage(**{**described, "producer": Producer(producer) if producer else None, **sharing})
    return Loop(**{**described, "producer": Producer(described["producer"]), **sharing})


def stages_of(loop: Loop, gpu: bool) -> dict[str, tuple[Stage, ...]]:
    """The stages a loop runs, grouped by who runs them one after another: its workers, the
    pin-memory thread, the main thread, the copy engine. A group's time per batch is the sum
    of its stages'; the groups run at once. Stages of the main process carry the loop's threads
    (workers and the pin thread run one intra-op thread whatever the main process runs)."""
    w, producer, sample, threads = loop.workers, loop.producer, loop.sample_size, loop.threads
    own = threads if not w else 0   # make and collate in the main process without workers
    make = Stage(MAKE, producer, w, sample_size=sample, threads=own, dataset=loop.dataset)
    collate = Stage(COLLATE, producer, w, sample_size=sample, threads=own, dataset=loop.dataset)
    groups: dict[str, tuple[Stage, ...]] = {}
    main: list[Stage] = []
    # without workers: the loader's own work a batch
    handoff = Stage(HANDOFF, Producer.free, w, sample_size=sample, threads=own, sharing=loop.sharing)
    if w:
        groups[f"{w} worker{'s' if w > 1 else ''}"] = (make, collate)
    else:
        main += [make, collate]
    if gpu and loop.pin_memory and w:
        groups[PIN_THREAD] = (handoff, Stage(PIN, Producer.free, w, sample_size=sample))   # takes the workers' batches
    else:
        main += [handoff, Stage(PIN, Producer.free, w, sample_size=sample, threads=threads)] if gpu and loop.pin_memory \
            else [handoff]
    if gpu:
        if not loop.pin_memory:
            main.append(Stage(H2D, Producer.free, w, "pageable", sample))   # the host stages it: the thread waits
        elif not loop.non_blocking:
            main.append(Stage(H2D, memory="pinned", sample_size=sample))
        else:
            main.append(Stage(LAUNCH, memory="pinned", sample_size=sample))   # the copy's launch and stream order
            groups["copy engine"] = (Stage(H2D, memory="pinned", sample_size=sample),)
    # The check: on the GPU of a batch the copy just wrote; on the host of a batch as received,
    # whose pages it is the first to touch. Then the user's step, as the main thread runs it (on a
    # GPU its launches, or its waits where it synchronizes): alone, on the device back to back.
    main.append(Stage(CONSUME, sample_size=sample) if gpu
                else Stage(CONSUME, Producer.free, w, sample_size=sample, threads=threads))
    if loop.step:
        main.append(Stage(STEP, sample_size=sample, threads=threads, dataset=loop.dataset, step=loop.step))
    groups[MAIN_THREAD] = tuple(main)
    return groups


def thread_of(group: str) -> str:
    """Who runs a group of stages_of, as its page faults are counted: 'workers' for its N workers."""
    return "workers" if group.endswith(("worker", "workers")) else group


# ---------------------------------------------------------------- the sweep's loops


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# The switches the quick grid changes alone from the base loop: the worker count (the loader's
# main knob) and the twins its findings compare (threads, sharing, persistence). In the committed
# runs (results/noise/pipeline-*, 256 KiB-4 MiB) the loops it leaves out (pin_memory, non_blocking,
# prefetch or prefetch_factor changed alone) were never the best beyond the spread of one it keeps.
QUICK_SWITCHES = ("workers", "threads", "sharing", "persistent_workers")


def loops(p: Settings, device: str, sample_size: int, cores: int | None = None) -> list[Loop]:
    """The loops measured for each producer, for samples of sample_size: the grid of the switches
    (on a CPU, the loader's alone), worker counts capped at the host's cores (`cores`: those of
    the machine planned for elsewhere; None: this one's). The ablation and
    quick grids also run the DataLoader's defaults at each thread setting: where the intra-op
    threads fight the loop, that loop shows it most."""
    gpu, cores = device == "cuda", cores or usable_cores()
    lists = {"workers": [min(int(w), cores) for w in p.workers], "pin_memory": p.pin_memory,
             "non_blocking": p.non_blocking, "prefetch": p.prefetch, "prefetch_factor": p.prefetch_factor,
             "persistent_workers": p.persistent_workers, "threads": p.threads, "sharing": p.sharing}
    if not gpu:
        lists.update(pin_memory=[False], non_blocking=[False], prefetch=[False])
    lists = {k: list(dict.fromkeys(v)) for k, v in lists.items()}
    out = []
    for producer in p.sources():
        dataset = p.user if producer == Producer.user else ""
        if p.grid == Grid.full:
            grid = [Loop(producer, sample_size, **dict(zip(lists, combo)), dataset=dataset, step=p.step)
                    for combo in itertools.product(*lists.values())]
        else:
            base = Loop(producer, sample_size, **{k: v[-1] for k, v in lists.items()}, dataset=dataset, step=p.step)
            defaults = dataloader_defaults(producer, sample_size, dataset, p.step)
            switched = lists if p.grid == Grid.ablation else {k: lists[k] for k in QUICK_SWITCHES}
            grid = ([base] + [replace(base, **{k: value}) for k, values in switched.items() for value in values
                              if value != getattr(base, k)]
                    + [defaults] + [replace(defaults, threads=n) for n in lists["threads"] if n != defaults.threads])
        out += [loop.normal(gpu) for loop in grid]
    return list(dict.fromkeys(out))


def sample_dtype(sample_size: int) -> str:
    """A row's dtype: one sample, 'uint8[65536]'."""
    return f"uint8[{sample_size}]"
