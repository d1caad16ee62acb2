"""Ctrl-C, SIGTERM and SIGHUP end an xferbench run whenever they come, in one line: the signal is
raised as `Interrupted` where raising leaves nothing half done, and waits where it would.

Python's own SIGINT handler raises KeyboardInterrupt at whatever bytecode runs next. Inside an
import that leaves a module half executed: Python drops it from sys.modules but keeps the
submodules and C extensions it had loaded, and the next import runs against them (pandas'
"partially initialized module", a segmentation fault in its CSV parser, numpy without `ma`).
Inside a library's own code it can break the library's cleanup, whose error then stands in for
the interrupt (OmegaConf, building the config: "collectives.ops is not a setting", a key that
is one; a run that went on). So the command installs these handlers before it imports anything
heavy (`install`), and a signal is raised at once only inside an `interruptible()` block (the
suites' measurement, waits on other processes), and there never inside an import nor inside a
`deferred()` block (a point's rows being written, the run folder being made, a rank being
started). Elsewhere it waits for the next `check()`, which the run calls between its phases and
its points, and which raises it again until the run says it has `handled()` it.

A process forked from the command (a DataLoader worker) ignores SIGINT: a terminal's Ctrl-C
reaches the whole process group, and the parent stops its workers itself. Once the run's work
is over (`closing`), a signal ends the process at once with its exit status.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A signal that ends the run as Ctrl-C does; `code` is the exit status it gives (128 + its number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def code(self) -> int:
        return 128 + self.signum


_seen: list[int] = []      # every signal since install(), the first one giving the exit status
_unhandled = False         # a signal the run has not yet answered: check() raises it
_open = {"deferred": 0, "interruptible": 0}   # the blocks of each kind open in the main thread
_closing: str | None = None   # the run's work is over: the line a signal then prints before the process ends
_forks_armed = False


def install() -> None:
    """The command's handlers for SIGINT, SIGTERM and SIGHUP; call first thing, before the
    imports that take seconds, so no signal finds Python's own handler."""
    global _unhandled, _closing, _forks_armed
    _seen.clear()
    _open.update(deferred=0, interruptible=0)
    _unhandled, _closing = False, None
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)
    if not _forks_armed:
        os.register_at_fork(after_in_child=_in_child)
        _forks_armed = True


def _in_child() -> None:
    """A forked child runs no handler of its parent's: SIGINT ignored (its parent stops it), the
    others as by default."""
    if signal.getsignal(signal.SIGINT) is _on_signal:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for signum in SIGNALS[1:]:
            signal.signal(signum, signal.SIG_DFL)


def _importing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _unhandled
    _seen.append(signum)
    if _closing is not None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            print(_closing.format(name=signal.Signals(_seen[0]).name), file=sys.stderr, flush=True)
        os._exit(128 + _seen[0])
    _unhandled = True
    if _open["interruptible"] and not _open["deferred"] and not _importing(frame):
        raise Interrupted(_seen[0])


def received() -> int | None:
    """The first signal that reached the command since install(), else None."""
    return _seen[0] if _seen else None


def _main_thread() -> bool:
    """Signals reach the main thread only: other threads (a pin thread, telemetry) neither raise nor defer them."""
    return threading.current_thread() is threading.main_thread()


def check() -> None:
    """Raises Interrupted if a signal came that the run has not handled: a safe point, unless
    called inside an import or a deferred() block (then the next one raises it)."""
    if _unhandled and not _open["deferred"] and _main_thread() and not _importing(sys._getframe(1)):
        raise Interrupted(_seen[0])


def handled() -> Interrupted:
    """The run has answered the signal (said so, settled its files): check() lets it be until
    another comes. Returns it, for its name and exit status (SIGINT for a KeyboardInterrupt of
    no signal's)."""
    global _unhandled
    _unhandled = False
    return Interrupted(_seen[0] if _seen else int(signal.SIGINT))


@contextlib.contextmanager
def _block(kind: str) -> Iterator[None]:
    counted = _main_thread()
    _open[kind] += counted
    try:
        yield
    finally:
        _open[kind] -= counted


def deferred() -> contextlib.AbstractContextManager[None]:
    """A block a signal does not cut, even inside an interruptible() one: it waits for the next check()."""
    return _block("deferred")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """A block a signal may cut at once (outside imports and deferred() blocks): a wait on other
    processes, a measurement whose points are written whole or not at all. One that came before
    it is raised as it opens."""
    check()
    with _block("interruptible"):
        yield


def closing(line: str) -> None:
    """Nothing of the run is left to do: a signal from now on prints `line` (its `{name}` the
    signal's) and ends the process at once, with the signal's exit status."""
    global _closing
    _closing = line
