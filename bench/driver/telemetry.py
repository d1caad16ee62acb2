"""What the GPUs did around and during a run, from NVML: for telling a low figure's cause.

`Sampler` reads every GPU once when started (before the first suite), then every ~0.5 s in a
daemon thread, and once more when stopped (after the last suite): utilization, the compute
processes on the GPU (this run's own: this process and its descendants, such as spawned ranks;
and others), the clock-event ("throttle") reasons, the PCIe link's current generation and
width, temperature and power; once per GPU, its name, the PCIe link's maxima and MIG mode.
Beside them, with or without NVML, the host: its 1-minute load average, every CPU's busy and
stolen time (/proc/stat) and this process's own CPU time with its finished children's
(os.times: spawned ranks, once joined), so that the CPU time other processes took during the run
is their difference: what a launch path found slow is held against (bench/analysis/causes.py).
`summarize()` turns such a `Recording` into plain JSON-ready data for meta.json; it is a pure
function, so it is tested on recordings built as data.

Cost and safety: NVML reads the driver's counters without a CUDA context, and each read is
microseconds. The NVML module is a parameter (pynvml by default), so tests pass a stand-in. No
NVML, no driver or no GPU: the sampler records nothing and says why. Any read that fails is left
out of its sample; one that NVML does not support (or a function the module lacks) is not tried
again on that GPU.

Caveats: NVML's utilization is averaged over its last sample period (1/6 s to 1 s by product),
so "before" shows what ran just before the run. A copy engine moving data does not count as GPU
utilization, so "busy" (for the PCIe link, which drops its generation when idle) means
utilization above zero or clocks without the idle reason. Processes are named by NVML's pids: in
a container without the host's pid namespace those do not match this process's pids, and own
processes then look like others (`own_pids_seen` empty while the run used the GPU says so).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

# nvmlClocksEventReason* bits (NVML's nvml.h; the older names say ClocksThrottleReason)
CLOCK_REASONS = {
    0x1: "idle",
    0x2: "applications clocks",
    0x4: "sw power cap",
    0x8: "hw slowdown",
    0x10: "sync boost",
    0x20: "sw thermal",
    0x40: "hw thermal",
    0x80: "hw power brake",
    0x100: "display clocks",
}
_IDLE = 0x1
_NOT_SUPPORTED, _FUNCTION_NOT_FOUND = 3, 13   # NVML_ERROR_* values: asking again will not help
PHASES = ("before", "during", "after")


def decode_reasons(mask: int) -> list[str]:
    """Names of the clock-event reasons set in an NVML bitmask (unknown bits as hex)."""
    names = [name for bit, name in CLOCK_REASONS.items() if mask & bit]
    rest = mask & ~sum(CLOCK_REASONS)
    return names + ([hex(rest)] if rest else [])


@dataclass(slots=True)
class Sample:
    """One reading of one GPU. None: not read (not supported, or the read failed)."""

    t: float                      # seconds since the recording started
    phase: str                    # 'before' (at start), 'during', 'after' (at stop)
    gpu: int
    util_gpu: int | None = None   # percent of the last period a kernel ran
    util_mem: int | None = None   # percent of it device memory was read or written
    procs: tuple[tuple[int, int | None, bool], ...] | None = None   # (pid, used bytes, own)
    reasons: int | None = None    # clock-event reasons bitmask
    pcie_gen: int | None = None
    pcie_width: int | None = None
    temp_c: int | None = None
    power_w: float | None = None


@dataclass(slots=True)
class HostSample:
    """One reading of the host. None: not readable here (no /proc)."""

    t: float
    phase: str
    load_1m: float | None = None
    cpu_busy_s: float | None = None   # every CPU's busy time since boot: user, nice, system, irq, softirq
    steal_s: float | None = None      # every CPU's time the hypervisor gave to other guests
    own_cpu_s: float | None = None    # this process's, and its children's that have been waited for


def _proc_stat() -> tuple[float | None, float | None]:
    """(busy, steal) seconds of every CPU since boot, from /proc/stat's first line."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None, None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / tick, steal / tick


