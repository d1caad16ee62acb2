"""bench.measure.numa: topologies as fake sysfs trees, and binding and first-touch placement on this machine."""
from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import pytest
import torch

from bench.measure import numa

# A two-socket host with 8 GPUs, 4 behind each socket (bus ids as NVML writes them).
SOCKET0_GPUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]
SOCKET1_GPUS = ["00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]


def _tree(root: Path, nodes: dict[int, tuple[str, str]], gpus: dict[str, int] | None = None,
          status: str | None = None) -> Path:
    """A sysfs-like tree: node id -> (cpulist, distance row); GPU bus id -> numa_node."""
    for i, (cpulist, distance) in nodes.items():
        d = root / f"sys/devices/system/node/node{i}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
        (d / "distance").write_text(distance + "\n")
    (root / "sys/devices/system/node/possible").parent.mkdir(parents=True, exist_ok=True)
    (root / "sys/devices/system/node/possible").write_text("0-7\n")   # not a node folder: ignored
    for bus_id, node in (gpus or {}).items():
        d = root / "sys/bus/pci/devices" / numa.sysfs_bus_id(bus_id)
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{node}\n")
    if status is not None:
        (root / "proc/self").mkdir(parents=True)
        (root / "proc/self/status").write_text(status)
    return root


@pytest.fixture
def two_sockets(tmp_path):
    gpus = {**{b: 0 for b in SOCKET0_GPUS}, **{b: 1 for b in SOCKET1_GPUS}}
    return numa.read_topology(_tree(tmp_path, {0: ("0-15,32-47", "10 21"), 1: ("16-31,48-63", "21 10")}, gpus))


def test_one_node_machine_has_no_remote_memory(tmp_path):
    topo = numa.read_topology(_tree(tmp_path, {0: ("0-7", "10")}, {"00000000:18:00.0": -1}))
    assert numa.gpu_node(topo, "00000000:18:00.0") is None          # -1: the firmware does not say
    local = numa.placement(topo, None, "local")
    assert local == numa.Placement("local", 0, frozenset(range(8)))  # the only node is local to everything
    assert numa.placement(topo, None, "remote") is None
    assert numa.skip_reason(topo, None, "remote") == "one NUMA node: all host memory is local"
    assert numa.placement(topo, 0, "none") == numa.Placement("none", None, frozenset())


def test_two_sockets_eight_gpus(two_sockets):
    topo = two_sockets
    assert sorted(topo.nodes) == [0, 1] and topo.nodes[1].distance == {0: 21, 1: 10}
    assert [numa.gpu_node(topo, b) for b in SOCKET0_GPUS + SOCKET1_GPUS] == [0] * 4 + [1] * 4
    near = numa.placement(topo, numa.gpu_node(topo, SOCKET1_GPUS[2]), "local")
    assert near.node == 1 and near.cpus == frozenset(range(16, 32)) | frozenset(range(48, 64))
    far = numa.placement(topo, numa.gpu_node(topo, SOCKET1_GPUS[2]), "remote")
    assert far.mode == "remote" and far.node == 0 and numa.format_cpulist(far.cpus) == "0-15,32-47"
    assert numa.placement(topo, 0, "remote").node == 1
    assert numa.skip_reason(topo, 0, "local") is None and numa.skip_reason(topo, 0, "remote") is None


def test_unknown_gpu_node_on_two_sockets(tmp_path):
    topo = numa.read_topology(_tree(tmp_path, {0: ("0-3", "10 21"), 1: ("4-7", "21 10")},
                                    {"00000000:18:00.0": -1}))
    node = numa.gpu_node(topo, "0000:18:00.0")
    assert node is None
    for mode in ("local", "remote"):
        assert numa.placement(topo, node, mode) is None
        assert "unknown" in numa.skip_reason(topo, node, mode)
    assert numa.placement(topo, node, "none").cpus == frozenset()
    assert numa.gpu_node(topo, "00000000:99:00.0") is None            # no such device


def test_remote_is_the_farthest_node_ties_to_the_highest(tmp_path):
    rows = {0: ("0-1", "10 12 32 32"), 1: ("2-3", "12 10 32 32"), 2: ("4-5", "32 32 10 12"), 3: ("6-7", "32 32 12 10")}
    topo = numa.read_topology(_tree(tmp_path, rows))
    assert numa.placement(topo, 0, "remote").node == 3
    assert numa.placement(topo, 3, "remote").node == 1
    assert numa.placement(topo, 2, "local").cpus == {4, 5}


def test_cpuless_nodes_and_container_limits_are_never_chosen(tmp_path):
    # node 2: memory without CPUs (a GPU's or CXL memory); the container may use node 0 and 1's first CPUs
    rows = {0: ("0-3", "10 21 40"), 1: ("4-7", "21 10 40"), 2: ("", "40 40 10")}
    status = "Name:\tpython\nCpus_allowed_list:\t0-4\nMems_allowed_list:\t0-2\n"
    topo = numa.read_topology(_tree(tmp_path, rows, status=status))
    assert topo.nodes[2].cpus == frozenset()
    assert numa.placement(topo, 0, "remote") == numa.Placement("remote", 1, frozenset({4}))
    limited = numa.read_topology(_tree(tmp_path / "b", rows, status=status.replace("0-2", "0")))
    assert numa.placement(limited, 0, "remote") is None                # memory of node 1 is off limits
    assert "no other NUMA node" in numa.skip_reason(limited, 0, "remote")
    assert "no CPUs of NUMA node 1" in numa.skip_reason(limited, 1, "local")


def test_missing_distance_table_assumes_the_kernel_default(tmp_path):
    topo = numa.read_topology(_tree(tmp_path, {0: ("0", ""), 1: ("1", "")}))
    assert topo.nodes[0].distance == {0: 10, 1: 20}


def test_no_node_folder_is_one_node_with_every_allowed_cpu(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/status").write_text("Cpus_allowed_list:\t0-2\n")
    topo = numa.read_topology(tmp_path)
    assert list(topo.nodes) == [0] and topo.nodes[0].cpus == {0, 1, 2}


def test_unknown_mode_is_an_error(two_sockets):
    with pytest.raises(ValueError, match="NUMA mode 'far'"):
        numa.placement(two_sockets, 0, "far")


@pytest.mark.parametrize("text, cpus", [
    ("0-3,8-11\n", set(range(4)) | set(range(8, 12))),
    ("", set()),
    ("\n", set()),
    ("7", {7}),
    ("5-5", {5}),
    ("0,2,4-5, 9", {0, 2, 4, 5, 9}),
    ("0-1,1-2", {0, 1, 2}),
])
def test_parse_cpulist(text, cpus):
    assert numa.parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["3-1", "a", "0-", "-1", "1-2-3", "0:1"])
def test_parse_cpulist_refuses_garbage(text):
    with pytest.raises(ValueError, match="bad CPU list"):
        numa.parse_cpulist(text)


def test_format_cpulist_round_trips():
    for text in ("0-15,32-47", "0", "1,3,5-7", ""):
        assert numa.format_cpulist(numa.parse_cpulist(text)) == text


@pytest.mark.parametrize("bus_id, sysfs", [
    ("00000000:18:00.0", "0000:18:00.0"), ("00000000:AB:00", "0000:ab:00.0"),
    ("0001:1B:00.1", "0001:1b:00.1"), ("18:00.0", "0000:18:00.0")])
def test_sysfs_bus_id(bus_id, sysfs):
    assert numa.sysfs_bus_id(bus_id) == sysfs


def test_sysfs_bus_id_refuses_garbage():
    with pytest.raises(ValueError, match="not a PCI bus id"):
        numa.sysfs_bus_id("GPU-1234")


# --- this machine --------------------------------------------------------------------------------

def test_this_machine_topology():
    topo = numa.read_topology("/")
    assert topo.nodes and all(n.distance[n.id] == 10 for n in topo.nodes.values())
    assert os.sched_getaffinity(0) <= frozenset().union(*(n.cpus for n in topo.nodes.values()))
    mine = next(n for n in topo.nodes.values() if min(os.sched_getaffinity(0)) in n.cpus)
    assert numa.placement(topo, mine.id, "local").node == mine.id


def test_bind_thread_binds_and_restores():
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with numa.bind_thread(one) as cpus:
        assert os.sched_getaffinity(0) == one == cpus
    assert os.sched_getaffinity(0) == before
    with pytest.raises(RuntimeError), numa.bind_thread(one):
        raise RuntimeError("the block fails")
    assert os.sched_getaffinity(0) == before


def test_bind_thread_binds_only_the_calling_thread():
    before = os.sched_getaffinity(0)
    inside: list[set[int]] = []
    entered, release = threading.Event(), threading.Event()

    def worker() -> None:
        with numa.bind_thread({min(before)}):
            inside.append(os.sched_getaffinity(0))
            entered.set()
            release.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    entered.wait(10)
    assert os.sched_getaffinity(0) == before and inside == [{min(before)}]
    release.set()
    t.join()


def test_first_touch_places_every_page_on_the_bound_node():
    topo = numa.read_topology("/")
    node = numa.placement(topo, min(topo.nodes), "local")
    before = os.sched_getaffinity(0)
    nbytes = 8 << 20
    buf = numa.allocate_on(node.cpus, nbytes)
    assert os.sched_getaffinity(0) == before
    assert buf.dtype == torch.uint8 and buf.numel() == nbytes and buf.data_ptr() % mmap.PAGESIZE == 0
    pages = numa.pages_by_node(buf.data_ptr())
    if not pages:
        pytest.skip("no /proc/self/numa_maps on this kernel")
    assert sum(pages.values()) >= nbytes // mmap.PAGESIZE      # every page is resident
    if node.node is not None:
        assert set(pages) == {node.node}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pinned_buffer_is_pinned_and_placed():
    torch.cuda.init()   # before binding: driver threads would inherit the binding
    topo = numa.read_topology("/")
    bus = numa.gpu_bus_ids()[0]
    node = numa.placement(topo, numa.gpu_node(topo, bus), "local")
    buf = numa.allocate_pinned_on(node.cpus if node else (), 4 << 20)
    assert buf.is_pinned()
    dev = torch.arange(4 << 20, device="cuda").to(torch.uint8)
    buf.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(buf, dev.cpu())
    if node and node.node is not None and (pages := numa.pages_by_node(buf.data_ptr())):
        assert max(pages, key=pages.get) == node.node
