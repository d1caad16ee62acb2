"""bench.driver.telemetry: the summary on recordings built as data (the readings an H200 gave NVML), and
the sampler's thread on a stand-in NVML module; no GPU needed."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.driver.telemetry import GpuInfo, HostSample, Recording, Sample, Sampler, decode_reasons, summarize

GiB = 1 << 30


def test_reasons_decoded_by_bit():
    assert decode_reasons(0) == []
    assert decode_reasons(1) == ["idle"]
    assert decode_reasons(0x4 | 0x40) == ["sw power cap", "hw thermal"]
    assert decode_reasons(0x100 | 0x1000) == ["display clocks", "0x1000"]


def _h200(mig=(0, 0)) -> GpuInfo:
    return GpuInfo(index=0, name="NVIDIA H200", uuid="GPU-f4f0e538", pcie_gen_max=5, pcie_width_max=16,
                   pcie_gen_gpu_max=5, mig=mig)


def _s(t, phase, util=(0, 0), procs=(), reasons=1, gen=5, width=16, temp=37, power=110.0, gpu=0):
    return Sample(t=t, phase=phase, gpu=gpu, util_gpu=util[0], util_mem=util[1], procs=tuple(procs),
                  reasons=reasons, pcie_gen=gen, pcie_width=width, temp_c=temp, power_w=power)


def test_summary_of_a_run_with_another_job_arriving():
    # As NVML read an H200: idle reason (1) and no process before; the run's process and its
    # spawned rank while busy (reasons 0); then another job's process appears for a while.
    me, rank, stranger = (423, 1_616_904_192, True), (446, 1_616_904_192, True), (9001, 30 * GiB, False)
    samples = [
        _s(0.0, "before"),
        _s(0.5, "during", util=(99, 2), procs=[me, rank], reasons=0, temp=45, power=400.0),
        _s(1.0, "during", util=(97, 3), procs=[me, rank, (9001, 20 * GiB, False)], reasons=0, temp=52),
        _s(1.5, "during", util=(98, 2), procs=[me, rank, stranger], reasons=0),
        _s(2.0, "during", util=(0, 0), procs=[me], reasons=1),   # between two points
        _s(2.4, "after", util=(3, 0), procs=[stranger], reasons=1),
    ]
    rec = Recording(gpus=[_h200()], samples=samples, names={423: "python3", 446: "/opt/torch/.venv/bin/python3",
                                                              9001: "other_job"})
    got = summarize(rec)
    assert got["available"] and got["duration_s"] == 2.4
    (gpu,) = got["gpus"]
    assert gpu["name"] == "NVIDIA H200" and gpu["mig"] == "off" and gpu["samples"] == 6
    assert gpu["utilization"] == {"before": {"gpu": 0, "memory": 0}, "after": {"gpu": 3, "memory": 0},
                                  "max_during": {"gpu": 99, "memory": 3}}
    assert gpu["own_pids_seen"] == [423, 446]
    assert gpu["other_processes"] == [{"pid": 9001, "name": "other_job", "first_seen_s": 1.0, "last_seen_s": 2.4,
                                       "max_memory_bytes": 30 * GiB, "samples": 3}]
    # one 'during' sample of four was idle; before and after are not counted
    assert gpu["clock_reasons"] == {"samples": 4, "fraction": {"idle": 0.25}}
    assert gpu["pcie"] == {"busy_samples": 4, "gen_min_busy": 5, "width_min_busy": 16, "gen_max": 5,
                           "width_max": 16, "gen_gpu_max": 5}
    assert gpu["temperature_c"] == {"before": 37, "max": 52}
    assert gpu["power_w"] == {"before": 110.0, "max": 400.0}


def test_throttling_and_a_downshifted_link_while_busy():
    samples = [
        _s(0.0, "before", gen=1, width=16),                            # idle links drop to Gen1: not a fault
        _s(0.5, "during", util=(90, 10), reasons=0x20 | 0x4, gen=4, width=16),   # sw thermal + power cap
        _s(1.0, "during", util=(0, 0), reasons=0, gen=4, width=8),      # a copy: no kernel, clocks not idle
        _s(1.5, "during", util=(95, 10), reasons=0x40, gen=4, width=16),
        _s(2.0, "during", util=(95, 10), reasons=None, gen=None),       # reads that failed
        _s(2.5, "after", gen=1, width=16),
    ]
    gpu = summarize(Recording(gpus=[_h200(mig=(1, 1))], samples=samples))["gpus"][0]
    assert gpu["clock_reasons"] == {"samples": 3, "fraction": {"sw power cap": 0.333, "sw thermal": 0.333,
                                                               "hw thermal": 0.333}}
    assert gpu["pcie"]["busy_samples"] == 4
    assert (gpu["pcie"]["gen_min_busy"], gpu["pcie"]["width_min_busy"]) == (4, 8)
    assert gpu["mig"] == "on" and gpu["other_processes"] == [] and gpu["own_pids_seen"] == []


def test_nothing_recorded_says_why():
    assert summarize(Recording(unavailable="NVML: Driver Not Loaded")) == {
        "available": False, "reason": "NVML: Driver Not Loaded"}


def test_the_host_over_a_run_other_processes_cpu_time_and_load():
    # 16 CPUs busy 100 CPU-s over 10 s, 40 of them this run's: the others took 60 (37.5% of the CPUs' time)
    host = [HostSample(0.0, "before", 1.5, 1000.0, 2.0, 3.0), HostSample(5.0, "during", 9.25, 1050.0, 2.2, 20.0),
            HostSample(10.0, "after", 6.0, 1100.0, 2.5, 43.0)]
    got = summarize(Recording(unavailable="NVML: Driver Not Loaded", host=host, cpus=16))
    assert got["available"] is False and got["host"] == {
        "cpus": 16, "duration_s": 10.0, "cpu_s": {"all": 100.0, "own": 40.0, "others": 60.0, "steal": 0.5},
        "others_share": 0.375, "load_avg_1m": {"before": 1.5, "max": 9.25, "after": 6.0}}
    unread = summarize(Recording(host=[HostSample(0.0, "before"), HostSample(1.0, "after")], cpus=2))["host"]
    assert unread["cpu_s"] == {"all": None, "own": None, "others": None, "steal": None} and unread["others_share"] is None


def test_a_run_shorter_than_one_interval_uses_its_start_and_end():
    samples = [_s(0.0, "before", util=(10, 1)), _s(0.2, "after", util=(50, 5), reasons=0)]
    gpu = summarize(Recording(gpus=[_h200()], samples=samples))["gpus"][0]
    assert gpu["utilization"]["max_during"] == {"gpu": 50, "memory": 5}
    assert gpu["clock_reasons"] == {"samples": 2, "fraction": {"idle": 0.5}}


# -- the sampler, on a stand-in NVML ------------------------------------------------------
class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class Util:
    def __init__(self, gpu: int, memory: int):
        self.gpu, self.memory = gpu, memory


class Proc:
    def __init__(self, pid: int, used: int | None):
        self.pid, self.usedGpuMemory = pid, used


class FakeNvml:
    """Two GPUs. GPU 0 runs this process, a child of it and pid 1 (not ours). The module predates
    the ClocksEvent names; power is not supported; temperature fails now and then."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self, pids_on_gpu0: list[int], gpus: int = 2, init_error: Exception | None = None):
        self.pids, self.gpus, self.init_error = pids_on_gpu0, gpus, init_error
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self):
        self._count("init")
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self._count("shutdown")

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"handle{i}"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMigMode(self, h):
        return [0, 0]

    def nvmlDeviceGetUtilizationRates(self, h):
        return Util(99, 2) if h == "handle0" else Util(0, 0)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [Proc(pid, GiB) for pid in self.pids] if h == "handle0" else []

    def nvmlSystemGetProcessName(self, pid):
        self._count("name")
        return f"proc-{pid}".encode()

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._count("temp")
        if self.calls["temp"] % 2:
            raise NVMLError(15)   # GPU_IS_LOST, say: worth trying again next time
        return 40

    def nvmlDeviceGetPowerUsage(self, h):
        self._count("power")
        raise NVMLError(3)        # NOT_SUPPORTED


