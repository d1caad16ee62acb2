"""An interrupt at any moment of a run: before its folder, inside the imports, while ranks start,
mid-point, in the summary. Real runs of the command on the CPU path, real signals (a terminal's
Ctrl-C to the process group, SIGTERM to the process alone), each sent the moment the run is
seen to reach a stage (its handlers in place, and 0.3 s later; torch's library mapped: its
import under way, nvidia-smi still answering; the run folder made; a point on disk; the ranks
started; meta.json complete: the summary): 7 tries, 2 at a time. Every try: one line, exit 128 + the signal,
meta.json `interrupted` where a folder exists (`complete` in the summary), every point on disk
whole, no process of the run left behind (ranks, nvidia-smi); an interrupted run resumed
completes. XFERBENCH_INTERRUPT_TRIES=N repeats every moment N times with a random extra delay,
adds the ranks' torch import, a collectives point and 3N time offsets over the first 3 s, and
resumes a collectives run too.

And the rules underneath (bench/interrupts.py), in this process with real signals: a signal
inside an import waits for its end, one inside a write for the write, one that library code
swallowed is raised at the next check, and forked children ignore Ctrl-C.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import interrupts
from bench.journal import RunWriter
from bench.points import POINT_KEYS
from bench.results import Sample, load
from conftest import env, xferbench_cmd

TAG = "XFERBENCH_INTERRUPT_TRY"   # every process a try starts inherits it: none may outlive the try
SMI_S = "FAKE_NVIDIA_SMI_S"
TRIES = int(os.environ.get("XFERBENCH_INTERRUPT_TRIES", "1"))
TRIALS = 3
COPY = ("suite=copy", "sizes.max=256KiB", f"timing.trials={TRIALS}")
GLOO = ("suite=collectives", "collectives.nproc=2", "collectives.ops=[all_reduce]", "collectives.api=[torch]",
        "sizes.min=8B", "sizes.max=64B", f"timing.trials={TRIALS}")


@dataclass
class Try:
    args: tuple[str, ...]
    moment: str                 # what the signal waits for: see _reached
    sig: signal.Signals
    delay: float = 0.0          # after the moment
    smi_s: float = 2.0          # how long nvidia-smi takes to answer (fake_smi)
    ran: float = 0.0            # when the signal was sent, from the start; -1: the run ended first
    code: int | None = None
    err: str = ""
    out: str = ""
    runs: tuple[Path, ...] = ()
    left: tuple[int, ...] = ()  # processes of the try alive after it ended


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _ranks(pid: int) -> list[int]:
    """The rank processes `pid` started (bench/driver/rank_start.py), not its other children."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _text(stat).rpartition(")")[2].split()
        if len(fields) > 1 and fields[1] == str(pid) and "rank_start" in _text(stat.parent / "cmdline"):
            found.append(int(stat.parent.name))
    return found


def _maps(pid: int, library: str) -> bool:
    return library in _text(Path(f"/proc/{pid}/maps"))


def _meta_status(results: Path) -> list[str]:
    return [json.loads(_text(m) or "{}").get("status", "") for m in results.rglob("meta.json")]


def _reached(moment: str, pid: int, results: Path) -> bool:
    if moment in ("armed", "offset"):   # the command's handlers are in place (the interpreter's start is not ours)
        caught = next((line.split()[1] for line in _text(Path(f"/proc/{pid}/status")).splitlines()
                       if line.startswith("SigCgt:")), "0")
        return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)
    if moment == "torch":   # its library mapped, its Python modules still being imported
        return _maps(pid, "libtorch_cpu")
    if moment == "folder":
        return any(results.rglob("meta.json"))
    if moment == "point":
        return any(c.stat().st_size > 0 for c in results.rglob("samples.commit"))
    if moment == "ranks":
        return len(_ranks(pid)) >= 2
    if moment == "ranks-torch":
        return any(_maps(rank, "libtorch_cpu") for rank in _ranks(pid))
    if moment == "summary":
        return "complete" in _meta_status(results)
    raise ValueError(moment)


# Where a signal sent at each moment lands ("missed": the run ended before the moment came).
LANDS = {"armed": {"before the folder"}, "torch": {"before the folder"}, "folder": {"run"}, "point": {"run"},
         "ranks": {"run"}, "ranks-torch": {"run"}, "summary": {"summary", "teardown"},
         "offset": {"before the folder", "run", "summary", "teardown"}}


