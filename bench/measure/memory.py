"""What fits: free GPU memory and available host memory, checked before anything is allocated;
and the page faults a thread takes while it runs."""
from __future__ import annotations

import os
import resource
from typing import Iterable

from bench import ConfigError, lazy
from bench.gpus import cuda_started, nvml_gpus

torch = lazy.module("torch")

_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)   # Linux; elsewhere the process's


def format_bytes(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def gpu_free_bytes(dev: int) -> int:
    """Free memory on CUDA device `dev`: CUDA's count once this process has started CUDA (a run),
    else NVML's (a plan, which must start neither torch nor CUDA to ask)."""
    if cuda_started():
        return torch.cuda.mem_get_info(dev)[0]
    return int(nvml_gpus()[dev].free_bytes)


def check_fits(what: str, need: int, devices: Iterable[int], key: str = "sizes.max") -> None:
    """ConfigError unless `need` bytes are free on every listed GPU."""
    for dev in devices:
        free = gpu_free_bytes(dev)
        if need > free:
            raise ConfigError(f"{key}: {what} needs {format_bytes(need)} on cuda:{dev} but only "
                              f"{format_bytes(free)} is free; lower {key}")


def host_available_bytes() -> int | None:
    """Memory this process can still take: MemAvailable, or the cgroup's limit if lower."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max" and available is not None:
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available


def check_host_fits(what: str, need: int, key: str = "sizes.max") -> None:
    """ConfigError unless `need` bytes of host memory are available."""
    available = host_available_bytes()
    if available is not None and need > available:
        raise ConfigError(f"{key}: {what} needs {format_bytes(need)} of host memory but only "
                          f"{format_bytes(available)} is available; lower {key}")




# Host memory one spawned rank costs before its buffers: a Python process with torch and bench
# imported and its process group joined. Measured on the CPU path (torch 2.13 CPU build, x86-64,
# gloo): 330 MB resident, 245 MB proportional (shared libraries split among the ranks), 200 MB
# of it anonymous. A CUDA rank costs more (its context), which this leaves out.
RANK_HOST_BYTES = 256 << 20
# The share of the host memory available that one world of local ranks may take: the rest stays
# for the run's own process, the page cache and whatever else shares the machine. A world sized
# to all of it (collectives.oversubscribe=true asks as many ranks as fit) would leave a shared
# host's other users nothing.
RANKS_HOST_SHARE = 0.5


def cpu_cores() -> int:
    """The CPU cores this process may run on: its affinity, else every core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def local_rank_limit(what: str, per_rank_bytes: int = 0, buffers: str = "", oversubscribe: bool = False
                     ) -> tuple[int, str]:
    """The most ranks this machine runs at once (0: no limit known), and what sets that number:
    one rank per CPU core this process may use (unless `oversubscribe`), and as many as fit in the
    host memory available, each a process (RANK_HOST_BYTES) with `per_rank_bytes` of buffers
    (`buffers` says which), in RANKS_HOST_SHARE of it. ConfigError, before anything is spawned,
    when not one rank fits in all of it."""
    cores = cpu_cores()
    available = host_available_bytes()
    each = RANK_HOST_BYTES + per_rank_bytes
    if available is not None and available < each:
        parts = f"a Python process with torch, {format_bytes(RANK_HOST_BYTES)}" + (f", and {buffers}" if buffers else "")
        raise ConfigError(f"{'sizes.max: ' if buffers else ''}{what} needs about {format_bytes(each)} of host memory "
                          f"a rank ({parts}) but only {format_bytes(available)} is available; free host memory"
                          + (" or lower sizes.max" if buffers else ""))
    fit = max(1, int(available * RANKS_HOST_SHARE) // each) if available is not None else None
    if fit is not None and (oversubscribe or fit < cores):
        return fit, (f"the {_plural(fit, 'rank')} that fit in {RANKS_HOST_SHARE:.0%} of the {format_bytes(available)} "
                     f"of host memory available (about {format_bytes(each)} each; the rest is left to the machine)")
    if oversubscribe:
        return 0, ""
    return cores, f"the {_plural(cores, 'CPU core')} here"


def page_faults(thread: bool = False) -> int:
    """Minor page faults this process (`thread`: the calling thread) has taken so far: each a page
    the kernel handed over on first touch (memory the allocator had given back, or a new
    mapping), zeroed or mapped then. The process's count holds its intra-op threads' too."""
    return resource.getrusage(_THREAD if thread else resource.RUSAGE_SELF).ru_minflt
