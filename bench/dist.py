"""Process groups for distributed suites: spawn one local rank per GPU, or join torchrun/Slurm.

Spawned ranks are watched by the parent: when one exits with an error (or is killed) every
other rank is killed too, and the error names the rank, so no orphan is left behind. A rank
that hangs is caught by the collective timeout in its peers, which then exit with an error.
Ranks also die with the parent itself (a parent-death signal), even when it is SIGKILLed.
"""
from __future__ import annotations

import ctypes
import datetime as dt
import multiprocessing as mp
import threading
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Mapping

import torch
import torch.distributed as tdist

import bench
from bench import ConfigError
from bench.results import ResultsWriteError, RunWriter
from bench.runner import run_suite
from bench.suites import Context


class RankFailed(RuntimeError):
    """A rank ended with an error; the message names it."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _transport_env(transport: str, loopback: bool = True) -> dict[str, str]:
    """NCCL over plain sockets, as between nodes without InfiniBand. On loopback when every rank is
    on this host; across hosts NCCL picks the interface (or the user's NCCL_SOCKET_IFNAME)."""
    if transport != "socket":
        return {}
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}
    return {**env, "NCCL_SOCKET_IFNAME": "lo"} if loopback else env


@dataclass(frozen=True)
class Layout:
    """Where this process sits among ranks an external launcher started."""

    rank: int
    world_size: int
    local_rank: int
    nnodes: int


def launcher_layout(env: Mapping[str, str]) -> Layout | None:
    """This process's place under torchrun or srun, from their variables; None without a launcher.

    torchrun's variables win where both are set (torchrun started by srun, one agent a node). A
    Slurm batch script itself has SLURM_PROCID=0 and SLURM_NTASKS but is no task of a step: only
    srun sets SLURM_STEP_ID, so a plain `xferbench` in the script runs on its own instead of
    waiting for ranks that never come.
    """
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        per_node = int(env.get("LOCAL_WORLD_SIZE", world))
        nnodes = int(env.get("GROUP_WORLD_SIZE", 0)) or max(1, world // max(1, per_node))  # torchrun: one group a node
        return Layout(int(env["RANK"]), world, int(env.get("LOCAL_RANK", 0)), nnodes)
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        world = int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", 1)))
        nnodes = int(env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", 1)))
        return Layout(int(env["SLURM_PROCID"]), world, int(env.get("SLURM_LOCALID", 0)), nnodes)
    return None


def device_index(local_rank: int, visible: int) -> int:
    """The GPU a rank uses: its local rank, or the only GPU it sees (srun --gpus-per-task=1 and
    one torchrun agent per GPU hide the others through CUDA_VISIBLE_DEVICES)."""
    if visible == 1:
        return 0
    if local_rank >= visible:
        raise ConfigError(f"local rank {local_rank} but only {visible} GPU(s) visible to it; "
                          "start one rank per GPU, or give each rank one GPU")
    return local_rank


def _loopback(host: str) -> bool:
    try:
        return socket.gethostbyname(host).startswith("127.")
    except OSError:
        return False


def init_group(ctx: Context, backend: str, timeout_s: float) -> None:
    if backend == "nccl":
        torch.cuda.set_device(ctx.local_rank)
    kwargs = {"device_id": torch.device("cuda", ctx.local_rank)} if backend == "nccl" else {}
    tdist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size,
                             timeout=dt.timedelta(seconds=timeout_s), **kwargs)


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent exits: prctl on Linux, else a watchdog thread."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent_pid:  # the parent died before prctl took effect
                os._exit(1)
            return
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="xferbench-parent-watchdog").start()


def _rank_main(rank: int, world_size: int, env: dict, parent_pid: int, suite_name: str, cfg,
               ctx: Context, run_dir: str | None, run_id: str) -> None:
    die_with_parent(parent_pid)
    os.environ.update(env)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    from bench import suites

    ctx.rank, ctx.local_rank, ctx.world_size = rank, rank, world_size
    try:
        _run_rank(suites.get(suite_name), cfg, ctx, Path(run_dir) if run_dir else None, run_id)
    except ResultsWriteError as exc:  # rank 0 could not write (a full disk): one line, not a traceback
        # (the parent then names the rank and stops the others)
        sys.exit(f"xferbench: error: {exc}")