def test_sampler_thread_samples_until_stopped():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        nvml = FakeNvml([os.getpid(), child.pid, 1])
        sampler = Sampler(nvml, interval_s=0.02).start()
        thread = sampler._thread
        assert thread.daemon and thread.is_alive()
        deadline = time.monotonic() + 10
        while sum(s.phase == "during" for s in sampler.recording.samples) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        rec = sampler.stop()
    finally:
        child.kill()
        child.wait()
    assert not thread.is_alive()
    count = len(rec.samples)
    time.sleep(0.1)
    assert len(rec.samples) == count   # nothing after stop
    assert [s.phase for s in rec.samples[:2]] == ["before"] * 2 and [s.phase for s in rec.samples[-2:]] == ["after"] * 2
    assert {s.phase for s in rec.samples[2:-2]} == {"during"}
    assert nvml.calls["init"] == 1 and nvml.calls["shutdown"] == 1
    assert nvml.calls["power"] == 2           # not supported: tried once per GPU, never again
    assert nvml.calls["name"] == 3            # each process named once
    assert all(s.power_w is None for s in rec.samples)
    temps = {s.temp_c for s in rec.samples}
    assert temps == {None, 40}                # a failing read leaves a gap and is tried again
    first = rec.samples[0]
    assert (first.util_gpu, first.reasons, first.pcie_gen, first.pcie_width) == (99, 0, 5, 16)
    assert {(pid, own) for pid, _, own in first.procs} == {(os.getpid(), True), (child.pid, True), (1, False)}

    got = summarize(rec)
    gpu0, gpu1 = got["gpus"]
    assert gpu0["name"] == "NVIDIA H200" and gpu0["mig"] == "off"
    assert [(p["pid"], p["name"]) for p in gpu0["other_processes"]] == [(1, "proc-1")]
    assert gpu0["own_pids_seen"] == sorted([os.getpid(), child.pid])
    assert gpu1["other_processes"] == [] and gpu1["utilization"]["max_during"] == {"gpu": 0, "memory": 0}


