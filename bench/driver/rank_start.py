"""A spawned rank's first code (`main`, with arguments BENCH_ROOT RANK PARENT_PID; see
rank_group._RANK_START): it arms its death with the parent before anything heavy is imported, then
loads torch and the suites, then reads its work from stdin and runs it.

Only the standard library comes before `die_with_parent`: torch and bench take seconds to
import (more with many ranks on few cores), and a parent killed meanwhile must still take its
ranks with it. A parent that died before the signal was armed shows in getppid(). stdin holds
two pickles: the parent's sys.path, then the work for `bench.driver.rank_group.rank_main`, which
a parent that starts its ranks ahead (rank_group.Ahead) sends when their suite's turn comes.
"""
from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent exits: prctl on Linux, else a watchdog thread.

    The parent-death signal survives execve and fires when the parent's thread that started this
    process exits: rank_group.spawn starts ranks from the main thread, which lives as long as the run.
    """
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

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="xferbench-parent-watchdog").start()


def main() -> None:
    die_with_parent(int(sys.argv[3]))
    import pickle

    sys.path[:] = pickle.load(sys.stdin.buffer)  # as the parent imports: this checkout's bench, its site packages
    from bench.driver import rank_group

    rank_group.load()   # while the parent may still be measuring another suite: seconds of imports
    rank_group.rank_main(*pickle.load(sys.stdin.buffer))
    gc.freeze()   # the teardown need not collect torch's objects: as the command's end (bench/cli/run.py)
