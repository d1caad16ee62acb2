"""Ranks for distributed suites: spawn local ranks, or join torchrun/Slurm's.

Spawned ranks are processes of their own, started in bench/driver/rank_start.py, armed to die
with the parent before they import anything heavy: a parent killed at any moment, SIGKILL
included and while its ranks are still starting, takes them with it. The parent watches them:
when one exits with an error (or is killed) every other rank is killed too, and the error names
the rank and its log. A rank that hangs is caught by the collective timeout in its peers, which
then exit with an error.

Each rank's stdout and stderr (its tracebacks; NCCL's own lines with NCCL_DEBUG=INFO, which go
to stdout) are appended to RUN/ranks/rank-<r>.log, every world of ranks a run starts marked by
a header line. Rank 0's progress bar alone goes to the parent's stderr, through a copy of it.
"""
from __future__ import annotations

import datetime as dt
import os
import pickle
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

import bench
from bench import interrupts, lazy
from bench.driver.launcher import device_index, launcher_layout
from bench.driver.runner import run_suite
from bench.driver.sweep import Planned
from bench.journal import ResultsWriteError, RunWriter
from bench.contract import Context

torch = lazy.module("torch")
tdist = lazy.module("torch.distributed")

RANK_LOGS = "ranks"  # in the run folder: rank-<r>.log, each rank's stdout and stderr
# A rank's start: `python -c _RANK_START BENCH_ROOT RANK PARENT_PID`. The parent's bench comes
# first on the path, whatever the working directory holds (`-m` would put it first).
_RANK_START = "import sys; sys.path.insert(0, sys.argv[1]); from bench.driver.rank_start import main; main()"
_PROGRESS_FD = "XFERBENCH_PROGRESS_FD"  # rank 0's copy of the parent's stderr, for its progress bar
_REASON_FD = "XFERBENCH_REASON_FD"      # a pipe to the parent: a failing rank's one line of why
# What NCCL says it did (its version, the transport to each peer, the variables it read), into the
# ranks' logs for the verdicts' causes (bench.analysis.ncclog); a user's own NCCL_DEBUG wins.
NCCL_REPORT = {"NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "INFO"),
               "NCCL_DEBUG_SUBSYS": os.environ.get("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET")}


class RankFailed(RuntimeError):
    """A rank ended with an error; the message names it."""


# The kernel hands ports of this range to outgoing connections: a port picked from it, free when
# picked, may be some connection's before rank 0 listens on it (a 4x H200 run failed so: EADDRINUSE).
EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 20000


def _free_port() -> int:
    """A port nothing listens on, below the ephemeral range where the host says what that is."""
    try:
        below = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        below = LOWEST_PORT
    candidates = range(LOWEST_PORT, below)   # none where the range starts at LOWEST_PORT or below
    for port in random.sample(candidates, min(64, len(candidates))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load() -> None:
    """What every rank imports before its work: torch, torch.distributed and the suites' registry."""
    from bench import suites

    tdist.is_available()   # lazy modules: this imports torch and torch.distributed, touching no GPU
    suites.all()


def rank_main(suite_name: str, settings, ctx: Context, max_ranks: int, run_dir: str | None, run_id: str,
              progress: bool) -> None:
    """A spawned rank's work (bench.driver.rank_start calls it): the suite's sweep in the world the
    parent started, its place in it from RANK and WORLD_SIZE."""
    from bench import suites   # the registry imports every suite: a rank loads them when it starts, not its parent

    ctx = replace(ctx, rank=int(os.environ["RANK"]), local_rank=int(os.environ["RANK"]),
                  world_size=int(os.environ["WORLD_SIZE"]))
    fd = os.environ.pop(_PROGRESS_FD, None)
    stream = os.fdopen(int(fd), "w", buffering=1) if fd else None
    try:
        _run_rank(Planned(suites.get(suite_name), settings, ctx, max_ranks), Path(run_dir) if run_dir else None, run_id,
                  progress, stream)
    except BaseException as exc:
        _tell_parent(exc)
        raise


def _tell_parent(exc: BaseException) -> None:
    """The failure's one line, through the pipe the parent gave this rank: its log may be on the
    very disk that filled."""
    fd = os.environ.get(_REASON_FD)
    if fd is None or isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return
    first = (str(exc) or type(exc).__name__).splitlines()[0]
    # W: results could not be written (the cause the user needs); E: anything else
    line = f"W{first}" if isinstance(exc, ResultsWriteError) else f"E{type(exc).__name__}: {first}"
    try:
        os.write(int(fd), line.encode()[:4000])
    except OSError:
        pass


def init_group(ctx: Context, backend: str, timeout_s: float) -> None:
    if backend == "nccl":
        torch.cuda.set_device(ctx.local_rank)
    kwargs = {"device_id": torch.device("cuda", ctx.local_rank)} if backend == "nccl" else {}
    tdist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size,
                             timeout=dt.timedelta(seconds=timeout_s), **kwargs)


