"""What machine this is: GPUs, driver, CUDA, NCCL, PCIe links, NVLink, P2P access, topology.

NVML (nvidia-ml-py) reads links without creating a CUDA context; anything it cannot read is
left out rather than guessed. Each GPU's L2 size (`l2_bytes`) comes from CUDA, as NVML has no
call for it: the analysis keeps copies whose working set fits in it out of HBM peaks. Without a
GPU the description says so and names the CPU. A plan takes `host()`, what NVML, nvidia-smi and
the OS say (no torch); a run `describe()`, that and torch's facts. `nvidia-smi topo -m` is a
process of its own, started before torch loads (`Topology`) and read when the run describes the
machine, before anything is measured.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import time
from typing import Any

from bench import interrupts, lazy
from bench.hosts import this_host

torch = lazy.module("torch")


def _nvml_gpus() -> list[dict[str, Any]]:
    try:
        import pynvml as nv
    except ImportError:
        return []
    try:
        nv.nvmlInit()
    except Exception:
        return []
    gpus = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            gpu: dict[str, Any] = {"index": i}
            readers = {
                "name": lambda: nv.nvmlDeviceGetName(h),
                "uuid": lambda: nv.nvmlDeviceGetUUID(h),
                "memory_bytes": lambda: nv.nvmlDeviceGetMemoryInfo(h).total,
                "pci_bus_id": lambda: nv.nvmlDeviceGetPciInfo(h).busId,
                "pcie_gen_current": lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h),
                "pcie_gen_max": lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h),
                "pcie_width_current": lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h),
                "pcie_width_max": lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h),
                "pcie_gen_gpu_max": lambda: nv.nvmlDeviceGetGpuMaxPcieLinkGeneration(h),
                "sm_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
                "mem_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
                "memory_bus_width": lambda: nv.nvmlDeviceGetMemoryBusWidth(h),   # bits: with the clock, HBM's rate
                "power_limit_w": lambda: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000,
            }
            for key, read in readers.items():
                try:
                    value = read()
                    gpu[key] = value.decode() if isinstance(value, bytes) else value
                except Exception:
                    pass
            links = 0
            for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if nv.nvmlDeviceGetNvLinkState(h, link) == nv.NVML_FEATURE_ENABLED:
                        links += 1
                except Exception:
                    break
            gpu["nvlink_links"] = links
            gpus.append(gpu)
        try:
            driver = nv.nvmlSystemGetDriverVersion()
            gpus and gpus[0].setdefault("driver", driver.decode() if isinstance(driver, bytes) else driver)
        except Exception:
            pass
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
    return gpus


class Topology:
    """`nvidia-smi topo -m`, started when made and read by `text()` (at most 30 s in all); as a
    context, stopped on leaving it unread (an interrupt, an error), so it never outlives the run."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        try:
            self._proc = subprocess.Popen(["nvidia-smi", "topo", "-m"], stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True) if shutil.which("nvidia-smi") else None
        except OSError:
            self._proc = None

    def text(self) -> str:
        """Its output; '' where it failed, timed out or there is no nvidia-smi."""
        if self._proc is None:
            return ""
        try:
            with interrupts.interruptible():   # a wait on another process: a signal need not wait for it
                out, _ = self._proc.communicate(timeout=max(0.0, 30 - (time.monotonic() - self._started)))
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            return ""
        return out.strip() if self._proc.returncode == 0 else ""

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def link_matrix(topology: str) -> dict[str, str]:
    """'i,j' -> link type (NV18, PIX, SYS, ...) from `nvidia-smi topo -m` text."""
    rows = [line.split() for line in topology.splitlines() if re.match(r"^GPU\d+\s", line)]
    n = len(rows)
    return {f"{i},{j}": rows[i][1 + j] for i in range(n) for j in range(n) if i != j and len(rows[i]) > n}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def p2p_access() -> list[list[bool]]:
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [[i == j or torch.cuda.can_device_access_peer(i, j) for j in range(n)] for i in range(n)]


def _head() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "os": platform.platform(), "python": platform.python_version(),
            "cpu": _cpu_name(), "cpu_count": os.cpu_count()}


def _env() -> dict[str, str]:
    """The variables that set how NCCL, the GPUs and the host's allocator and threads behave."""
    return {k: v for k, v in os.environ.items()
            if k.startswith(("NCCL_", "CUDA_VISIBLE", "TORCH_SYMM", "NVSHMEM_", "MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD",
                             "OMP_NUM_THREADS"))}


def host(cuda: bool, topology: Topology) -> dict[str, Any]:
    """The machine as NVML, nvidia-smi and the OS see it, without torch or a CUDA context (a
    plan's); `cuda`: whether it has GPUs to read."""
    gpus = _nvml_gpus() if cuda else []
    text = topology.text() if cuda else ""
    return {**_head(), "host_id": this_host(gpus), "driver": gpus[0].pop("driver", "") if gpus else "", "gpus": gpus,
            "topology": text, "links": link_matrix(text), "env": _env()}


def describe(topology: Topology | None = None) -> dict[str, Any]:
    """The machine, for meta.json: host()'s facts and torch's; `topology`: nvidia-smi's, if started."""
    cuda = torch.cuda.is_available()
    facts = host(cuda, topology or Topology())
    gpus = facts["gpus"]
    if cuda and not gpus:  # NVML missing: take what torch knows
        gpus += [{"index": i, "name": torch.cuda.get_device_name(i),
                  "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
                 for i in range(torch.cuda.device_count())]
    for i, gpu in enumerate(gpus[:torch.cuda.device_count() if cuda else 0]):
        try:
            gpu["l2_bytes"] = torch.cuda.get_device_properties(i).L2_cache_size
        except (RuntimeError, AttributeError):
            pass
    nccl = ""
    if cuda:
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            pass
    return {**facts, "torch": torch.__version__, "cuda": torch.version.cuda or "", "nccl": nccl,
            "p2p_access": p2p_access() if cuda else []}
