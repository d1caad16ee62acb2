"""Where host memory lives relative to a GPU: the NUMA topology, and buffers placed on a chosen node.

On a two-socket machine a host buffer on the far socket crosses the inter-socket link on every
copy, which costs bandwidth; nvbandwidth, DCGM and SuperBench bind host memory to the GPU's
node, and comparing instances only makes sense when xferbench says which node it used.

The topology is read from sysfs under a root folder (default "/"), so tests describe machines
as files: /sys/devices/system/node/node<N>/{cpulist,distance} for the nodes,
/sys/bus/pci/devices/<bus id>/numa_node for each GPU (-1: the firmware does not say), and
/proc/self/status for the CPUs and memory nodes this process may use (containers restrict both).

Placing memory needs no libnuma: the thread is bound to the node's CPUs while it first touches
every page of a fresh anonymous mapping, and Linux's default policy (local allocation) puts each
page on the node of the CPU that faults it. Pinning afterwards (cudaHostRegister) locks those
pages where they are. Limits: a process or thread memory policy (numactl --membind/--interleave,
set_mempolicy) overrides first touch; a cpuset's mems restrict it (nodes outside
Mems_allowed are never chosen); a full node makes the kernel fall back to another one
silently; automatic NUMA balancing may move pages that are not pinned. pages_by_node() reads
back where the pages of a buffer are, from /proc/self/numa_maps, so a run can check.
cudaHostAlloc (torch's pin_memory=True) is not used: its pages are a driver mapping whose node
/proc cannot show, and torch's pinned-memory cache may hand back a block placed earlier on
another node.
"""
from __future__ import annotations

import mmap
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from bench import lazy

numpy = lazy.module("numpy")   # to touch pages when placing memory; reading the topology needs none

if TYPE_CHECKING:   # torch is imported where it is used: reading the topology needs no torch
    import torch

MODES = ("local", "remote", "none")
_LOCAL_DISTANCE, _REMOTE_DISTANCE = 10, 20   # what Linux assumes without a distance table
# Pinned for every CUDA context (portable) and mapped into the GPUs' address space: SM kernels
# (bench.kernels) load and store the pages through UVA. The flags are orthogonal: only flag 0
# implies both, on UVA systems.
_CUDA_HOST_REGISTER_FLAGS = 1 | 2
_HUGE_PAGE = 2 << 20


@dataclass(frozen=True)
class Node:
    id: int
    cpus: frozenset[int]
    distance: dict[int, int]     # node id -> relative distance (10 = local)


@dataclass(frozen=True)
class Topology:
    nodes: dict[int, Node]
    cpus_allowed: frozenset[int] | None = None   # None: not restricted (or not known)
    mems_allowed: frozenset[int] | None = None
    root: str = "/"

    def usable_cpus(self, node: int) -> frozenset[int]:
        """The node's CPUs this process may run on; empty where its memory is off limits."""
        if self.mems_allowed is not None and node not in self.mems_allowed:
            return frozenset()
        cpus = self.nodes[node].cpus
        return cpus if self.cpus_allowed is None else cpus & self.cpus_allowed


@dataclass(frozen=True)
class Placement:
    """Where to put a host buffer: the node, and the CPUs to first-touch it from (empty: anywhere)."""

    mode: str
    node: int | None
    cpus: frozenset[int]


def parse_cpulist(text: str) -> frozenset[int]:
    """'0-3,8-11' -> {0..3, 8..11}; the kernel's list format (an empty list is a CPU-less node)."""
    cpus: set[int] = set()
    for item in text.replace("\n", "").replace(" ", "").split(","):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"bad CPU list item {item!r} in {text!r}")
        cpus.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 3, 8} -> '0-3,8' (for notes and logs)."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _distances(node_dir: Path, ids: list[int], own: int) -> dict[int, int]:
    # The kernel lists one distance per online node, in node order.
    values = (_read(node_dir / "distance") or "").split()
    if len(values) == len(ids) and all(v.isdigit() for v in values):
        return dict(zip(ids, map(int, values)))
    return {i: _LOCAL_DISTANCE if i == own else _REMOTE_DISTANCE for i in ids}


def _allowed(status: str | None, key: str) -> frozenset[int] | None:
    m = re.search(rf"^{key}:\s*(\S*)\s*$", status or "", re.MULTILINE)
    return parse_cpulist(m.group(1)) if m else None


