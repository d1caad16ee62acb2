"""What fits: free GPU memory and available host memory, checked before anything is allocated."""
from __future__ import annotations

from typing import Iterable

from bench import ConfigError, lazy

torch = lazy.module("torch")


def format_bytes(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def check_fits(what: str, need: int, devices: Iterable[int], key: str = "sizes.max") -> None:
    """ConfigError unless `need` bytes are free on every listed GPU."""
    for dev in devices:
        free = torch.cuda.mem_get_info(dev)[0]
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