def _run_rank(planned: Planned, run_dir: Path | None, run_id: str, progress: bool,
              stream: TextIO | None = None) -> None:
    distribution = planned.distribution()
    init_group(planned.ctx, distribution.backend, distribution.timeout_s)
    try:
        writer = RunWriter(run_dir, run_id) if planned.ctx.rank == 0 else None
        done = [writer.done if writer is not None else None]
        tdist.broadcast_object_list(done, src=0)  # a resumed run: every rank skips the same points
        state = planned.start()
        run_suite(planned, state, writer, progress=progress, done=done[0], stream=stream)
        if writer is not None:
            writer.close()
        tdist.barrier()
        planned.suite.finish(state)  # may be collective over the ranks: every rank is here, after the barrier
    finally:
        tdist.destroy_process_group()


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()  # SIGKILL: SIGTERM would wait on a stopped or hung rank
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _stderr_copy() -> int:
    """A copy of this process's stderr, for rank 0's progress bar."""
    try:
        return os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # a stand-in stream without a file (pytest's capture)
        return os.dup(2)


@dataclass
class _Rank:
    proc: subprocess.Popen
    reason: int          # the read end of the rank's reason pipe

    def why(self) -> tuple[str, str]:
        """What the rank said of its failure: (W: results not written, E: another error, '': nothing; the line)."""
        os.set_blocking(self.reason, False)
        try:
            said = os.read(self.reason, 4096).decode(errors="replace").strip()
        except OSError:
            said = ""
        return (said[:1], said[1:]) if said else ("", "")


def _open_log(log: Path | None, header: str):
    """The rank's log, opened to append after `header`; None without one. A log that cannot be
    written (a full disk) is dropped: the rank's output goes nowhere, and a rank that fails tells
    the parent why through its pipe."""
    if log is None:
        return None
    try:
        out = open(log, "a")
        out.write(header)
        out.flush()
        return out
    except OSError:
        return open(os.devnull, "w")


def _start_rank(rank: int, nproc: int, env: dict, path: bytes, log: Path | None, header: str,
                progress: bool) -> _Rank:
    """One rank (bench.rank), its output appended to `log` after `header` (no log: to this
    terminal), given the parent's sys.path: it loads torch and the suites, then waits for its
    work (_send)."""
    env = {**os.environ, **env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
           "PYTHONUNBUFFERED": "1"}  # a killed rank's last lines are in its log
    fd = _stderr_copy() if progress and log is not None else None
    if fd is not None:
        env[_PROGRESS_FD] = str(fd)
    reason, told = os.pipe()
    env[_REASON_FD] = str(told)
    out = _open_log(log, header)
    try:
        root = str(Path(bench.__file__).resolve().parent.parent)
        proc = subprocess.Popen([sys.executable, "-c", _RANK_START, root, str(rank), str(os.getpid())],
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT if out else None,
                                env=env, pass_fds=(told,) if fd is None else (fd, told))
    finally:
        if out is not None:
            out.close()
        for mine in (fd, told):
            if mine is not None:
                os.close(mine)
    try:
        proc.stdin.write(path)
        proc.stdin.flush()
    except BrokenPipeError:
        pass  # it died already: the watch names it
    return _Rank(proc, reason)