def read_topology(root: str | Path = "/") -> Topology:
    """NUMA nodes under `root`; a machine without /sys/devices/system/node is one node holding every CPU."""
    root = Path(root)
    node_root = root / "sys/devices/system/node"
    dirs = {int(p.name[4:]): p for p in node_root.glob("node*") if p.name[4:].isdigit()}
    status = _read(root / "proc/self/status")
    if not dirs:
        cpus = _allowed(status, "Cpus_allowed_list") or frozenset(range(os.cpu_count() or 1))
        return Topology({0: Node(0, cpus, {0: _LOCAL_DISTANCE})}, root=str(root))
    ids = sorted(dirs)
    nodes = {i: Node(i, parse_cpulist(_read(dirs[i] / "cpulist") or ""), _distances(dirs[i], ids, i)) for i in ids}
    return Topology(nodes, _allowed(status, "Cpus_allowed_list"), _allowed(status, "Mems_allowed_list"), str(root))


def sysfs_bus_id(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' (or nvbandwidth's '00000000:18:00') -> sysfs's '0000:18:00.0'."""
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?", bus_id.strip())
    if not m:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    domain, bus, device, function = m.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function or 0}"


def gpu_node(topo: Topology, bus_id: str) -> int | None:
    """The NUMA node of the GPU at `bus_id`; None where sysfs does not say (-1, or no such device)."""
    text = _read(Path(topo.root) / "sys/bus/pci/devices" / sysfs_bus_id(bus_id) / "numa_node")
    try:
        node = int((text or "").strip())
    except ValueError:
        return None
    return node if node in topo.nodes else None


