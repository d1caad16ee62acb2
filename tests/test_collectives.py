"""Collectives over gloo between real local processes: the same code path NCCL takes on GPUs."""
import datetime as dt
import os
import re
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as tdist

from bench import ConfigError, suites
from bench.measure.memory import RANK_HOST_BYTES, host_available_bytes
from bench.measure.timing import TimingConfig
from bench.results import load
from bench.suites.collectives import measure as collective_measure
from bench.suites.collectives.points import message_bytes, world_sizes
from bench.suites.collectives.settings import CollectiveOp, Settings
from bench.contract import Context

COLLECTIVES = suites.get("collectives")


def test_every_op_runs_and_verifies_on_two_and_three_ranks_in_one_run(xferbench):
    every = f"collectives.ops=[{','.join(CollectiveOp)}]"   # all_to_allv too, by name
    proc, runs = xferbench("suite=collectives", "collectives.nproc=[2,3]", "collectives.oversubscribe=true",
                           "sizes.max=4KiB", "sizes.factor=8", every,
                           "timing.trials=2", "timing.min_trial_s=0.001")
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert df.groupby("world_size").op.unique().map(set).to_dict() == {2: set(CollectiveOp),
                                                                         3: set(CollectiveOp)}
    assert (df.status == "ok").all() and df.verified.all()
    assert set(df.backend) == {"gloo"}
    df = df[df.world_size == 3]
    assert set(df.api) == {"torch"}  # the default asks for both apis; gloo has no NCCL to call
    assert (df.time_fastest_rank_s <= df.time_s).all() and df.time_fastest_rank_s.gt(0).all()
    # Split ops measure whole elements per rank: 3 ranks x 4-byte floats.
    split = df[df.op.isin(["all_gather", "reduce_scatter", "all_to_all", "all_to_allv"])]
    assert (split.size_bytes % 12 == 0).all()
    for op, factor in (("all_reduce", 4 / 3), ("all_gather", 2 / 3), ("broadcast", 1.0), ("all_to_allv", 2 / 3)):
        rows = df[df.op == op]
        assert (rows.busbw_gbps / rows.algbw_gbps).round(6).eq(round(factor, 6)).all()
    assert "all_reduce" in proc.stdout and "lat_us@8B" in proc.stdout


@pytest.mark.parametrize("op, n, factor", [("all_reduce", 8, 1.75), ("all_gather", 4, 0.75),
                                           ("reduce_scatter", 2, 0.5), ("sendrecv", 8, 1.0), ("reduce", 4, 1.0),
                                           ("broadcast", 1, 0.0), ("all_reduce", 1, 0.0),   # one rank: no bus
                                           ("all_to_allv", 4, 0.75)])
def test_bus_factors_follow_nccl_tests(op, n, factor):
    assert COLLECTIVES.op(op).bus_factor(n) == factor


def test_all_to_allv_splits_unevenly_and_each_pair_sends_what_it_receives():
    from bench.suites.collectives.ops import uneven

    assert uneven(64, 4, 0) == [16, 8, 16, 24] and uneven(64, 4, 1) == [8, 16, 24, 16]
    for n, count in ((2, 7), (3, 1000), (8, 5)):
        rows = [uneven(count, n, r) for r in range(n)]
        assert all(sum(r) == count for r in rows) and all(rows[a][b] == rows[b][a] for a in range(n) for b in range(n))


def test_all_to_allv_goes_to_nccl_as_one_group_of_uneven_sends_and_receives():
    from test_nccl import _fake_comm

    comm = _fake_comm()
    comm.nranks, comm.rank = 3, 1
    op = collective_measure._Op.__new__(collective_measure._Op)
    op.counts, op.inp, op.out = [2, 1, 3], torch.zeros(6), torch.zeros(6)
    comm.prepare(COLLECTIVES.op("all_to_allv").nccl(comm, op))(5)
    f32, p, q = 7, op.inp.data_ptr(), op.out.data_ptr()
    assert comm.lib.calls == [("ncclGroupStart",),
                              ("ncclSend", p, 2, f32, 0, "comm", 5), ("ncclRecv", q, 2, f32, 0, "comm", 5),
                              ("ncclSend", p + 8, 1, f32, 1, "comm", 5), ("ncclRecv", q + 8, 1, f32, 1, "comm", 5),
                              ("ncclSend", p + 12, 3, f32, 2, "comm", 5), ("ncclRecv", q + 12, 3, f32, 2, "comm", 5),
                              ("ncclGroupEnd",)]