def read_host(t: float, phase: str) -> HostSample:
    """The host's load, CPU time and this process's own CPU time now (microseconds to read)."""
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    busy, steal = _proc_stat()
    own = os.times()
    return HostSample(t, phase, load, busy, steal, own.user + own.system + own.children_user + own.children_system)


@dataclass
class GpuInfo:
    """What does not change during a run: read once per GPU at start."""

    index: int
    name: str = ""
    uuid: str = ""
    pcie_gen_max: int | None = None       # the link's maximum in this system
    pcie_width_max: int | None = None
    pcie_gen_gpu_max: int | None = None   # the GPU's own maximum
    mig: tuple[int, int] | None = None    # (current, pending); 1 = enabled


@dataclass
class Recording:
    """Everything a sampler recorded; `summarize()` reads it."""

    gpus: list[GpuInfo] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)   # pid -> process name, as NVML says
    interval_s: float = 0.5
    unavailable: str = ""                                 # why nothing was recorded, if so
    host: list[HostSample] = field(default_factory=list)
    cpus: int | None = None                               # the CPUs /proc/stat adds up


def _descends_from(pid: int, root: int) -> bool:
    """Whether pid is root or a descendant of it (its parent chain, through /proc)."""
    for _ in range(64):
        if pid == root:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat") as f:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Sampler:
    """NVML sampling for one run: `start()` before the suites, `stop()` after (or `with`)."""

    def __init__(self, nvml: ModuleType | Any | None = None, interval_s: float = 0.5,
                 root_pid: int | None = None) -> None:
        self._nvml = nvml
        self.recording = Recording(interval_s=interval_s)
        self._root = os.getpid() if root_pid is None else root_pid
        self._own: dict[int, bool] = {}
        self._handles: list[Any] = []
        self._disabled: set[tuple[int, str]] = set()   # (gpu, reader) NVML cannot do
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._started = False

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> Sampler:
        """Read the host and every GPU once and start the sampling thread; without NVML, record
        why and return (the host is read again when stopped)."""
        self._t0 = time.monotonic()
        self.recording.cpus = os.cpu_count()
        self._sample_host("before")
        nv = self._nvml
        if nv is None:
            try:
                import pynvml as nv
            except ImportError:
                self.recording.unavailable = "pynvml (nvidia-ml-py) is not installed"
                return self
            self._nvml = nv
        try:
            nv.nvmlInit()
        except Exception as e:   # no driver, no GPU: nothing to record
            self.recording.unavailable = f"NVML: {_text(e) or type(e).__name__}"
            return self
        self._started = True
        try:
            count = nv.nvmlDeviceGetCount()
            self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as e:
            self.recording.unavailable = f"NVML: {_text(e) or type(e).__name__}"
            self._handles = []
        if not self._handles:
            self.recording.unavailable = self.recording.unavailable or "NVML sees no GPU"
            self._shutdown()
            return self
        self.recording.gpus = [self._info(i, h) for i, h in enumerate(self._handles)]
        self._sample_all("before")
        self._thread = threading.Thread(target=self._loop, name="xferbench-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Recording:
        """Stop the thread, read every GPU a last time, release NVML; returns the recording."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
            self._sample_all("after")
        elif self.recording.host and self.recording.host[-1].phase == "before":
            self._sample_host("after")
        if self._started:
            self._shutdown()
        return self.recording

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _shutdown(self) -> None:
        self._started = False
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.recording.interval_s):
            self._sample_all("during")

    # -- reading ----------------------------------------------------------------------------
    def _read(self, gpu: int, reader: str, call: Callable[[], Any]) -> Any:
        """call(), or None when it fails; a function NVML lacks or does not support on this GPU
        is not tried again."""
        if (gpu, reader) in self._disabled:
            return None
        try:
            return call()
        except AttributeError:
            self._disabled.add((gpu, reader))
        except Exception as e:
            if getattr(e, "value", None) in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND):
                self._disabled.add((gpu, reader))
        return None

    def _info(self, i: int, h: Any) -> GpuInfo:
        nv = self._nvml
        mig = self._read(i, "mig", lambda: nv.nvmlDeviceGetMigMode(h))
        return GpuInfo(
            index=i,
            name=_text(self._read(i, "name", lambda: nv.nvmlDeviceGetName(h)) or ""),
            uuid=_text(self._read(i, "uuid", lambda: nv.nvmlDeviceGetUUID(h)) or ""),
            pcie_gen_max=self._read(i, "gen_max", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            pcie_width_max=self._read(i, "width_max", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h)),
            pcie_gen_gpu_max=self._read(i, "gen_gpu_max", lambda: nv.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)),
            mig=(int(mig[0]), int(mig[1])) if mig is not None else None)

    def _reasons(self, i: int, h: Any) -> int | None:
        nv = self._nvml
        mask = self._read(i, "reasons", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h))
        if mask is None and (i, "reasons") in self._disabled:   # drivers and modules before the rename
            mask = self._read(i, "throttle", lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        return mask

    def _procs(self, i: int, h: Any) -> tuple[tuple[int, int | None, bool], ...] | None:
        found = self._read(i, "procs", lambda: self._nvml.nvmlDeviceGetComputeRunningProcesses(h))
        if found is None:
            return None
        procs = []
        for p in found:
            pid = int(p.pid)
            if pid not in self._own:   # classified once, when first seen (the pid is alive then)
                self._own[pid] = _descends_from(pid, self._root)
                name = self._read(i, "proc_name", lambda: self._nvml.nvmlSystemGetProcessName(pid))
                if name is not None:
                    self.recording.names[pid] = _text(name)
            used = getattr(p, "usedGpuMemory", None)
            procs.append((pid, int(used) if used is not None else None, self._own[pid]))
        return tuple(procs)

    def _sample(self, phase: str, i: int, h: Any) -> Sample:
        nv = self._nvml
        util = self._read(i, "util", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        power_mw = self._read(i, "power", lambda: nv.nvmlDeviceGetPowerUsage(h))
        return Sample(
            t=round(time.monotonic() - self._t0, 3), phase=phase, gpu=i,
            util_gpu=int(util.gpu) if util is not None else None,
            util_mem=int(util.memory) if util is not None else None,
            procs=self._procs(i, h),
            reasons=self._reasons(i, h),
            pcie_gen=self._read(i, "gen", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            pcie_width=self._read(i, "width", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
            temp_c=self._read(i, "temp", lambda: nv.nvmlDeviceGetTemperature(h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))),
            power_w=power_mw / 1000 if power_mw is not None else None)

    def _sample_host(self, phase: str) -> None:
        try:
            self.recording.host.append(read_host(round(time.monotonic() - self._t0, 3), phase))
        except Exception:   # never let telemetry fail a run
            pass

    def _sample_all(self, phase: str) -> None:
        self._sample_host(phase)
        for i, h in enumerate(self._handles):
            try:
                self.recording.samples.append(self._sample(phase, i, h))
            except Exception:   # never let telemetry fail a run
                pass


# -- summary (pure) -----------------------------------------------------------------------
def _busy(s: Sample) -> bool:
    return bool(s.util_gpu) or bool(s.util_mem) or (s.reasons is not None and not s.reasons & _IDLE)


def _utilization(s: Sample | None) -> dict | None:
    if s is None or s.util_gpu is None:
        return None
    return {"gpu": s.util_gpu, "memory": s.util_mem}


def _max(values: list) -> Any:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _min(values: list) -> Any:
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _gpu_summary(info: GpuInfo, samples: list[Sample], names: dict[int, str]) -> dict:
    before = next((s for s in samples if s.phase == "before"), None)
    after = next((s for s in reversed(samples) if s.phase == "after"), None)
    during = [s for s in samples if s.phase == "during"] or samples   # a short run: start and end
    others: dict[int, dict] = {}
    own: set[int] = set()
    for s in samples:
        for pid, used, is_own in s.procs or ():
            if is_own:
                own.add(pid)
                continue
            seen = others.setdefault(pid, {"pid": pid, "name": names.get(pid, ""), "first_seen_s": s.t,
                                           "last_seen_s": s.t, "max_memory_bytes": None, "samples": 0})
            seen["last_seen_s"] = s.t
            seen["samples"] += 1
            seen["max_memory_bytes"] = _max([seen["max_memory_bytes"], used])
    with_reasons = [s for s in during if s.reasons is not None]
    reasons = {}
    for bit, name in CLOCK_REASONS.items():
        hits = sum(1 for s in with_reasons if s.reasons & bit)
        if hits:
            reasons[name] = round(hits / len(with_reasons), 3)
    busy = [s for s in samples if _busy(s)]
    mig = None if info.mig is None else ("on" if info.mig[0] == 1 else "off")
    return {
        "index": info.index, "name": info.name, "uuid": info.uuid,
        "samples": len(samples),
        "utilization": {"before": _utilization(before), "after": _utilization(after),
                        "max_during": {"gpu": _max([s.util_gpu for s in during]),
                                       "memory": _max([s.util_mem for s in during])}},
        "other_processes": sorted(others.values(), key=lambda p: (p["first_seen_s"], p["pid"])),
        "own_pids_seen": sorted(own),
        "clock_reasons": {"samples": len(with_reasons), "fraction": reasons},
        "pcie": {"busy_samples": len(busy),
                 "gen_min_busy": _min([s.pcie_gen for s in busy]),
                 "width_min_busy": _min([s.pcie_width for s in busy]),
                 "gen_max": info.pcie_gen_max, "width_max": info.pcie_width_max,
                 "gen_gpu_max": info.pcie_gen_gpu_max},
        "temperature_c": {"before": before.temp_c if before else None,
                          "max": _max([s.temp_c for s in samples])},
        "power_w": {"before": before.power_w if before else None, "max": _max([s.power_w for s in samples])},
        "mig": mig,
    }


def _difference(first: HostSample, last: HostSample, name: str) -> float | None:
    a, b = getattr(first, name), getattr(last, name)
    return None if a is None or b is None else round(b - a, 2)


def _host_summary(recording: Recording) -> dict:
    """The host over the run: CPU time every CPU was busy, this run's own, the others' (their
    difference) and the hypervisor's steal, in CPU-seconds; the others' share of the CPUs' time;
    the 1-minute load average before, at most and after."""
    first, last = recording.host[0], recording.host[-1]
    duration = last.t - first.t
    busy, own = _difference(first, last, "cpu_busy_s"), _difference(first, last, "own_cpu_s")
    others = None if busy is None or own is None else round(max(0.0, busy - own), 2)
    cpus = recording.cpus
    share = round(others / (duration * cpus), 3) if others is not None and cpus and duration > 0 else None
    loads = [s.load_1m for s in recording.host if s.load_1m is not None]
    return {"cpus": cpus, "duration_s": round(duration, 3),
            "cpu_s": {"all": busy, "own": own, "others": others, "steal": _difference(first, last, "steal_s")},
            "others_share": share,
            "load_avg_1m": {"before": first.load_1m, "max": max(loads) if loads else None, "after": last.load_1m}}


def summarize(recording: Recording) -> dict:
    """Per GPU, JSON-ready: other processes seen, utilization before/after (max during), the
    share of 'during' samples with each clock-event reason, the lowest PCIe generation and width
    seen while busy against the maxima, MIG on/off; and the host (`host`, where read)."""
    host = {"host": _host_summary(recording)} if recording.host else {}
    if recording.unavailable and not recording.samples:
        return {"available": False, "reason": recording.unavailable, **host}
    ts = [s.t for s in recording.samples]
    return {
        "available": True,
        "interval_s": recording.interval_s,
        "duration_s": round(max(ts) - min(ts), 3) if ts else 0.0,
        "gpus": [_gpu_summary(info, [s for s in recording.samples if s.gpu == info.index], recording.names)
                 for info in recording.gpus],
        **host,
    }