def tagged(tag: str, wait_s: float = 0.0) -> list[int]:
    """The processes still alive with TAG=`tag` in their environment, after up to `wait_s` for them to go."""
    needle = f"{TAG}={tag}".encode()
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if needle in environ.read_bytes().split(b"\0"):
                    alive.append(int(environ.parent.name))
            except OSError:
                pass
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _own_group() -> None:
    os.setpgrp()   # the try's own process group, as a terminal's foreground job has
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _attempt(t: Try, folder: Path, fake_smi: Path) -> Try:
    """One run, signalled at its moment; what it said, left on disk and left running."""
    tag = uuid.uuid4().hex
    results = folder / "results"
    folder.mkdir()
    e = {**env(), TAG: tag, "PATH": f"{fake_smi}{os.pathsep}{os.environ['PATH']}", SMI_S: str(t.smi_s)}
    start = time.monotonic()
    proc = subprocess.Popen(xferbench_cmd(results, *t.args), cwd=folder, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_own_group)
    try:
        while proc.poll() is None and not _reached(t.moment, proc.pid, results):
            time.sleep(0.005)
        time.sleep(t.delay)
        t.ran = time.monotonic() - start if proc.poll() is None else -1.0
        if t.ran >= 0:
            if t.sig == signal.SIGINT:
                os.killpg(proc.pid, t.sig)   # a terminal's Ctrl-C: the whole foreground group
            else:
                proc.send_signal(t.sig)      # kill, timeout, a scheduler: the process alone
        t.out, t.err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    t.code = proc.returncode
    t.left = tuple(tagged(tag, wait_s=3))   # ranks killed by the parent are reaped by init
    t.runs = tuple(sorted(m.parent for m in results.rglob("meta.json")))
    return t


def _whole(run: Path) -> int:
    """The points on disk, each with all its trials (none torn off): their number."""
    rows = load(run)
    if rows.empty:
        return 0
    assert rows.verified.all()
    keys = [k for k in POINT_KEYS if k in rows.columns]
    trials = rows.groupby(keys, dropna=False).trial.agg(lambda t: sorted(set(t)))
    torn = trials[[len(t) < TRIALS or t != list(range(len(t))) for t in trials]]
    assert torn.empty, torn
    return len(trials)


def _judge(t: Try) -> str:
    """Asserts what the user sees and finds after the try; returns where the signal landed."""
    said = f"{t.moment}+{t.delay:.2f}s at {t.ran:.2f}s ({t.sig.name}): exit {t.code}\n{t.err}"
    assert not t.left, f"left running: {t.left}; {said}"
    lines = [line for line in t.err.splitlines() if line.strip()]
    assert all(line.startswith("xferbench: ") for line in lines), said
    if t.ran < 0:   # the run ended before the moment came: it must have ended well
        assert t.code == 0 and list(map(_status, t.runs)) == ["complete"], said
        return "missed"
    stops = [line for line in lines if "interrupted (" in line]
    if not stops:   # the signal came as the interpreter tore down, its work done: it dies of it
        assert t.code == -t.sig and "result:" in t.out and list(map(_status, t.runs)) == ["complete"], said
        return "teardown"
    assert len(stops) == 1 and t.code == 128 + t.sig, said
    assert stops[0].startswith(f"xferbench: interrupted ({t.sig.name}"), said
    if not t.runs:
        assert stops[0].endswith("; no run folder was made"), said
        return "before the folder"
    (run,) = t.runs
    _whole(run)
    if "in the summary" in stops[0]:
        assert _status(run) == "complete", said
        return "summary"
    assert _status(run) == "interrupted" and f"resume={run}" in stops[0], said
    return "run"


def _status(run: Path) -> str:
    return json.loads((run / "meta.json").read_text())["status"]


def _tries() -> list[Try]:
    """Each moment once (SIGINT and SIGTERM in turn); with XFERBENCH_INTERRUPT_TRIES=N, N times
    with a random delay after it, the ranks' torch import and a collectives point too, and 3N
    offsets over 3 s of start-up."""
    rng = random.Random(45)
    moments = [(COPY, "armed", 0.0), (COPY, "armed", 0.3), (COPY, "folder", 0.0),
               (COPY, "point", 0.0), (COPY, "summary", 0.0), (GLOO, "ranks", 0.0)]
    if TRIES > 1:
        moments += [(GLOO, "ranks-torch", 0.0), (GLOO, "point", 0.0)] + [
            (COPY, "offset", 3 * i / (3 * TRIES)) for i in range(3 * TRIES)]
    signals = (signal.SIGINT, signal.SIGTERM)
    tries = [Try(args, moment, signals[(i + n) % 2], delay + (rng.uniform(0, 0.5) if n else 0.0))
             for n in range(TRIES) for i, (args, moment, delay) in enumerate(moments)]
    # While torch is imported, nvidia-smi is still answering: one of a minute is left behind unless stopped.
    return tries + [Try(COPY, "torch", signals[n % 2], rng.uniform(0, 0.3) if n else 0.0, smi_s=60)
                    for n in range(TRIES)]