def _send(rank: _Rank, work: bytes) -> None:
    try:
        with rank.proc.stdin:
            rank.proc.stdin.write(work)
    except BrokenPipeError:
        pass  # it died already: the watch names it


# After the first rank is seen failed, how long its peers get to fail too: the one that said why
# (rank 0 on a full disk) is named rather than a peer that merely lost it.
_SETTLE_S = 1.0


def _watch(ranks: list[_Rank], logs: list[Path | None]) -> None:
    """Wait for every rank; on the first to fail, kill the rest and raise RankFailed naming the
    rank that says why (our own one line first, then one killed by a signal, then the lowest)."""
    nproc = len(ranks)
    while True:
        interrupts.check()
        codes = [r.proc.poll() for r in ranks]
        if any(code not in (None, 0) for code in codes):
            deadline = time.monotonic() + _SETTLE_S
            while any(c is None for c in codes) and time.monotonic() < deadline:
                time.sleep(0.05)
                codes = [r.proc.poll() for r in ranks]
            failed = [r for r, code in enumerate(codes) if code not in (None, 0)]
            why = {r: ranks[r].why() for r in failed}
            rank = min(failed, key=lambda r: (why[r][0] != "W", codes[r] >= 0, r))
            # When the failure is an error exit (a collective timeout), a rank still running is the
            # hung one; beside a rank killed by a signal, the others are merely its peers.
            running = [str(r) for r, code in enumerate(codes) if code is None]
            _kill_all([r.proc for r in ranks])
            also = f"; still running then: rank {', '.join(running)}" if running and codes[rank] > 0 else ""
            said = f": {why[rank][1]}" if why[rank][1] else ""
            see = f"; see {logs[rank]}" if logs[rank] is not None else ""
            raise RankFailed(f"rank {rank} of {nproc} failed ({_exit_text(codes[rank])}){said}{also}; "
                             f"all ranks stopped{see}")
        if all(code == 0 for code in codes):
            return
        time.sleep(0.1)


@dataclass
class World:
    """A world's ranks, started: loading torch and the suites, or waiting for their work."""
    nproc: int
    ranks: list[_Rank]
    logs: list[Path | None]

    def stop(self) -> None:
        _kill_all([r.proc for r in self.ranks])
        for r in self.ranks:
            os.close(r.reason)
        self.ranks = []


def start_world(nproc: int, env: dict, suite: str, log_dir: Path | None = None, progress: bool = False) -> World:
    """Start nproc ranks of `suite` (its name), which load torch and the suites and then wait for
    their work (spawn). Each rank's stdout and stderr go to log_dir/rank-<r>.log when log_dir is
    given (rank 0's progress bar still to this process's stderr), else here."""
    stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    logs = [log_dir / f"rank-{rank}.log" if log_dir is not None else None for rank in range(nproc)]
    if log_dir is not None:
        try:
            log_dir.mkdir(exist_ok=True)
        except OSError:   # a full disk: the ranks run without logs (_open_log)
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    world, path = World(nproc, [], logs), pickle.dumps(sys.path)
    try:
        for rank in range(nproc):
            header = f"--- xferbench {suite}: rank {rank} of {nproc}, started {stamp} ---\n"
            with interrupts.deferred():   # a rank started is a rank in the world, to be stopped
                world.ranks.append(_start_rank(rank, nproc, env, path, logs[rank], header, progress and rank == 0))
    except BaseException:
        world.stop()
        raise
    return world


def spawn(world: World, work: tuple) -> None:
    """Hand a started world its work and wait; on the first rank to fail, kill the rest and raise
    RankFailed. `work` is rank_main's arguments (the suite's name first)."""
    payload = pickle.dumps(work)
    try:
        for rank in world.ranks:
            _send(rank, payload)
        _watch(world.ranks, world.logs)
    finally:
        world.stop()


