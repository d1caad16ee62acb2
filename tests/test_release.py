"""The shared start of held collectives (bench.measure.release), between real processes on the CPU:
the word they share, rank 0 raising it once every rank has queued, and a rank that never says so."""
from __future__ import annotations

import datetime as dt
import multiprocessing
import os
from pathlib import Path

import pytest

from bench.measure import release

WORLD = 3


def _rank(rank: int, store: str, silent_trial: int, answers) -> None:
    import torch.distributed as tdist
    tdist.init_process_group("gloo", rank=rank, world_size=WORLD, init_method=f"file://{store}",
                             timeout=dt.timedelta(seconds=60))
    release.WAIT_FOR_RANKS_S = 0.5
    start = release.SharedRelease.join(rank, WORLD)
    said = []
    for trial in range(1, 4):
        start.count += 1          # what hold() adds before its stream waits on the word
        late = False if rank == WORLD - 1 and trial == silent_trial else start.open()
        tdist.barrier()           # rank 0 has raised the word by now
        said.append((late, start._word(0)))
    answers.put((rank, said))
    tdist.destroy_process_group()


def _run(tmp_path: Path, silent_trial: int) -> dict[int, list]:
    spawn = multiprocessing.get_context("spawn")
    answers = spawn.Queue()
    procs = [spawn.Process(target=_rank, args=(r, str(tmp_path / "store"), silent_trial, answers)) for r in range(WORLD)]
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
    said = _run(tmp_path, silent_trial=0)
    # every rank reads the word at each trial's count; nobody was waited for past the deadline
    assert all(said[r] == [(False, 1), (False, 2), (False, 3)] for r in range(WORLD)), said
    assert _start_files() == before   # the file's name is gone once every rank mapped it


def test_a_rank_that_never_says_it_queued_shows_as_a_trial_that_gave_way(tmp_path):
    said = _run(tmp_path, silent_trial=2)
    assert [late for late, _ in said[0]] == [False, True, False]   # rank 0 raised it at the deadline
    assert [word for _, word in said[WORLD - 1]] == [1, 2, 3]       # and the silent rank still started


def test_more_ranks_than_a_page_holds_is_refused():
    import mmap
    with pytest.raises(ValueError, match="more than one page"):
        release.SharedRelease(0, release.PAGE // 4, mmap.mmap(-1, release.PAGE))