def _run_rank(suite: ModuleType, cfg, ctx: Context, run_dir: Path | None, run_id: str) -> None:
    backend = suite.backend(ctx)
    init_group(ctx, backend, float(cfg.collectives.timeout_s))
    try:
        writer = RunWriter(run_dir, run_id) if ctx.rank == 0 else None
        done = [writer.done if writer is not None else None]
        tdist.broadcast_object_list(done, src=0)  # a resumed run: every rank skips the same points
        run_suite(suite, cfg, ctx, writer, progress=cfg.progress, done=done[0])
        if writer is not None:
            writer.close()
        tdist.barrier()
        comm = ctx.extra.pop("nccl_comm", None)
        if comm is not None:
            comm.close()  # collective over the ranks: every rank is here, after the barrier
    finally:
        tdist.destroy_process_group()


def _kill_all(procs: list) -> None:
    for p in procs:
        if p.is_alive():
            try:
                os.kill(p.pid, signal.SIGKILL)  # SIGTERM would wait on a stopped or hung rank
            except ProcessLookupError:
                pass
    for p in procs:
        p.join(timeout=10)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def spawn(nproc: int, env: dict, args: tuple, timeout_s: float) -> None:
    """Start nproc ranks and wait; on the first rank to fail, kill the rest and raise RankFailed."""
    context = mp.get_context("spawn")
    procs = [context.Process(target=_rank_main, args=(rank, nproc, env, os.getpid(), *args), daemon=False)
             for rank in range(nproc)]
    for p in procs:
        p.start()
    try:
        while True:
            failed = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if failed:
                rank, code = failed[0]
                # When the failure is a collective timeout, the rank still running is the hung one.
                running = [str(r) for r, p in enumerate(procs) if p.exitcode is None]
                _kill_all(procs)
                also = f"; still running then: rank {', '.join(running)}" if running else ""
                raise RankFailed(f"rank {rank} of {nproc} failed ({_exit_text(code)}){also}; all ranks stopped")
            if all(p.exitcode == 0 for p in procs):
                return
            time.sleep(0.2)
    except BaseException:
        _kill_all(procs)
        raise


def run_distributed(suite: ModuleType, cfg, ctx: Context, run_dir: Path | None, run_id: str) -> None:
    """Run a distributed suite: join an external launcher's ranks, or spawn local ones (one world
    of ranks after another when several world sizes are asked for)."""
    layout = launcher_layout(os.environ)
    if layout is not None:
        ctx.rank, ctx.world_size, ctx.nnodes = layout.rank, layout.world_size, layout.nnodes
        ctx.local_rank = device_index(layout.local_rank, torch.cuda.device_count()) if ctx.device == "cuda" else 0
        os.environ.setdefault("MASTER_ADDR", os.environ.get("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"))
        os.environ.setdefault("MASTER_PORT", "29500")
        for key, value in _transport_env(cfg.collectives.transport, _loopback(os.environ["MASTER_ADDR"])).items():
            os.environ.setdefault(key, value)   # a user's own NCCL setting (an interface, say) wins
        _run_rank(suite, cfg, ctx, run_dir, run_id)
        return
    env = {**{k: os.environ.get(k, v) for k, v in bench.SAFE_ENV.items()},
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           # As torchrun does: ranks sharing a host's cores each with a full thread pool slow
           # gloo's small messages tenfold on a small machine.
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           **_transport_env(cfg.collectives.transport)}
    for nproc in suite.world_sizes(cfg, ctx):
        sys.stdout.flush()
        spawn(nproc, env, (suite.NAME, cfg, ctx, str(run_dir) if run_dir else None, run_id), float(cfg.collectives.timeout_s))