# A distributed suite's ranks start while the suite before it measures, once that suite reaches
# points this large (their ops are the device's, longer than the host's pace can move and not
# paced, so the ranks' imports there slow nothing measured; started at its first point instead,
# they made the p2p suite's small copies wait for a slow host), and where the machine has
# SPARE_CORES cores a rank: loading torch and the suites, most of a rank's start, then overlaps
# the other suite's points (docs/usage.md, the four-GPU sweep's time).
AHEAD_FROM_BYTES = 256 << 20
SPARE_CORES = 4


class Ahead:
    """The first world of `planned`'s ranks (a distributed suite), started ahead of its turn by
    the suite before it (`before`, called ahead of each of its points); none where it is not a
    distributed suite, an external launcher runs the ranks, or the cores are too few to spare."""

    def __init__(self, planned: Planned, run_dir: Path | None, progress: bool) -> None:
        self.planned, self.run_dir, self.progress = planned, run_dir, progress
        self.world: World | None = None
        self.tried = False

    def before(self, point) -> None:
        if self.tried or point.size_bytes < AHEAD_FROM_BYTES:
            return
        self.tried = True
        distribution = self.planned.distribution()
        if distribution is None or launcher_layout(os.environ) is not None:
            return
        nproc = distribution.world_sizes[0]
        if (os.cpu_count() or 1) >= SPARE_CORES * nproc:
            self.world = start_world(nproc, _world_env(self.planned, self.run_dir), self.planned.suite.name,
                                     self.run_dir / RANK_LOGS if self.run_dir else None, self.progress)

    def take(self) -> World | None:
        world, self.world = self.world, None
        return world

    def stop(self) -> None:
        if self.world is not None:
            self.take().stop()


def _world_env(planned: Planned, run_dir: Path | None) -> dict:
    distribution = planned.distribution()
    return {**{k: os.environ.get(k, v) for k, v in bench.SAFE_ENV.items()},
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
            # As torchrun does: ranks sharing a host's cores each with a full thread pool slow
            # gloo's small messages tenfold on a small machine.
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            **distribution.env,
            **(NCCL_REPORT if distribution.backend == "nccl" and run_dir else {})}


def run_distributed(planned: Planned, run_dir: Path | None, run_id: str, progress: bool,
                    ahead: World | None = None) -> None:
    """Run a distributed suite: join an external launcher's ranks, or spawn local ones (one world
    of ranks after another when several world sizes are asked for); `ahead`: its first world's
    ranks, started already (Ahead)."""
    distribution = planned.distribution()
    layout = launcher_layout(os.environ)
    if layout is not None:
        local = device_index(layout.local_rank, torch.cuda.device_count()) if planned.ctx.device == "cuda" else 0
        ctx = replace(planned.ctx, rank=layout.rank, world_size=layout.world_size, nnodes=layout.nnodes,
                      local_rank=local)
        os.environ.setdefault("MASTER_ADDR", os.environ.get("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"))
        os.environ.setdefault("MASTER_PORT", "29500")
        for key, value in distribution.env.items():
            os.environ.setdefault(key, value)   # a user's own NCCL setting (an interface, say) wins
        _run_rank(replace(planned, ctx=ctx), run_dir, run_id, progress)
        return
    logs = run_dir / RANK_LOGS if run_dir else None
    try:
        for nproc in distribution.world_sizes:
            work = (planned.suite.name, planned.settings, replace(planned.ctx, world_size=nproc), planned.max_ranks,
                    str(run_dir) if run_dir else None, run_id, progress)
            world, ahead = (ahead, None) if ahead is not None and ahead.nproc == nproc else \
                (start_world(nproc, _world_env(planned, run_dir), planned.suite.name, logs, progress), ahead)
            spawn(world, work)
    finally:
        if ahead is not None:
            ahead.stop()
