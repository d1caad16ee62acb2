"""One round of one point: the loop, or a stage alone as the loop runs it, on what it receives;
each a measure_stream segment whose N the point's first round calibrated (Segment)."""
from __future__ import annotations

import functools
import math
import time
from collections import defaultdict
from dataclasses import replace
from typing import Callable


from bench import lazy
from bench.contract import Context, Point, trial_rows
from bench.measure import stream
from bench.measure.checks import same_data
from bench.measure.memory import page_faults
from bench.measure.stream import BusyMarks, EventMarks, HostMarks
from bench.measure.timing import TimingConfig, Trial
from bench.results import Sample
from bench.suites.pipeline.feed import Check, Feed, SpentMarks, check_of
from bench.suites.pipeline.model import (COLD, CONSUME, COLLATE, CPU, FAULTS, H2D, HANDOFF, MAIN_THREAD, MAKE,
                                         PIN, STEP, WORKER_STAGES, Loop, Producer, Stage, stages_of, thread_of)
from bench.suites.pipeline.source import (ENDLESS, FreeSamples, Wrapped, collate_of, intra_op, loader, moved,
                                          samples, sharing, user_step)

np = lazy.module("numpy")

torch = lazy.module("torch")

MIN_BATCHES = 2         # at least this many batches a trial
ITEM_S = 0.01           # a worker stage's item lasts about this long: its hand-off is small beside it
DISAGREE = 0.2          # trials whose slowest and fastest differ by more than this share of their median
POOL = 2                # batches of dear samples collate alone collates in turn, made once a process
DEAR = 4                # samples this many times dearer to make than to collate (64 KiB numpy ones: about 1x)


class Segment:
    """A point's share of one round: a stream's warm-up, then its trials of N operations; N is
    calibrated in the point's first round and kept, so a later round is its warm-up and trials."""

    def __init__(self, cfg: TimingConfig) -> None:
        self.cfg, self.n = cfg, 0

    def __call__(self, step: Callable[[int], None], marks, warmup: int = 0, min_ops: int = 1,
                 multiple: int = 1, calibrate=None) -> list[Trial]:
        """`calibrate`: the marks N is calibrated by where they are not `marks` (a stage timed
        around a sliver of each operation: a trial then lasts min_trial_s of the operations)."""
        self.n = stream.stream_iters(step, calibrate or marks, self.cfg, warmup, min_ops, multiple, known=self.n)
        return stream.stream_trials(step, marks, self.cfg, self.n)


def disagreement(trials: list[Trial]) -> str:
    """A note when the trials of one point differ by more than DISAGREE of their median."""
    per = sorted(t.per_op_s for t in trials)
    mid = float(np.median(per))
    if len(per) < 2 or mid <= 0 or (per[-1] - per[0]) <= DISAGREE * mid:
        return ""
    return f"trials disagree: {per[0] / mid:.2f}x to {per[-1] / mid:.2f}x their median time"


def _rows(point: Point, trials: list[Trial], verified: bool, failure: str) -> list[Sample]:
    """A row per trial; page_faults a batch where the trial counted them (its parts' FAULTS)."""
    bare = [replace(t, parts={}) for t in trials]
    rows = trial_rows(point, bare, point.size_bytes, 1.0, verified, disagreement(trials) if verified else failure)
    return [replace(r, page_faults=trials[r.trial].parts[FAULTS] / r.iters) if FAULTS in trials[r.trial].parts else r
            for r in rows]


def _device(ctx: Context) -> torch.device:
    return torch.device("cuda", ctx.local_rank) if ctx.device == "cuda" else torch.device("cpu")


def _batch(point: Point) -> int:
    return point.size_bytes // point.params.sample_size


# ---------------------------------------------------------------- the loop


def _part_rows(point: Point, trials: list[Trial], verified: bool, workers: int,
               thread: Callable[[str], str] = lambda stage: "") -> list[Sample]:
    """A row per trial and part (part = a stage's name): time_s the seconds a batch cost that
    part, divided among the workers that run it at once (make, collate), so that its GB/s is
    what the part sustains; page_faults the faults a batch cost the thread that runs it
    (`thread` of the stage's name; all its workers together), and cpu_s the CPU seconds a batch
    it ran, where the trial counted them."""
    rows = []
    for i, t in enumerate(trials):
        for stage, seconds in t.parts.items():
            if stage.startswith((FAULTS, CPU)):
                continue
            per = max(seconds, 0.0) / t.iters / (workers if workers and stage in WORKER_STAGES else 1)
            gbps = point.size_bytes / per / 1e9 if verified and per > 0 else float("nan")
            faults = t.parts.get(FAULTS + thread(stage), math.nan) / t.iters
            cpu = t.parts.get(CPU + stage, math.nan) / t.iters
            rows.append(point.sample(trial=i, iters=t.iters, part=stage, time_s=per, algbw_gbps=gbps,
                                     busbw_gbps=gbps, page_faults=faults, cpu_s=cpu, verified=verified,
                                     status="ok" if verified else "failed"))
    return rows


