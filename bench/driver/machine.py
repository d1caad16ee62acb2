"""The machine a run measures, or a plan is for: its label, device, GPUs and their links, NUMA
nodes, and the ranks a launcher started. This machine's facts come from its GPUs as CUDA numbers
them (NVML's answer for a plan, torch's for a run), sysfs and `nvidia-smi topo -m`; a
machine of conf/instance from its entry."""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field

from bench import ConfigError, lazy
from bench.config.settings import InstanceSettings, check_name
from bench.driver.launcher import Layout, launcher_layout
from bench.gpus import Gpu
from bench.links import NVLINK_LINK_GBPS, Speeds
from bench.measure import numa

torch = lazy.module("torch")


@dataclass
class Machine:
    """What a run measures on, or a plan is for (here=False: a conf/instance entry or a recorded run, probed nowhere)."""

    label: str                                      # the instance label: <out_dir>/<label>/, results/reference/<label>
    device: str                                     # cuda | cpu
    gpus: int
    speeds: Speeds = field(default_factory=Speeds)  # PCIe, NVLink, each pair's link class
    gpu_model: str = ""                             # 'h200': finds references of other GPU counts
    layout: Layout | None = None                    # ranks of torchrun/srun, when they started this
    here: bool = True
    numa: numa.Topology | None = None
    gpu_nodes: tuple[int | None, ...] = ()
    cores: int | None = None                        # its CPU cores where not this machine (None: probed here)

    def describe(self) -> str:
        if self.device == "cpu":
            return "no GPU (cpu)"
        classes = sorted(set(self.speeds.classes.values()))
        links = f" ({', '.join(classes)})" if classes else ""
        ranks = f", {self.layout.world_size} ranks on {self.layout.nnodes} node(s)" if self.layout else ""
        return f"{self.gpus} GPU(s){links}{ranks}"


def cuda_gpus() -> list[Gpu]:
    """The CUDA GPUs this process sees, as CUDA says through torch (which starts CUDA): a run's.
    A plan takes NVML's answer (bench.gpus.nvml_gpus), with neither torch nor CUDA."""
    count = local_gpus()
    buses = numa.gpu_bus_ids() if count else []
    return [Gpu(torch.cuda.get_device_name(i), buses[i] if i < len(buses) else "") for i in range(count)]


def detect_device(choice: str, visible: list[Gpu]) -> str:
    """The device a run uses: `choice` (auto, cuda, cpu) with the GPUs `visible`."""
    if choice == "cuda" and not visible:
        raise ConfigError("device=cuda but no CUDA GPU is visible")
    if choice == "auto":
        return "cuda" if visible else "cpu"
    return str(choice)


def local_gpus() -> int:
    """CUDA GPUs visible to this process (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def slug(gpu_name: str) -> str:
    """The model's first word ('NVIDIA H100 80GB HBM3' -> h100), as conf/instance names them."""
    words = gpu_name.lower().replace("nvidia", "").split()
    return re.sub(r"[^a-z0-9]+", "-", words[0] if words else "gpu").strip("-")


def detected_label(visible: list[Gpu]) -> str:
    """A name for a machine conf/instance does not name with the GPUs `visible`: 'h100-x1', or 'cpu' without."""
    return f"{slug(visible[0].name)}-x{len(visible)}" if visible else "cpu"


def instance_label(name: str, visible: list[Gpu]) -> str:
    """The run folder's parent name: the instance's name, or for `local` the detected label
    (checked like any name, as it becomes a folder)."""
    if name != "local":
        return name
    label = detected_label(visible)
    check_name("instance label (detected)", label)
    return label