def test_message_sizes_are_whole_elements_per_rank():
    assert message_bytes("all_gather", 8, "float32", 4) == 16
    assert message_bytes("all_reduce", 10, "float32", 4) == 8
    assert message_bytes("all_to_all", 1 << 20, "bfloat16", 3) == (1 << 20) // 6 * 6


def test_one_rank_worlds_are_not_graphed():
    """One rank moves nothing: NCCL's captured ops there are empty graphs or local copies."""
    ctx = Context(device="cuda", timing=TimingConfig(), sizes=[8, 1 << 20], gpu_count=2,
                  launches=("eager", "graph"), graph_max_bytes=16 << 20)
    settings = Settings()
    launches = {n: {p.launch for p in COLLECTIVES.points(settings, replace(ctx, world_size=n))} for n in (1, 2)}
    assert launches == {1: {"eager"}, 2: {"eager", "graph"}}


def test_the_nccl_api_stops_at_its_max_size():
    ctx = Context(device="cuda", timing=TimingConfig(), sizes=[8, 16 << 20, 64 << 20], gpu_count=2, world_size=2,
                  launches=("eager",))
    settings = Settings()
    assert {(p.api, p.size_bytes) for p in COLLECTIVES.points(settings, ctx) if p.op == "all_reduce"} == {
        ("torch", 8), ("torch", 16 << 20), ("torch", 64 << 20), ("nccl", 8), ("nccl", 16 << 20)}
    settings.nccl_max_size = None   # every size through both
    assert len([p for p in COLLECTIVES.points(settings, ctx) if p.op == "all_reduce"]) == 6


def _planned_worlds(capsys, *overrides: str) -> tuple[list[int], str]:
    """The world sizes a run would spawn (the run's checks, nothing started), and its stderr."""
    from bench.driver.machine import cuda_gpus, detect_device, this_machine
    from bench.driver.sweep import plan_suites
    from bench.driver.inventory import describe
    from test_plan import _cfg

    cfg = _cfg("suite=collectives", *overrides)
    gpus = cuda_gpus()
    machine = this_machine(cfg.instance, detect_device(cfg.device, gpus), describe(), gpus)
    [planned], _ = plan_suites(cfg, machine)
    return world_sizes(planned.settings, planned.ctx, planned.max_ranks), capsys.readouterr().err


def test_more_ranks_than_cores_are_capped_before_any_is_spawned(capsys):
    cores = len(os.sched_getaffinity(0))
    worlds, err = _planned_worlds(capsys, "collectives.nproc=[64]")
    assert worlds == [cores]
    assert err.splitlines() == [f"xferbench: collectives.nproc=[64] capped at the {cores} CPU "
                                f"core{'s' * (cores > 1)} here: world sizes [{cores}]"]