def loop_stream(feed: Feed, seg: Segment, epoch_batches: int = 0) -> list[Trial]:
    """The loop's trials: a warm-up that drains what the workers queued, trials of at least
    twice that, whole epochs each when there are epochs."""
    marks = SpentMarks(EventMarks() if feed.gpu else HostMarks(), feed.spent, feed.faults, own=MAIN_THREAD,
                       cpu=feed.cpu)
    return seg(feed, marks, warmup=feed.queued + 1, min_ops=max(MIN_BATCHES, 2 * feed.queued),
               multiple=epoch_batches or 1)


def _loop(point: Point, seg: Segment, ctx: Context, epoch_batches: int) -> list[Sample]:
    loop: Loop = point.params
    with intra_op(loop.threads), sharing(loop.sharing):
        feed = Feed(_batch(point), loop.sample_size, loop, _device(ctx), epoch_batches)
        try:
            trials = loop_stream(feed, seg, epoch_batches)
            verified = feed.correct()
            threads = torch.get_num_threads()
        finally:
            feed.close()
    rows = _rows(point, trials, verified, "data check failed: a batch differs from the samples it should hold")
    said = f"torch threads {threads}"   # what threads=0 (torch's default) meant on this host
    rows = [replace(r, note="; ".join(x for x in (r.note, said) if x)) for r in rows]
    who = {st.name: thread_of(group) for group, stages in stages_of(loop, feed.gpu).items() for st in stages}
    return rows + _part_rows(point, trials, verified, loop.workers, lambda stage: who.get(stage, ""))


# ---------------------------------------------------------------- stages alone


class MakeBatch:
    """The fetcher's part of a batch: each of its samples from the dataset, one call each, as
    the loader asks for them; a call makes the next batch's and returns the seconds it took."""

    def __init__(self, dataset, batch: int) -> None:
        self.dataset, self.batch, self.next = dataset, batch, 0
        self.faults = 0   # page faults its timed parts took, read outside the clock

    def samples(self) -> list:
        first, self.next = self.next, self.next + self.batch
        return [self.dataset[i] for i in range(first, first + self.batch)]

    def __call__(self) -> float:
        before = page_faults()
        start = time.perf_counter()
        self.samples()
        took = time.perf_counter() - start
        self.faults += page_faults() - before
        return took


class CollateBatch:
    """The collate_fn of each next batch's samples as the producer makes them (untimed), and
    freeing what it made: in a worker a new shared-memory segment each time, as the loader's
    is; in the main process host memory. A call returns the seconds collating took. Where making
    the first batch took DEAR times collating it or more (a decoding dataset: tens of times), POOL
    batches' samples are made once and collated in turn: made anew, a trial of collate alone would
    be a decoding run."""

    def __init__(self, dataset, batch: int, collate: Callable) -> None:
        self.make, self.collate = MakeBatch(dataset, batch), collate
        self.made: list[list] = []
        self.faults = self.runs = 0

    def __call__(self) -> float:
        start = time.perf_counter()
        samples_ = self.made[self.runs % len(self.made)] if self.made else self.make.samples()
        making = time.perf_counter() - start
        self.runs += 1
        before = page_faults()
        start = time.perf_counter()
        batch = self.collate(samples_)
        del batch
        took = time.perf_counter() - start
        self.faults += page_faults() - before
        if self.runs == 1 and making >= DEAR * took:
            self.made = [samples_] + [self.make.samples() for _ in range(POOL - 1)]
        return took


class StageItems:
    """Item j: a stage's operation (which returns the seconds of its timed part) run until those
    add up to ITEM_S, in the process that serves it (a DataLoader worker, or the main process
    without workers): [seconds, runs, worker, page faults of the timed parts]."""

    def __init__(self, make_op: Callable[[], Callable[[], float]]) -> None:
        self.make_op, self.op = make_op, None

    def __len__(self) -> int:
        return ENDLESS

    def __getitem__(self, j: int) -> torch.Tensor:
        if self.op is None:
            self.op = self.make_op()   # in the process that runs it
        runs, busy, faults = 0, 0.0, self.op.faults
        while busy < ITEM_S:
            busy += self.op()
            runs += 1
        info = torch.utils.data.get_worker_info()
        return torch.tensor([busy, runs, info.id if info else 0, self.op.faults - faults], dtype=torch.float64)


