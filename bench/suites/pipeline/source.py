"""Where a pipeline's samples come from: the suite's two producers, or the user's own Dataset
(pipeline.dataset=package.module:factory, optionally pipeline.collate_fn), and the DataLoader
that serves them; what a batch of any structure holds (its tensors, their shapes and bytes)."""
from __future__ import annotations

import contextlib
import functools
import importlib
import multiprocessing
import time
from typing import Any, Callable, Iterator


from bench import ConfigError, lazy
from bench.suites.pipeline.model import Producer

np = lazy.module("numpy")

torch = lazy.module("torch")

PERIOD = 251            # sample i holds i % PERIOD: a prime, so consecutive batches of 2^k samples differ
ENDLESS = 1 << 40       # an epoch's samples when the loader is never iterated anew


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


# ---------------------------------------------------------------- the user's dataset


def named(spec: str, key: str) -> Any:
    """The object 'package.module:name' names; ConfigError in one line, as pipeline.<key>."""
    module, _, name = spec.partition(":")
    try:
        found = importlib.import_module(module)
    except Exception as exc:   # the user's module may raise anything while it imports
        raise ConfigError(f"pipeline.{key}={spec}: cannot import {module}: {type(exc).__name__}: {exc}") from None
    if not hasattr(found, name):
        raise ConfigError(f"pipeline.{key}={spec}: {module} has no {name}")
    return getattr(found, name)


@functools.lru_cache(maxsize=4)
def user_dataset(spec: str) -> Any:
    """factory() of 'package.module:factory', checked to be a map-style Dataset with samples;
    made once per process (before the workers fork, which inherit it). ConfigError in one line."""
    factory = named(spec, "dataset")
    if not callable(factory):
        raise ConfigError(f"pipeline.dataset={spec}: is a {type(factory).__name__}, not a callable that returns "
                          "a Dataset")
    try:
        made = factory()
    except Exception as exc:
        raise ConfigError(f"pipeline.dataset={spec}: factory() raised {type(exc).__name__}: {exc}") from None
    if isinstance(made, torch.utils.data.IterableDataset) or not isinstance(made, torch.utils.data.Dataset):
        raise ConfigError(f"pipeline.dataset={spec}: factory() returned a {type(made).__name__}, not a map-style "
                          "torch.utils.data.Dataset (with __len__ and __getitem__)")
    try:
        length = len(made)
    except TypeError:
        raise ConfigError(f"pipeline.dataset={spec}: its {type(made).__name__} has no __len__") from None
    if length < 1:
        raise ConfigError(f"pipeline.dataset={spec}: holds no samples")
    return made


@functools.lru_cache(maxsize=4)
def user_collate(spec: str) -> Callable:
    fn = named(spec, "collate_fn")
    if not callable(fn):
        raise ConfigError(f"pipeline.collate_fn={spec}: is a {type(fn).__name__}, not a function")
    return fn


@functools.lru_cache(maxsize=4)
def user_step(spec: str, device: str) -> Callable[[Any], Any]:
    """factory(torch.device(device)) of 'package.module:factory', checked to be callable: the
    user's training step, which consumes one batch on the device. Made once per process and
    device (the check makes it, the loop and the step alone use it). ConfigError in one line."""
    factory = named(spec, "step")
    if not callable(factory):
        raise ConfigError(f"pipeline.step={spec}: is a {type(factory).__name__}, not a callable that returns a step")
    try:
        made = factory(torch.device(device))
    except Exception as exc:
        raise ConfigError(f"pipeline.step={spec}: factory({device!r}) raised {type(exc).__name__}: {exc}") from None
    if not callable(made):
        raise ConfigError(f"pipeline.step={spec}: factory({device!r}) returned a {type(made).__name__}, not a callable "
                          "that consumes a batch")
    return made


def collate_of(dataset: str) -> Callable[[list], Any]:
    """The collate_fn of a loop's samples: the user's where pipeline.collate_fn names one."""
    _, _, collate = dataset.partition(" ")
    return user_collate(collate) if collate else torch.utils.data.default_collate


class Wrapped:
    """The user's dataset seen endlessly: sample i is its i mod len (a stage alone asks on)."""

    def __init__(self, dataset) -> None:
        self.dataset, self.length = dataset, len(dataset)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        return self.dataset[i % self.length]