def test_sampler_without_nvml_does_nothing():
    nvml = FakeNvml([], init_error=NVMLError(9))   # DRIVER_NOT_LOADED
    sampler = Sampler(nvml).start()
    assert sampler._thread is None
    rec = sampler.stop()
    assert rec.samples == [] and "NVML" in rec.unavailable
    assert "shutdown" not in nvml.calls
    assert summarize(rec)["available"] is False
    # the host is read without NVML too, when started and when stopped (this machine has /proc)
    assert [h.phase for h in rec.host] == ["before", "after"] and rec.cpus == os.cpu_count()
    assert all(h.cpu_busy_s > 0 and h.own_cpu_s > 0 and h.load_1m is not None for h in rec.host)
    assert summarize(rec)["host"]["cpu_s"]["others"] >= 0

    no_gpu = FakeNvml([], gpus=0)
    with Sampler(no_gpu) as sampler:
        assert sampler._thread is None
    assert sampler.recording.unavailable == "NVML sees no GPU" and no_gpu.calls["shutdown"] == 1


def test_sampler_with_the_installed_nvml():
    pytest.importorskip("pynvml")
    with Sampler(interval_s=0.05) as sampler:
        time.sleep(0.1)
    rec = sampler.recording
    if rec.unavailable:   # this machine: nvidia-ml-py but no driver
        assert rec.samples == [] and summarize(rec)["available"] is False
    else:
        assert {s.phase for s in rec.samples} >= {"before", "after"}
        assert summarize(rec)["gpus"]


def test_leaves_import_no_torch():
    code = "import sys, bench.driver.telemetry, bench.analysis.ncclog; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