class WorkerBusy:
    """Marks of several processes' busy seconds at once. A segment's seconds are those in which
    the processes, each at the rate its own busy time shows, would run the segment's operations
    together: the sum of their rates, an upper bound on what they deliver at once."""

    def __init__(self) -> None:
        self.busy: dict[int, float] = defaultdict(float)
        self.runs: dict[int, int] = defaultdict(int)
        self.faults = 0.0

    def add(self, worker: int, seconds: float, runs: int, faults: float) -> None:
        self.busy[worker] += seconds
        self.runs[worker] += runs
        self.faults += faults

    def mark(self) -> tuple[dict, dict, float]:
        return dict(self.busy), dict(self.runs), self.faults

    def parts(self, start: tuple, end: tuple) -> dict[str, float]:
        return {FAULTS: end[2] - start[2]}

    def count(self, start: tuple[dict, dict], end: tuple[dict, dict]) -> int:
        return sum(n - start[1].get(w, 0) for w, n in end[1].items())

    def seconds(self, start: tuple[dict, dict], end: tuple[dict, dict]) -> float:
        done = {w: n - start[1].get(w, 0) for w, n in end[1].items()}
        rate = sum(d / (end[0][w] - start[0].get(w, 0.0)) for w, d in done.items() if d)
        return sum(done.values()) / rate if rate else 0.0


def _worker_stage(point: Point, st: Stage, seg: Segment) -> list[Sample]:
    """make or collate: st.workers DataLoader workers at once (none: the main process), each
    running the stage back to back and timing only that."""
    batch = _batch(point)
    user = st.producer == Producer.user
    dataset = Wrapped(samples(st.producer, st.sample_size, dataset=st.dataset)) if user \
        else samples(st.producer, st.sample_size)
    collate = collate_of(st.dataset) if user else torch.utils.data.default_collate
    check = check_of(Loop(st.producer), batch, torch.device("cpu"))   # the samples the stage makes or collates, once
    check(collate(MakeBatch(dataset, batch).samples()), 0, 0)
    op = functools.partial(MakeBatch, dataset, batch) if st.op == MAKE \
        else functools.partial(CollateBatch, dataset, batch, collate)
    processes = max(st.workers, 1)
    with intra_op(st.threads):
        items = iter(loader(StageItems(op), None, st.workers))
        marks = WorkerBusy()

        def step(n: int) -> None:
            for _ in range(n):
                busy, runs, worker, faults = next(items).tolist()
                marks.add(int(worker), busy, int(runs), faults)

        try:
            trials = seg(step, marks, warmup=2 * processes, min_ops=processes, multiple=processes)
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


def _handoff(point: Point, st: Stage, seg: Segment) -> list[Sample]:
    """Batches through the DataLoader from st.workers workers, each a new segment no one writes
    or reads: the loader's machinery alone, by the main process's clock."""
    sizes = []
    with intra_op(st.threads), sharing(st.sharing):
        batches = iter(loader(FreshBatches(point.size_bytes, st.workers), None, st.workers))

        def step(n: int) -> None:
            for _ in range(n):
                sizes.append(next(batches).numel())

        try:
            trials = seg(step, SpentMarks(HostMarks(), {}, own=""), warmup=2 * st.workers + 1,
                         min_ops=max(MIN_BATCHES, 4 * st.workers))
        finally:
            batches = None
    verified = bool(sizes) and set(sizes) == {point.size_bytes}
    return _rows(point, trials, verified, "hand-off failed: a batch arrived with the wrong size")


def _received_stage(point: Point, st: Stage, seg: Segment, ctx: Context) -> list[Sample]:
    """pin, a pageable h2d copy, or (without a GPU) the check: of each batch as the main process
    receives it from st.workers workers of a DataLoader over the free producer (none: collated
    in the main process), the batch freed right after as the loop frees it; timed around that
    alone."""
    batch = _batch(point)
    device = _device(ctx)
    check = Check(batch, device if st.op == H2D else torch.device("cpu"))
    marks, first, faults = BusyMarks(), [0], {FAULTS: 0}

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
            before = page_faults()
            start = time.perf_counter()
            out = stage(received)
            received = None                      # freed here, as the loop frees it
            marks.add(time.perf_counter() - start)
            faults[FAULTS] += page_faults() - before
            if out is not None:
                check(out, first[0])
            first[0] += size

    # Behind workers the DataLoader pins on its pin thread, which runs one intra-op thread
    # (torch.utils.data._utils.pin_memory): so does this pin. Without workers the main process
    # pins, with the loop's threads.
    threads = 1 if st.op == PIN and st.workers > 0 else st.threads
    # The host's check reads two bytes a sample: a trial of it alone would take thousands of batches
    # received (collated, or handed off) around it; its trials last min_trial_s of whole steps.
    whole = HostMarks() if st.op == CONSUME else None
    with intra_op(threads):
        batches = iter(loader(samples(Producer.free, st.sample_size), batch, st.workers))
        try:
            trials = seg(step, SpentMarks(marks, faults), warmup=2 * st.workers + 1,
                         min_ops=max(MIN_BATCHES, 4 * st.workers), calibrate=whole)
        finally:
            batches = None
    return _rows(point, trials, check.passed(), "data check failed: a batch differs from the samples it should hold")