@pytest.fixture
def fake_smi(tmp_path) -> Path:
    """An nvidia-smi that answers `topo -m` slowly (Try.smi_s): a child the run starts early, to be
    stopped with it (one taking a minute outlives a run that leaves it behind)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec sleep "${SMI_S}"\n')
    smi.chmod(0o755)
    return folder


def test_an_interrupt_at_any_moment_is_one_line_and_resume_completes(tmp_path, fake_smi):
    tries = _tries()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda it: _attempt(it[1], tmp_path / f"try{it[0]}", fake_smi), enumerate(tries)))
    for t in done:
        print(f"{t.moment}+{t.delay:.2f}s at {t.ran:.2f}s {t.sig.name}: exit {t.code}, {t.err.splitlines()[-1:]}")
    landed = [_judge(t) for t in done]
    print({where: landed.count(where) for where in set(landed)})   # shown with -s: where the signals landed
    assert all(where in {*LANDS[t.moment], "missed"} for t, where in zip(done, landed)), list(zip(tries, landed))
    assert landed.count("missed") <= len(tries) // 4, landed
    assert {"before the folder", "run"} <= set(landed), landed

    # A run stopped after its folder was made, resumed: complete, as many points as a run not stopped.
    for args in (COPY, GLOO) if TRIES > 1 else (COPY,):
        tried = [(t, where) for t, where in zip(done, landed) if t.args == args]
        whole = {_whole(t.runs[0]) for t, _ in tried if t.runs and _status(t.runs[0]) == "complete"}
        run = max((t for t, where in tried if where == "run"), key=lambda t: t.ran).runs[0]
        before = _whole(run)
        proc = subprocess.run(xferbench_cmd(run.parent.parent, f"resume={run}"), capture_output=True, text=True,
                              env=env(), timeout=300)
        assert proc.returncode == 0 and _status(run) == "complete", proc.stderr
        assert all(line.startswith("xferbench: ") for line in proc.stderr.splitlines() if line.strip()), proc.stderr
        assert _whole(run) >= max(before, 1) and (not whole or _whole(run) in whole), (whole, before)


# -- the rules underneath, in this process ---------------------------------------------------

@pytest.fixture
def handlers():
    """The command's handlers for the test; this process's own restored after it."""
    saved = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    interrupts.install()
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_a_signal_inside_an_import_waits_for_it_to_finish(tmp_path, monkeypatch, handlers):
    (tmp_path / "slow_module.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nfor _ in range(1000): pass\nWHOLE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with interrupts.interruptible():   # even where a signal is raised at once
        import slow_module   # Python's own handler raises in its body: a half module, dropped

    assert slow_module.WHOLE and "slow_module" in sys.modules
    with pytest.raises(interrupts.Interrupted) as raised:
        interrupts.check()
    assert raised.value.code == 130
    interrupts.handled()
    interrupts.check()   # answered: nothing more to raise


def test_a_signal_while_a_point_is_written_waits_for_the_point(tmp_path, monkeypatch, handlers):
    import bench.journal as journal

    appended = journal._append

    def append_then_signal(path, data):
        start = appended(path, data)
        os.kill(os.getpid(), signal.SIGTERM)   # between the rows and their commit
        return start

    writer = RunWriter(tmp_path / "run", "run")
    monkeypatch.setattr(journal, "_append", append_then_signal)
    with interrupts.interruptible():
        writer.add_point([Sample(suite="copy", op="h2h", size_bytes=4096, trial=t, time_s=1e-6, verified=True)
                          for t in range(TRIALS)])
    with pytest.raises(interrupts.Interrupted) as raised:
        interrupts.check()
    assert raised.value.code == 143 and len(RunWriter(tmp_path / "run", "run").frame) == TRIALS


def test_a_signal_is_raised_at_once_only_where_the_run_allows_it(handlers):
    os.kill(os.getpid(), signal.SIGINT)   # library code (OmegaConf composing the config) runs on
    time.sleep(0.01)
    with pytest.raises(interrupts.Interrupted):
        interrupts.check()                 # until the run's next safe point
    interrupts.handled()
    with interrupts.interruptible():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)   # cut short
            raise AssertionError("not raised at once")
        except interrupts.Interrupted:   # swallowed, as a library's bare except would
            pass
    with pytest.raises(interrupts.Interrupted) as raised:
        interrupts.check()                 # raised again
    assert raised.value.code == 130   # the first signal's status


def test_a_forked_child_ignores_ctrl_c(handlers):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, b"ignored" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else b"handled")
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"ignored"
    os.close(read)