def test_ranks_are_capped_at_half_the_host_memory_available(capsys):
    """Ranks as many as memory holds (collectives.oversubscribe=true) would leave a shared host's
    other users nothing: a world takes half the memory available, each rank a process and 3 x sizes.max."""
    available = host_available_bytes()
    worlds, err = _planned_worlds(capsys, "collectives.nproc=[200]", "collectives.oversubscribe=true",
                                  f"sizes.max={available // 30}")
    each = RANK_HOST_BYTES + 3 * (available // 30)
    assert worlds[0] * each <= available / 2 < (worlds[0] + 2) * each   # + 2: memory freed meanwhile
    assert re.fullmatch(rf"xferbench: collectives.nproc=\[200\] capped at the {worlds[0]} ranks that fit in 50% of the "
                        r"[\d.]+ GiB of host memory available \(about [\d.]+ GiB each; the rest is left to the "
                        rf"machine\): world sizes \[{worlds[0]}\]\n", err), err
    # A quarter of the memory each: one rank in half of it, and gloo's collectives between CPU processes need two.
    with pytest.raises(ConfigError, match=r"^collectives: one rank only, the 1 rank that fit in 50% of the [\d.]+ GiB of "
                                          r"host memory available .*, and a collective needs 2 \(gloo: no traffic "
                                          r"between ranks\); lower sizes.max \(now [\d.]+ GiB\) or free host memory$"):
        _planned_worlds(capsys, "collectives.nproc=[2]", f"sizes.max={available // 12}")


def test_a_rank_too_big_for_the_host_memory_is_refused(xferbench_in_process):
    code, err, runs = xferbench_in_process("suite=collectives", "sizes.max=1TiB")
    assert code == 2 and not runs
    assert err.startswith("xferbench: error: sizes.max: collectives needs about 3.0 TiB of host memory a rank (a Python "
                          "process with torch, 256.0 MiB, and 3 x sizes.max) but only ")
    assert len(err.strip().splitlines()) == 1


def test_bad_nccl_max_size_is_one_line(xferbench):
    proc, runs = xferbench("suite=collectives", "collectives.nccl_max_size=lots")
    assert proc.returncode == 2 and not runs
    assert proc.stderr.strip() == ("xferbench: error: collectives.nccl_max_size='lots': not a size "
                                   "(use e.g. 4KiB, 1GiB, 4096)")


@pytest.fixture
def one_rank_group(tmp_path):
    tdist.init_process_group("gloo", rank=0, world_size=1, init_method=f"file://{tmp_path}/store",
                             timeout=dt.timedelta(seconds=30))
    ctx = Context(device="cpu", timing=TimingConfig(), sizes=[64])
    yield ctx, COLLECTIVES.start(Settings(), ctx)
    tdist.destroy_process_group()


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "broadcast", "all_to_all"])
def test_check_catches_wrong_data(one_rank_group, op):
    call = collective_measure._Op(COLLECTIVES.op(op), 64, "bfloat16", "torch", *one_rank_group)
    call.fill()
    call()
    assert call.correct()
    (call.out if call.out is not None else call.inp)[3] += 1
    assert not call.correct()


def test_patterns_are_exact_in_bfloat16():
    sums = sum(collective_measure._pattern(r, 0, 1000, torch.bfloat16, "cpu", True).double() for r in range(64))
    exact = sum(collective_measure._pattern(r, 0, 1000, torch.float64, "cpu", True) for r in range(64))
    assert torch.equal(sums, exact)


def test_checks_work_in_chunks(monkeypatch, one_rank_group):
    monkeypatch.setattr(collective_measure, "_CHECK_CHUNK", 7)  # many chunks, one partial
    call = collective_measure._Op(COLLECTIVES.op("all_gather"), 400, "float32", "torch", *one_rank_group)
    call.fill()
    assert torch.equal(call.inp, collective_measure._pattern(0, 0, 100, torch.float32, "cpu", False))
    call()
    assert call.correct()
    call.out[99] += 1  # in the last, partial chunk
    assert not call.correct()


def test_joins_torchrun_ranks_and_only_rank_0_writes(tmp_path):
    import subprocess
    import sys

    from conftest import env

    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "bench",
                           f"out_dir={out}", "progress=false", "suite=links", "sizes.max=64B",
                           "collectives.ops=[all_reduce,sendrecv]", "timing.trials=2"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env())
    assert proc.returncode == 0, proc.stderr
    runs = sorted(p.parent for p in out.rglob("meta.json"))
    assert len(runs) == 1  # rank 1 kept out of results/
    df = load(runs)
    assert set(df.suite) == {"collectives"} and set(df.world_size) == {2} and df.verified.all()
    assert proc.stderr.count("copy: skipped under torchrun") == 1


def test_nccl_api_without_gpus_is_one_line(xferbench):
    proc, runs = xferbench("suite=collectives", "collectives.api=[nccl]", timeout=60)
    assert proc.returncode == 2 and not runs
    assert proc.stderr.strip().splitlines() == [
        "xferbench: error: collectives.api=[nccl] calls NCCL, which needs CUDA GPUs; without them use "
        "collectives.api=[torch] (gloo)"]