def _link(point: Point, seg: Segment, ctx: Context) -> list[Sample]:
    """Pinned host-to-device copies of one batch's size, back to back: the link's figure."""
    device = _device(ctx)
    dst = torch.zeros(point.size_bytes, dtype=torch.uint8, device=device)
    src = torch.empty(point.size_bytes, dtype=torch.uint8, pin_memory=True).copy_(
        torch.randint(0, 256, (point.size_bytes,), dtype=torch.uint8, device=device))

    def step(n: int) -> None:
        for _ in range(n):
            dst.copy_(src, non_blocking=True)

    trials = seg(step, EventMarks())
    torch.cuda.synchronize(device)
    return _rows(point, trials, same_data(dst, src), "data check failed: destination differs from source")


def _consume(point: Point, seg: Segment, ctx: Context) -> list[Sample]:
    """The data check on the GPU of a batch already there, back to back; then, as rows of part
    COLD, the same check timed on the host after each batch's bytes went through the host's
    caches (a host copy of them before each check, untimed), as a loop's main thread moves them
    (collate, pin, a pageable copy's staging) between its checks."""
    batch = _batch(point)
    device = _device(ctx)
    sample = point.params.sample_size
    resident = torch.utils.data.default_collate(MakeBatch(FreeSamples(sample), batch).samples()).to(device)
    check = Check(batch, device)

    def step(n: int) -> None:
        for _ in range(n):
            check(resident, 0)

    trials = seg(step, EventMarks())
    host_src, host_dst = np.ones(point.size_bytes, np.uint8), np.zeros(point.size_bytes, np.uint8)
    spent: dict[str, float] = defaultdict(float)

    def after_host_copy(n: int) -> None:
        for _ in range(n):
            np.copyto(host_dst, host_src)
            start = time.perf_counter()
            check(resident, 0)
            spent[COLD] += time.perf_counter() - start

    start = time.perf_counter()
    np.copyto(host_dst, host_src)
    per = time.perf_counter() - start + min(t.per_op_s for t in trials)
    n = max(MIN_BATCHES, math.ceil(seg.cfg.min_trial_s / per))   # the copies make each op longer than the check's
    cold = stream.stream_trials(after_host_copy, SpentMarks(HostMarks(), spent), seg.cfg, n)
    verified = check.passed()
    return (_rows(point, trials, verified, "data check failed: the resident batch reads wrong")
            + _part_rows(point, cold, verified, 1))


def _step(point: Point, st: Stage, seg: Segment, ctx: Context) -> list[Sample]:
    """The user's training step alone, on one batch already on the device, back to back (by the
    GPU's clock on a GPU, at the main process's threads): what the step costs when data waits."""
    device, batch = _device(ctx), _batch(point)
    made = MakeBatch(Wrapped(samples(Producer.user, st.sample_size, dataset=st.dataset)) if st.dataset
                     else FreeSamples(st.sample_size), batch).samples()
    resident = moved(collate_of(st.dataset)(made), device, False)
    step = user_step(st.step, str(device))

    def run(n: int) -> None:
        for _ in range(n):
            step(resident)

    with intra_op(st.threads):
        trials = seg(run, EventMarks() if device.type == "cuda" else HostMarks(), min_ops=MIN_BATCHES)
    return _rows(point, trials, True, "")


def measure_point(point: Point, seg: Segment, ctx: Context, epoch_batches: int) -> list[Sample]:
    """One round of a loop or a stage alone: its rows, trials numbered from 0."""
    st = point.params
    if isinstance(st, Loop):
        return _loop(point, seg, ctx, epoch_batches)
    if st.op in (MAKE, COLLATE):
        return _worker_stage(point, st, seg)
    if st.op == HANDOFF:
        return _handoff(point, st, seg)
    if st.op == STEP:
        return _step(point, st, seg, ctx)
    if st.op == CONSUME and st.workers < 0:
        return _consume(point, seg, ctx)
    if st.op == H2D and st.memory == "pinned":
        return _link(point, seg, ctx)
    return _received_stage(point, st, seg, ctx)
