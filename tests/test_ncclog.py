"""bench.analysis.ncclog: NCCL's INFO output parsed into versions, variables, communicators and the
transport per peer pair.

tests/data/nccl holds real logs from GPU runs (see its README). The other cases are built here
line by line from NCCL's own format strings (NVIDIA/nccl src/transport/{p2p,shm,net,coll_net}.cc
and src/init.cc at the tags named), one per historical format the parser must know. The formats
were checked against logs users posted: github.com/NVIDIA/nccl/issues/1538 (P2P/CUMEM),
/1189 ([send]/[receive] via NET/IB/N/GDRDMA), /1817 and /1609 (SHM/direct/direct), /952
(P2P/IPC/read, NET/Socket), /707 and /634 (bus ids in brackets, no connIndex), /1814
(NET/IBext_v8, the channel counts, Init COMPLETE without a function name), /1412
(ncclCommInitRank ... Init COMPLETE); github.com/NVIDIA/nccl-tests/issues/166 (SHM and
NET/Socket in one job); github.com/aws/aws-ofi-nccl/issues/715 (P2P/CUMEM/read, timestamps).
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from bench.analysis.ncclog import parse_files, parse_lines, parse_run_dir

DATA = Path(__file__).resolve().parent / "data" / "nccl"
ONE_RANK = DATA / "h200-x1-one-rank.log"   # NCCL 2.28.9, one rank on an H200 VM: no peers


def info(host: str, pid: int, dev: int, msg: str) -> str:
    return f"{host}:{pid}:{pid + 40} [{dev}] NCCL INFO {msg}"


def test_real_one_rank_log():
    log = parse_files([ONE_RANK])
    assert log.version == "2.28.9+cuda13.0"
    assert log.env == {"NCCL_NVLS_ENABLE": "0"}
    (comm,) = log.comms
    assert comm.key == "0x780b6d2742cf4884"
    assert (comm.nranks, comm.nnodes, comm.local_ranks) == (1, 1, 1)
    assert (comm.channels, comm.p2p_channels, comm.p2p_channels_per_peer, comm.nvls_channels) == (64, 64, 64, 0)
    assert comm.network == "Socket"
    assert comm.ranks[0].gpu == 0 and comm.ranks[0].bus_id == "60" and comm.ranks[0].host == "vm"
    assert comm.connections == [] and log.describe_pairs() == []
    json.dumps(log.to_dict())   # plain data, for meta.json


def test_run_folder_and_a_file_cut_mid_line(tmp_path):
    text = ONE_RANK.read_text()
    cut = text.index("Using network Socket") + len("Using network Sock")   # the rank died here
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank-0.log").write_text(text[:cut])
    (ranks / "notes.txt").write_text(info("vm", 9, 0, "NCCL_P2P_DISABLE set by environment to 1") + "\n")
    log = parse_run_dir(tmp_path)
    assert log.sources == [str(ranks / "rank-0.log")]   # only *.log
    assert log.version == "2.28.9+cuda13.0"
    assert log.env == {}                                  # its NCCL_NVLS_ENABLE line came later
    assert log.comms == []                                # Init START was not reached
    assert parse_run_dir(tmp_path / "absent").comms == []


def test_a_committed_run_folder_keeps_its_ranks_output_compressed(tmp_path):
    plain, packed = tmp_path / "plain" / "ranks", tmp_path / "packed" / "ranks"
    plain.mkdir(parents=True), packed.mkdir(parents=True)
    shutil.copy(ONE_RANK, plain / "rank-0.log")
    (packed / "rank-0.log.gz").write_bytes(gzip.compress(ONE_RANK.read_bytes()))
    read_plain, read_packed = parse_run_dir(plain.parent), parse_run_dir(packed.parent)
    assert read_packed.sources == [str(packed / "rank-0.log.gz")]
    assert read_packed.comms and read_packed.to_dict() | {"sources": []} == read_plain.to_dict() | {"sources": []}


def _two_ranks_2_28(via: str, env: str = "") -> tuple[list[str], list[str]]:
    """Two processes on one host, GPUs 2 and 5 (CUDA_VISIBLE_DEVICES=2,5): ring both ways on two
    channels, plus a send/recv connection (connIndex 1). Format: NCCL 2.28.9."""
    comm_id = "0x5ae77eb5ea4ec1ee"
    files = []
    for rank, (pid, gpu, bus) in enumerate([(1001, 2, "4b000"), (1002, 5, "9a000")]):
        peer, peer_gpu = 1 - rank, 5 if rank == 0 else 2
        lines = [
            "some python output before NCCL starts",
            info("node-a", pid, 0, "NCCL version 2.28.9+cuda12.9") if rank == 0 else "",
            info("node-a", pid, 0, env) if env else "",
            info("node-a", pid, 0, "Using network IB"),
            info("node-a", pid, 0, f"ncclCommInitRankConfig comm 0x{pid}aa rank {rank} nranks 2 cudaDev {rank} "
                                   f"nvmlDev {gpu} busId {bus} commId {comm_id} - Init START"),
            info("node-a", pid, 0, f"comm 0x{pid}aa rank {rank} nRanks 2 nNodes 1 localRanks 2 localRank {rank} MNNVL 0"),
        ]
        lines += [info("node-a", pid, 0, f"Channel {ch:02d}{via.format(ch=ch, src=rank, sg=gpu, dst=peer, dg=peer_gpu)}")
                  for ch in range(2)]
        lines += [info("node-a", pid, 0, "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, "
                                         "32 p2p channels per peer"),
                  info("node-a", pid, 0, f"ncclCommInitRankConfig comm 0x{pid}aa rank {rank} nranks 2 cudaDev {rank} "
                                         f"nvmlDev {gpu} busId {bus} commId {comm_id} - Init COMPLETE"),
                  "[rank0]: step 1 done"]
        files.append(lines)
    return files[0], files[1]


P2P_2_28 = "/0 : {src}[{sg}] -> {dst}[{dg}] via P2P/CUMEM/read"   # p2p.cc, nvmlDev in brackets
SHM_2_28 = " : {src}[{sg}] -> {dst}[{dg}] via SHM/direct/direct"   # shm.cc: no connIndex


@pytest.mark.parametrize("via, env, kind, variant", [
    (P2P_2_28, "", "P2P", "CUMEM/read"),
    (SHM_2_28, "NCCL_P2P_DISABLE set by environment to 1", "SHM", "direct/direct"),
])
def test_two_ranks_merged_by_comm_id(tmp_path, via, env, kind, variant):
    rank0, rank1 = _two_ranks_2_28(via, env)
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank-0.log").write_text("\n".join(rank0) + "\n")
    (tmp_path / "ranks" / "rank-1.log").write_text("\n".join(rank1) + "\n")
    log = parse_run_dir(tmp_path)
    (comm,) = log.comms
    assert (comm.nranks, comm.nnodes, comm.local_ranks, comm.channels, comm.network) == (2, 1, 2, 24, "IB")
    assert {r: i.gpu for r, i in comm.ranks.items()} == {0: 2, 1: 5}
    assert len(comm.connections) == 4
    pairs = [(p.src_rank, p.dst_rank, p.src_gpu, p.dst_gpu, p.transports, p.channels) for p in comm.pairs()]
    assert pairs == [(0, 1, 2, 5, {kind: [variant]}, 2), (1, 0, 5, 2, {kind: [variant]}, 2)]
    assert log.describe_pairs() == [f"GPU 2 -> GPU 5: {kind} ({variant})", f"GPU 5 -> GPU 2: {kind} ({variant})"]
    assert log.env == ({"NCCL_P2P_DISABLE": "1"} if env else {})


def test_net_lines_across_two_nodes():
    # NCCL 2.27+ net.cc: "[send] via NET/%s/%d%s%s%s" and PXN's "NET/%s/%d(%d)...", "(PCI)" after GDRDMA
    comm_id = "0x49bbd7790311d5eb"
    lines = [
        info("node-a", 11, 0, "NCCL version 2.27.3+cuda12.9"),
        info("node-a", 11, 0, "NCCL_IB_HCA set to mlx5_0,mlx5_1"),
        info("node-a", 11, 0, "NCCL_SOCKET_IFNAME set by environment to eth0"),
        info("node-a", 11, 0, "Using network IB"),
        info("node-a", 11, 0, f"ncclCommInitRank comm 0x8ec0ac0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 7000 "
                              f"commId {comm_id} - Init START"),
        info("node-b", 21, 3, "Using network IB"),
        info("node-b", 21, 3, f"ncclCommInitRank comm 0x7fa0 rank 1 nranks 2 cudaDev 3 nvmlDev 3 busId c8000 "
                              f"commId {comm_id} - Init START"),
        info("node-a", 11, 0, "comm 0x8ec0ac0 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0"),
        info("node-a", 11, 0, "Channel 00/0 : 0[0] -> 1[3] [send] via NET/IB/0/GDRDMA"),
        info("node-b", 21, 3, "Channel 00/0 : 0[0] -> 1[3] [receive] via NET/IB/1/GDRDMA"),
        info("node-b", 21, 3, "Channel 00/0 : 1[3] -> 0[0] [send] via NET/IB/1(0)/GDRDMA(PCI)/Shared"),
        info("node-a", 11, 0, "Channel 00/0 : 1[3] -> 0[0] [receive] via NET/IB/0/GDRDMA"),
        "node-a:11:51 [0] transport/net_ib.cc:818 NCCL WARN NET/IB : Got completion with error 12",
    ]
    log = parse_lines(lines)
    assert log.env == {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "eth0"}
    (comm,) = log.comms
    assert comm.hosts == ["node-a", "node-b"] and comm.nnodes == 2
    fwd, back = comm.pairs()
    assert (fwd.src_gpu, fwd.dst_gpu, fwd.transports, fwd.channels) == (0, 3, {"NET/IB": ["0/GDRDMA", "1/GDRDMA"]}, 1)
    assert back.transports == {"NET/IB": ["0/GDRDMA", "1(0)/GDRDMA(PCI)/Shared"]}
    assert log.describe_pairs() == ["node-a GPU 0 -> node-b GPU 3: NET/IB (0/GDRDMA, 1/GDRDMA)",
                                    "node-b GPU 3 -> node-a GPU 0: NET/IB (0/GDRDMA, 1(0)/GDRDMA(PCI)/Shared)"]
    assert log.warnings == ["NET/IB : Got completion with error 12"]


def test_socket_and_plugin_names_and_prefixes():
    lines = [
        # a launcher's tag and a timestamp before NCCL's prefix; a plugin name with a space
        "[default0]:gpu-1:501:601 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
        "[2025-06-01 10:00:00] gpu-1:502:602 [1] NCCL INFO Channel 03/0 : 1[1] -> 0[0] [send] via NET/AWS Libfabric/0/GDRDMA",
        "gpu-1:503:603 [2] NCCL INFO Channel 01/1 : 2[2] -> 3[3] via P2P/direct pointer/read",
        "gpu-1:503:603 [2] NCCL INFO Channel 02/0 : 2[2] -> 3[3] via P2P/IPC/CE",
        "gpu-1:503:603 [2] NCCL INFO Channel 04/0 : 2[2] -> 3[3] via P2P/indirect/1[1]/read",
        "gpu-1:503:603 [2] NCCL INFO Channel 05/0 : 2[2] ->",   # cut short: ignored
        "gpu-1:503:603 [2] NCCL INFO Channel 05/64 : 0 1 2 3",  # a ring, not a connection
    ]
    log = parse_lines(lines)
    (comm,) = log.comms            # no Init lines: kept, unattributed
    assert comm.key == "" and len(comm.connections) == 5
    kinds = {(p.src_rank, p.dst_rank): p.transports for p in comm.pairs()}
    assert kinds == {(0, 1): {"NET/Socket": ["0"]}, (1, 0): {"NET/AWS Libfabric": ["0/GDRDMA"]},
                     (2, 3): {"P2P": ["IPC/CE", "direct pointer/read", "indirect/1[1]/read"]}}
    # no version: one- and two-digit brackets read as GPU indices
    assert log.describe_pairs()[0] == "GPU 0 -> GPU 1: NET/Socket (0)"


def test_bus_id_brackets_before_2_18_3():
    # NCCL 2.18.1: "%d[%lx] -> %d[%lx]" (PCI bus ids) and no Init START, only COMPLETE
    comm_id = "0xdf38d22419fae72b"
    lines = [
        info("box", 7, 0, "NCCL version 2.18.1+cuda12.1"),
        info("box", 7, 0, f"comm 0x55aa rank 0 nranks 2 cudaDev 0 busId 1b000 commId {comm_id} - Init COMPLETE"),
        info("box", 8, 1, f"comm 0x66bb rank 1 nranks 2 cudaDev 1 busId 3d000 commId {comm_id} - Init COMPLETE"),
        info("box", 7, 0, "Channel 00/0 : 0[1b000] -> 1[3d000] via P2P/IPC/read"),
        info("box", 8, 1, "Channel 00 : 1[3d000] -> 0[1b000] via SHM/direct/direct"),
        info("box", 8, 1, "Channel 01 : 1[3d000] -> 7[e3000] via SHM/direct/direct"),   # a rank not logged
    ]
    log = parse_lines(lines)
    assert log.nvml_format() is False
    comm, unattributed = log.comms
    assert comm.key == comm_id and comm.channels is None and comm.nnodes is None
    got = {(p.src_rank, p.dst_rank): (p.src_gpu, p.dst_gpu, list(p.transports)) for p in comm.pairs()}
    assert got == {(0, 1): (0, 1, ["P2P"]), (1, 0): (1, 0, ["SHM"])}
    # rank 7 is past nranks 2: not this communicator's; kept apart, its GPU unknown
    assert [(c.key, p.dst_rank, p.dst_gpu) for c, p in log.pairs() if c is unattributed] == [("", 7, None)]
    assert parse_lines(lines[3:4]).describe_pairs() == ["rank 0 -> rank 1: P2P (IPC/read)"]   # no map: ranks


def test_connections_go_to_the_communicator_that_fits():
    # One process (rank 3 of 4, GPU 3) also holds rank 1 of a 2-rank subgroup; connections are set
    # up lazily, after both communicators started. 2.24's split lines carry no commId.
    parent_id = "0xabc0"
    lines = [
        info("h", 5, 3, "NCCL version 2.24.3+cuda12.6"),
        info("h", 5, 3, f"ncclCommInitRankConfig comm 0x100 rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId 9b000 "
                        f"commId {parent_id} - Init START"),
        info("h", 5, 3, "ncclCommSplit comm 0x200 rank 1 nranks 2 cudaDev 3 nvmlDev 3 busId 9b000 parent 0x100 "
                        "splitCount 1 color 1 key 3- Init START"),
        info("h", 6, 2, f"ncclCommInitRankConfig comm 0x300 rank 2 nranks 4 cudaDev 2 nvmlDev 2 busId 8b000 "
                        f"commId {parent_id} - Init START"),
        info("h", 6, 2, "ncclCommSplit comm 0x400 rank 0 nranks 2 cudaDev 2 nvmlDev 2 busId 8b000 parent 0x300 "
                        "splitCount 1 color 1 key 2- Init START"),
        info("h", 5, 3, "Channel 00/0 : 3[3] -> 0[0] via P2P/CUMEM/read"),   # rank 3: only the 4-rank comm
        info("h", 5, 3, "Channel 00/1 : 1[3] -> 0[2] via SHM/direct/direct"),
        info("h", 6, 2, "Channel 00/1 : 0[2] -> 1[3] via P2P/CUMEM"),
    ]
    log = parse_lines(lines)
    world, sub = log.comms
    assert (world.key, world.nranks) == (parent_id, 4)
    assert (sub.key, sub.nranks) == (f"{parent_id}/split1/color1", 2)
    assert {r: i.gpu for r, i in sub.ranks.items()} == {0: 2, 1: 3}
    assert [(p.src_rank, p.dst_rank, p.transports) for p in world.pairs()] == [(3, 0, {"P2P": ["CUMEM/read"]})]
    assert [(p.src_gpu, p.dst_gpu, p.transports) for p in sub.pairs()] == [
        (2, 3, {"P2P": ["CUMEM"]}), (3, 2, {"SHM": ["direct/direct"]})]
    assert log.describe_pairs() == ["GPU 2 -> GPU 3: P2P (CUMEM)", "GPU 3 -> GPU 0: P2P (CUMEM/read)",
                                    "GPU 3 -> GPU 2: SHM (direct/direct)"]


def test_network_said_after_init_start_and_collnet():
    # Older NCCL said "Using network" after Init START; CollNet lines name one rank (coll_net.cc).
    lines = [
        info("n1", 3, 0, "ncclCommInitRank comm 0x10 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 "
                         "commId 0x77 - Init START"),
        info("n1", 3, 0, "Using network IBext_v8"),
        info("n1", 3, 0, "CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA"),
        info("n1", 3, 0, "16 coll channels, 16 nvls channels, 16 p2p channels, 1 p2p channels per peer"),
    ]
    (comm,) = parse_lines(lines).comms
    assert comm.network == "IBext_v8"
    assert (comm.channels, comm.nvls_channels, comm.collnet_channels, comm.p2p_channels_per_peer) == (16, 16, None, 1)
    (pair,) = comm.pairs()
    assert (pair.src_gpu, pair.dst_rank, pair.transports) == (0, None, {"COLLNET": ["SHARP/0/GDRDMA"]})


# Real multi-rank logs: captured on a GPU machine by scripts/capture_nccl_logs.py, one folder per
# rank count (<gpu>-x<N>) and transport setting, each laid out as a run folder (ranks/rank-<R>.log).
CAPTURED = {"default": "P2P", "p2p-off": "SHM", "p2p-shm-off": "NET/Socket"}


def _captured(setting: str) -> list:
    return sorted(p for p in DATA.glob(f"*-x*/{setting}") if p.parent.name.rsplit("-x", 1)[-1].isdigit())


@pytest.mark.parametrize("setting, kind", sorted(CAPTURED.items()))
def test_captured_multi_rank_logs(setting, kind):
    found = _captured(setting)
    if not found:
        pytest.skip(f"no captured {setting} log yet (scripts/capture_nccl_logs.py on 2 or more GPUs)")
    for run in found:
        ranks = int(run.parent.name.rsplit("-x", 1)[-1])
        log = parse_run_dir(run)
        assert len(log.sources) == ranks and log.version
        pairs = [p for _, p in log.pairs()]
        seen = {(p.src_gpu, p.dst_gpu) for p in pairs}
        # the send/recv around the ring connects every rank to the next
        assert {(r, (r + 1) % ranks) for r in range(ranks)} <= seen, run
        assert all(a != b and {a, b} <= set(range(ranks)) for a, b in seen), run
        assert {k for p in pairs for k in p.transports} == {kind}, run
        assert all(re.match(r"GPU \d -> GPU \d: ", line) and kind in line for line in log.describe_pairs())


def test_logs_of_two_and_four_ranks_were_captured():
    """The data the test above reads: both rank counts, every setting (a GPU machine of 4 made them)."""
    counts = {p.parent.name.rsplit("-x", 1)[-1] for setting in CAPTURED for p in _captured(setting)}
    if not counts:
        pytest.skip("no captured logs yet (scripts/capture_nccl_logs.py)")
    assert {"2", "4"} <= counts
    assert all(len(_captured(setting)) == len(_captured("default")) for setting in CAPTURED)


def test_unreadable_and_binary_files_add_nothing(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_bytes(b"\xff\xfe\x00garbage\nNCCL INFO\n")
    log = parse_files([junk, tmp_path / "missing.log", ONE_RANK])
    assert log.sources == [str(junk), str(ONE_RANK)] and len(log.comms) == 1
    shutil.copy(ONE_RANK, tmp_path / "again.log")
    assert len(parse_files([ONE_RANK, tmp_path / "again.log"]).comms) == 1   # same commId: one comm