def this_machine(instance: InstanceSettings, device: str, system: dict, visible: list[Gpu]) -> Machine:
    """This machine from its description (bench.driver.inventory) and the GPUs `visible` (CUDA's or
    NVML's answer): GPUs, their link classes and NUMA nodes; the instance entry's link figures where
    the instance names them, else NVML's."""
    count = len(visible) if device == "cuda" else 0
    first = (system.get("gpus") or [{}])[0]
    speeds = Speeds(instance.pcie_gen or first.get("pcie_gen_max"), instance.pcie_width or first.get("pcie_width_max"),
                    instance.nvlink_gbps_per_gpu, system.get("links") or {})
    topo = numa.read_topology()
    nodes = tuple(numa.gpu_node(topo, gpu.bus_id) if gpu.bus_id else None for gpu in visible[:count])
    label = instance_label(instance.name, visible)
    model = re.fullmatch(r"(.+)-x\d+", label)
    return Machine(label, device, count, speeds, model.group(1) if model else "", launcher_layout(os.environ),
                   True, topo, nodes)


def instance_machine(instance: InstanceSettings) -> Machine:
    """A machine of conf/instance (its *.yaml) as a plan sees it: every pair of GPUs on
    NVLink (NVSwitch) where the entry gives NVLink, else across PCIe through the host (SYS)."""
    n = int(instance.gpu_count)
    link = f"NV{round(instance.nvlink_gbps_per_gpu / NVLINK_LINK_GBPS)}" if instance.nvlink_gbps_per_gpu else "SYS"
    classes = {f"{i},{j}": link for i in range(n) for j in range(n) if i != j}
    return Machine(instance.name, "cuda", n,
                   Speeds(instance.pcie_gen, instance.pcie_width, instance.nvlink_gbps_per_gpu, classes),
                   slug(instance.gpu or "") if instance.gpu else "", here=False,
                   cores=int(instance.cpu_cores) if instance.cpu_cores else None)


def recorded_machine(meta: dict) -> Machine:
    """The machine a saved run measured on, as its meta.json describes it: a plan for it probes
    nothing here (one NUMA node where none was recorded)."""
    system, instance = meta.get("system") or {}, meta.get("instance") or {}
    gpus = len(system.get("gpus") or []) if meta.get("device") == "cuda" else 0
    first = (system.get("gpus") or [{}])[0]
    speeds = Speeds(first.get("pcie_gen_max") or instance.get("pcie_gen"),
                    first.get("pcie_width_max") or instance.get("pcie_width"),
                    instance.get("nvlink_gbps_per_gpu"), system.get("links") or {})
    label = str(instance.get("label") or instance.get("name") or "recorded")
    return Machine(label, "cuda" if gpus else "cpu", gpus, speeds, slug(str(first.get("name", ""))) if gpus else "",
                   here=False, cores=system.get("cpu_count"))


def identity() -> dict:
    """What a resumed run must share with the run it continues: host, GPU model and count."""
    count = local_gpus()
    return {"hostname": socket.gethostname(), "gpu_count": count,
            "gpu_name": torch.cuda.get_device_name(0) if count else "cpu"}


def instance_mismatch(instance: InstanceSettings, gpus: list[str]) -> str:
    """What a named instance (a conf/instance entry) says that the GPUs this run has (their names) are
    not: its GPU count or model. '' when it fits, or is `local`, or names neither."""
    if instance.name == "local" or (instance.gpu is None and instance.gpu_count is None):
        return ""
    count_ok = instance.gpu_count is None or instance.gpu_count == len(gpus)
    # Loosely: the entry's words ('NVIDIA H200') among the device's name's ('NVIDIA H200 NVL').
    model_ok = instance.gpu is None or bool(gpus) and set(instance.gpu.lower().split()) <= set(gpus[0].lower().split())
    if count_ok and model_ok:
        return ""
    described = " ".join(str(x) for x in (f"{instance.gpu_count}x" if instance.gpu_count is not None else "",
                                          instance.gpu or "GPUs") if x)
    found = f"{len(gpus)}x {gpus[0]}" if gpus else "no GPU"
    return (f"instance={instance.name} is {described}, but this run has {found}; its results are labelled "
            f"{instance.name} with that entry's links and price all the same")
