"""The shared start of held collectives (bench.measure.release), between real processes on the CPU:
the word they share, rank 0 raising it once every rank has queued, a rank that never says so, and
rank 0 itself stuck before saying so (its watchdog raises the word)."""
from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from bench import lazy
from bench.measure import release

WORLD = 3


def _rank(rank: int, store: str, silent_trial: int, stuck_trial: int, answers) -> None:
    tdist = lazy.module("torch.distributed")   # imported as a rank of a run imports it (bench.lazy)
    tdist.init_process_group("gloo", rank=rank, world_size=WORLD, init_method=f"file://{store}",
                             timeout=dt.timedelta(seconds=60))
    release.RAISE_WITHIN_S = 0.5
    start = release.SharedRelease.join(rank, WORLD)
    said, when = [], 0.0
    for trial in range(1, 4):
        start.count += 1          # what hold() does before its stream waits on the word
        start.arm()
        if trial == stuck_trial:  # rank 0's launches wait on its GPU; the others' GPUs wait on the word
            if rank == 0:
                time.sleep(3 * release.RAISE_WITHIN_S)
                when = time.monotonic()   # rank 0 only now says it queued
            else:
                deadline = time.monotonic() + 10
                while start._word(0) != trial and time.monotonic() < deadline:
                    time.sleep(0.01)
                when = time.monotonic()   # the word reached this trial's count
        late = False if rank == WORLD - 1 and trial == silent_trial else start.open()
        tdist.barrier()           # rank 0 has raised the word by now
        said.append((late, start._word(0)))
    answers.put((rank, (said, when)))
    tdist.destroy_process_group()


def _run(tmp_path: Path, silent_trial: int = 0, stuck_trial: int = 0) -> dict[int, tuple[list, float]]:
    spawn = multiprocessing.get_context("spawn")
    answers = spawn.Queue()
    procs = [spawn.Process(target=_rank, args=(r, str(tmp_path / "store"), silent_trial, stuck_trial, answers))
             for r in range(WORLD)]
    for p in procs:
        p.start()
    said = dict(answers.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return said


def _start_files() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("xferbench-start-")} \
        if os.path.isdir("/dev/shm") else set()


def test_rank_0_raises_the_start_word_once_every_rank_has_queued(tmp_path):
    before = _start_files()
    said = {r: trials for r, (trials, _) in _run(tmp_path).items()}
    # every rank reads the word at each trial's count; nobody was waited for past the deadline
    assert all(said[r] == [(False, 1), (False, 2), (False, 3)] for r in range(WORLD)), said
    assert _start_files() == before   # the file's name is gone once every rank mapped it


def test_a_rank_that_never_says_it_queued_shows_as_a_trial_that_gave_way(tmp_path):
    said = {r: trials for r, (trials, _) in _run(tmp_path, silent_trial=2).items()}
    assert [late for late, _ in said[0]] == [False, True, False]   # rank 0 raised it at the deadline
    assert [word for _, word in said[WORLD - 1]] == [1, 2, 3]       # and the silent rank still started


def test_rank_0_stuck_before_it_queued_has_the_word_raised_by_its_watchdog(tmp_path, capfd):
    ran = _run(tmp_path, stuck_trial=2)
    said = {r: trials for r, (trials, _) in ran.items()}
    assert [late for late, _ in said[0]] == [False, True, False]    # rank 0's trial 2 gave way
    assert all([word for _, word in said[r]] == [1, 2, 3] for r in range(1, WORLD)), said
    # the other ranks saw the word raised while rank 0 was still stuck
    assert max(ran[r][1] for r in range(1, WORLD)) < ran[0][1]
    log = capfd.readouterr().err
    assert "watchdog raised the start word of held trial 2" in log and "not yet queued: rank(s) 0" in log
    assert "every thread's stack" in log and "in _rank" in log   # where rank 0's main thread was


def test_more_ranks_than_a_page_holds_is_refused():
    import mmap
    with pytest.raises(ValueError, match="more than one page"):
        release.SharedRelease(0, release.PAGE // 4, mmap.mmap(-1, release.PAGE))