def gpu_bus_ids() -> list[str]:
    """PCI bus ids of the CUDA devices, in CUDA's order; [] without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    if all(hasattr(p, "pci_bus_id") for p in props):
        return [f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0" for p in props]
    return _nvml_bus_ids()


def _nvml_bus_ids() -> list[str]:
    # Older torch lacks PCI ids in its device properties. NVML numbers GPUs in PCI order, which is
    # CUDA's order only with CUDA_DEVICE_ORDER=PCI_BUS_ID and no CUDA_VISIBLE_DEVICES reordering.
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception:   # no NVML library or driver: the caller treats the nodes as unknown
        return []
    try:
        ids = [nv.nvmlDeviceGetPciInfo(nv.nvmlDeviceGetHandleByIndex(i)).busId for i in range(nv.nvmlDeviceGetCount())]
        return [b.decode() if isinstance(b, bytes) else b for b in ids]
    finally:
        nv.nvmlShutdown()


def skip_reason(topo: Topology, node: int | None, mode: str) -> str | None:
    """Why host memory cannot be placed `mode` to a GPU on `node` (None: it can)."""
    if mode not in MODES:
        raise ValueError(f"NUMA mode {mode!r}; choose from {', '.join(MODES)}")
    if mode == "none":
        return None
    if len(topo.nodes) == 1:
        return "one NUMA node: all host memory is local" if mode == "remote" else None
    if node is None:
        return "the GPU's NUMA node is unknown (sysfs numa_node is -1), so local and remote cannot be told apart"
    if mode == "local":
        return None if topo.usable_cpus(node) else f"no CPUs of NUMA node {node} (the GPU's) are usable here"
    if not _remote_candidates(topo, node):
        return f"no other NUMA node than {node} has CPUs and memory usable here"
    return None


def _remote_candidates(topo: Topology, node: int) -> list[int]:
    return [n for n in topo.nodes if n != node and topo.usable_cpus(n)]


def placement(topo: Topology, node: int | None, mode: str) -> Placement | None:
    """Where host memory goes for a GPU on NUMA node `node`; None where skip_reason() says why not.

    local: the GPU's node (the only node on a one-node machine, whatever sysfs says of the GPU).
    remote: the farthest node by the distance table; ties go to the highest-numbered node.
    none: no binding (the kernel's default: wherever the allocating thread happens to run).
    """
    if skip_reason(topo, node, mode) is not None:
        return None
    if mode == "none":
        return Placement("none", None, frozenset())
    if len(topo.nodes) == 1:
        only = next(iter(topo.nodes))
        return Placement("local", only, topo.usable_cpus(only))
    target = node if mode == "local" else max(
        _remote_candidates(topo, node), key=lambda n: (topo.nodes[node].distance.get(n, _REMOTE_DISTANCE), n))
    return Placement(mode, target, topo.usable_cpus(target))


@contextmanager
def bind_thread(cpus: Iterable[int]) -> Iterator[frozenset[int]]:
    """Run the calling thread on `cpus` inside the block, then restore its previous CPU set.

    Threads started inside the block inherit the binding: initialise CUDA before entering it.
    """
    cpus = frozenset(cpus)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)   # pid 0: this thread only, not the whole process
    try:
        yield cpus
    finally:
        os.sched_setaffinity(0, before)


def _first_touched(cpus: frozenset[int], nbytes: int, kind: type[mmap.mmap]) -> mmap.mmap:
    # A private anonymous mapping has no pages until they are written; writing one byte per page
    # from the bound thread faults every page in there. numpy writes in this thread (a torch op
    # could hand the pages to its worker threads, which run anywhere).
    def touch() -> mmap.mmap:
        mapping = kind(-1, nbytes, flags=mmap.MAP_PRIVATE)
        if nbytes >= _HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
            # Where the kernel backs it with 2 MiB pages, a fault places 512 pages at once: a 1 GiB
            # buffer is placed in a fraction of the time, on the same node (first touch still rules).
            mapping.madvise(mmap.MADV_HUGEPAGE)
        numpy.frombuffer(mapping, dtype=numpy.uint8)[::mmap.PAGESIZE] = 0
        return mapping

    if not cpus:
        return touch()
    with bind_thread(cpus):
        return touch()


def allocate_on(cpus: Iterable[int], nbytes: int) -> torch.Tensor:
    """A pageable uint8 CPU tensor of `nbytes` whose pages were first touched from `cpus` (empty: anywhere)."""
    import torch

    return torch.frombuffer(_first_touched(frozenset(cpus), nbytes, mmap.mmap), dtype=torch.uint8)


class _PinnedMapping(mmap.mmap):
    """Anonymous memory page-locked with cudaHostRegister until the last tensor on it is gone."""

    address = 0

    def __del__(self) -> None:
        # Runs before the mapping is unmapped: the driver must let go of the pages first.
        if self.address:
            import torch

            torch.cuda.cudart().cudaHostUnregister(self.address)


def allocate_pinned_on(cpus: Iterable[int], nbytes: int) -> torch.Tensor:
    """A pinned uint8 CPU tensor of `nbytes` whose pages sit where `cpus` first touched them (empty: anywhere).

    Needs CUDA. The pages stay pinned while any view of the tensor lives.
    """
    import torch

    mapping = _first_touched(frozenset(cpus), nbytes, _PinnedMapping)
    tensor = torch.frombuffer(mapping, dtype=torch.uint8)
    cudart = torch.cuda.cudart()
    torch.cuda.check_error(cudart.cudaHostRegister(tensor.data_ptr(), nbytes, _CUDA_HOST_REGISTER_FLAGS))
    mapping.address = tensor.data_ptr()
    return tensor


def pages_by_node(address: int) -> dict[int, int]:
    """Resident pages per NUMA node of this process's mapping that holds `address` (from /proc/self/numa_maps).

    The kernel may have merged the mapping with a neighbouring one of the same kind; the counts
    then include the neighbour's pages. {} where numa_maps is missing (a kernel without NUMA).
    """
    start = _mapping_start(address)
    for line in (_read(Path("/proc/self/numa_maps")) or "").splitlines():
        fields = line.split()
        if fields and start is not None and int(fields[0], 16) == start:
            counts = (f[1:].split("=") for f in fields[2:] if re.fullmatch(r"N\d+=\d+", f))
            return {int(node): int(pages) for node, pages in counts}
    return {}


def _mapping_start(address: int) -> int | None:
    for line in (_read(Path("/proc/self/maps")) or "").splitlines():
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= address < hi:
            return lo
    return None


def one_node(cpus: frozenset[int] = frozenset()) -> Topology:
    """A machine of one NUMA node: what a plan for another machine assumes."""
    return Topology({0: Node(0, cpus, {0: _LOCAL_DISTANCE})})