def tensors(data: Any) -> Iterator[torch.Tensor]:
    """The tensors of a batch of any structure (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(data, torch.Tensor):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from tensors(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from tensors(value)


def shape(data: Any) -> Any:
    """A batch's structure, every tensor's dtype and shape: equal for batches of equal size."""
    if isinstance(data, torch.Tensor):
        return (str(data.dtype).removeprefix("torch."), tuple(data.shape))
    if isinstance(data, dict):
        return {k: shape(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return tuple(shape(v) for v in data)
    return type(data).__name__


def moved(data: Any, device, non_blocking: bool) -> Any:
    """A batch's tensors on `device`, its structure kept, as a training loop moves it."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, dict):
        return {k: moved(v, device, non_blocking) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(moved(v, device, non_blocking) for v in data) if not hasattr(data, "_fields") \
            else type(data)(*(moved(v, device, non_blocking) for v in data))
    return data


def user_sample(spec: str) -> tuple[int, str]:
    """One collated sample of the user's dataset: its bytes and a dtype naming it for the rows
    ('user:uint8[1x3x224x224]+int64[1]')."""
    dataset, collate = spec.partition(" ")[0], spec.partition(" ")[2]
    one = (user_collate(collate) if collate else torch.utils.data.default_collate)([user_dataset(dataset)[0]])
    found = list(tensors(one))
    if not found:
        raise ConfigError(f"pipeline.dataset={dataset}: a collated sample holds no tensor to move to the GPU")
    size = sum(t.numel() * t.element_size() for t in found)
    if size < 1:
        raise ConfigError(f"pipeline.dataset={dataset}: a collated sample holds no bytes")
    words = [f"{str(t.dtype).removeprefix('torch.')}[{'x'.join(map(str, t.shape[1:])) or 1}]" for t in found]
    return size, "user:" + "+".join(words)


@functools.lru_cache(maxsize=4)
def user_batch(spec: str, count: int) -> float:
    """The first `count` samples of the user's dataset made and collated into one batch, as the
    loop's largest batches will be, before anything is measured: the seconds one sample took to
    make (the plan's cost of a batch). ConfigError in one line where they cannot be collated."""
    dataset, _, collate = spec.partition(" ")
    made = user_dataset(dataset)
    start = time.perf_counter()
    some = [made[i] for i in range(count)]
    took = (time.perf_counter() - start) / count
    try:
        (user_collate(collate) if collate else torch.utils.data.default_collate)(some)
    except Exception as exc:   # the user's samples and collate_fn may raise anything
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        fix = (f"pipeline.collate_fn={collate} raised it: one for samples of different shapes must pad them" if collate
               else "samples of different shapes need a collate_fn that pads them: pipeline.collate_fn=package.module:function")
        raise ConfigError(f"pipeline.dataset={dataset}: its first {count} samples cannot be collated into one batch "
                          f"({why}); {fix}") from None
    return took


def samples(producer, size: int, length: int = ENDLESS, dataset: str = ""):
    """The map-style dataset of a producer (the user's: pipeline.dataset)."""
    producer = Producer(producer)
    if producer == Producer.user:
        return user_dataset(dataset.partition(" ")[0])
    return {Producer.numpy: NumpySamples, Producer.free: FreeSamples}[producer](size, length)


def _context():
    # Workers are forked, as Linux has always done for DataLoaders: a spawned or forkserver
    # worker imports torch anew (seconds per point). They never touch CUDA, so forking a
    # process that uses it is safe.
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def _threads_in_worker(n: int, worker: int) -> None:
    torch.set_num_threads(n)


def loader(dataset, batch: int | None, workers: int, prefetch_factor: int = 2, threads: int = 0, **kw):
    """A DataLoader with `workers` forked workers (batch None: each item as the dataset gives it);
    `threads`: torch.set_num_threads in each worker (0: torch's default there, which is 1)."""
    init = functools.partial(_threads_in_worker, threads) if threads and workers else None
    return torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=workers,
                                       multiprocessing_context=_context() if workers else None,
                                       prefetch_factor=prefetch_factor if workers else None,
                                       worker_init_fn=init, **kw)


@contextlib.contextmanager
def sharing(strategy: str) -> Iterator[None]:
    """torch.multiprocessing's sharing strategy in this process while it lasts: the workers
    forked meanwhile send their batches so, and the main process receives them so."""
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy(str(strategy))
    try:
        yield
    finally:
        torch.multiprocessing.set_sharing_strategy(before)


@contextlib.contextmanager
def intra_op(threads: int) -> Iterator[None]:
    """torch.set_num_threads(threads) in this process while it lasts (0: as it is)."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