def _rank_processes(pid: int) -> list[int]:
    """The rank processes `pid` started (bench/driver/rank_start.py) that are still alive."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == str(pid) and fields[0] != "Z" and b"rank_start" in command:
            found.append(int(stat.parent.name))
    return found


def test_a_distributed_suites_ranks_start_while_the_suite_before_it_measures(xferbench_in_process, monkeypatch):
    """On a machine with cores to spare, the collectives' ranks load torch while the copy suite
    measures its large points, and take their work when its turn comes; where the suite before
    them fails, they are stopped with it; where it has no large point, they start in their turn."""
    from bench.driver import rank_group
    from bench.suites.copy import Copy

    started = []
    real = rank_group.start_world

    def recording(nproc, env, suite, log_dir=None, progress=False):
        world = real(nproc, env, suite, log_dir, progress)
        started.append((suite, world.nproc, [r.proc.poll() for r in world.ranks], rank_group.AHEAD_FROM_BYTES))
        return world

    monkeypatch.setattr(rank_group, "SPARE_CORES", 0)
    monkeypatch.setattr(rank_group, "AHEAD_FROM_BYTES", 16 << 10)   # CPU sweeps stop at 16 MiB: from 16 KiB here
    monkeypatch.setattr(rank_group, "start_world", recording)
    code, err, runs = xferbench_in_process("suite=links", "sizes.max=64KiB", "collectives.ops=[all_reduce]")
    assert code == 0, err
    assert started == [("collectives", 2, [None, None], 16 << 10)]   # started once, alive, while copy measured
    rows = load(runs[0])
    assert set(rows[rows.suite == "collectives"].world_size) == {2} and (rows.status == "ok").all()

    real_measure = Copy.measure

    def broken(self, point, settings, ctx, state):   # fails once the ranks have started
        if point.size_bytes >= 32 << 10:
            raise RuntimeError("a copy that fails")
        return real_measure(self, point, settings, ctx, state)

    monkeypatch.setattr(Copy, "measure", broken)
    code, err, _ = xferbench_in_process("suite=links", "sizes.max=64KiB", "collectives.ops=[all_reduce]")
    assert code == 1 and "a copy that fails" in err
    assert len(started) == 2 and not _rank_processes(os.getpid())   # the ranks started ahead went with the run
    monkeypatch.setattr(Copy, "measure", real_measure)
    monkeypatch.setattr(rank_group, "AHEAD_FROM_BYTES", 1 << 40)   # no point that large: started in their turn
    code, err, _ = xferbench_in_process("suite=links", "sizes.max=64KiB", "collectives.ops=[all_reduce]")
    assert code == 0, err
    assert len(started) == 3 and started[-1][3] == 1 << 40


def test_a_worlds_port_is_free_and_below_the_ports_outgoing_connections_are_given():
    """Rank 0 listens on the port some seconds after it is picked: one from the ephemeral range
    could be an outgoing connection's by then."""
    from bench.driver import rank_group
    below = int(rank_group.EPHEMERAL_PORTS.read_text().split()[0]) if rank_group.EPHEMERAL_PORTS.exists() else None
    ports = {rank_group._free_port() for _ in range(5)}
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))   # free: nothing listens on it
        if below is not None and below > rank_group.LOWEST_PORT:
            assert rank_group.LOWEST_PORT <= port < below


def test_held_collectives_without_the_drivers_stream_memory_operations_are_skipped_with_the_reason(monkeypatch):
    from bench.measure import flags
    from bench.measure.consensus import Consensus

    def no_driver(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    flags._driver.cache_clear()
    monkeypatch.setattr(flags.ctypes, "CDLL", no_driver)
    ctx = Context("cuda", TimingConfig(), [8], gpu_count=2, launches=("held",), held_max_bytes=8, world_size=2)
    try:
        point = next(p for p in COLLECTIVES.points(Settings(ops=[CollectiveOp.broadcast], nproc=[2]), ctx)
                     if p.launch == "held")
        (row,) = collective_measure.measure_point(point, ctx, collective_measure.CollectivesState(ctx, Consensus(None)))
    finally:
        flags._driver.cache_clear()
    assert row.status == "skipped" and row.note.startswith(
        "held collectives need the driver's stream memory operations: no CUDA driver library (libcuda.so.1)")
