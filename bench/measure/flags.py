"""A hand-off between two GPUs' streams through a word of pinned host memory: the CUDA driver's
stream memory operations, cuStreamWriteValue32 after one stream's work and cuStreamWaitValue32
before the other's.

torch's hand-off, an event recorded on one GPU's stream and waited on by the other's, runs at one
of two paces, chosen trial by trial where no program sees it (docs/method.md, "Eager and held"): a
held figure through it is a coin toss between them. A word in host memory is what GPUs without
peer access signal each other through, and its pace holds from trial to trial and process to
process. The driver is the library torch itself runs on (libcuda.so.1, loaded once per process).
"""
from __future__ import annotations

import ctypes
import functools
from typing import Callable, NamedTuple

from bench import lazy

torch = lazy.module("torch")

WAIT_GEQ = 0        # CU_STREAM_WAIT_VALUE_GEQ: (int32)(*word - value) >= 0, so the count may wrap
WRITE_DEFAULT = 0   # CU_STREAM_WRITE_VALUE_DEFAULT: the write waits for the stream's earlier writes
HOST_REGISTER = 0x1 | 0x2   # CU_MEMHOSTREGISTER_PORTABLE | DEVICEMAP: every context, at a device address


class FlagsUnavailable(RuntimeError):
    """The CUDA driver here has no stream memory operations; the message says so in one line."""


class _Driver(NamedTuple):
    write: Callable       # cuStreamWriteValue32
    wait: Callable        # cuStreamWaitValue32
    register: Callable    # cuMemHostRegister
    device_pointer: Callable   # cuMemHostGetDevicePointer


def _entry(lib, name: str, argtypes: list, since: str) -> Callable:
    fn = getattr(lib, f"{name}_v2", None) or getattr(lib, name, None)
    if fn is None:
        raise FlagsUnavailable(f"the CUDA driver has no {name}: a driver older than {since}")
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


@functools.cache
def _driver() -> _Driver:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise FlagsUnavailable(f"no CUDA driver library (libcuda.so.1): {exc}") from None
    value_op = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    return _Driver(_entry(lib, "cuStreamWriteValue32", value_op, "CUDA 8"),
                   _entry(lib, "cuStreamWaitValue32", value_op, "CUDA 8"),
                   _entry(lib, "cuMemHostRegister", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint], "CUDA 4"),
                   _entry(lib, "cuMemHostGetDevicePointer",
                          [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint], "CUDA 4"))


def require() -> None:
    """FlagsUnavailable unless the driver's stream memory operations can be called here."""
    _driver()


class HostFlags:
    """Words of pinned host memory, each a count that one stream raises and another waits for."""

    def __init__(self, words: int) -> None:
        self._words = torch.zeros(words, dtype=torch.int32, pin_memory=True)
        self._counts = [0] * words

    def hand_off(self, done, then, word: int) -> None:
        """Work queued on stream `then` after this waits for the work queued on `done` so far."""
        self.wait(then, word, self.signal(done, word))

    def signal(self, done, word: int) -> int:
        """Raise `word` once the work queued on stream `done` so far is done: its count from now."""
        self._counts[word] += 1
        _stream_op(_driver().write, done, self._address(word), self._counts[word] & 0xFFFFFFFF, WRITE_DEFAULT)
        return self._counts[word]

    def wait(self, then, word: int, count: int) -> None:
        """Work queued on stream `then` after this waits until `word` has been raised `count` times."""
        wait_for(then, self._address(word), count & 0xFFFFFFFF)

    def count(self, word: int) -> int:
        """How many times `word` has been raised, or queued to be."""
        return self._counts[word]

    def _address(self, word: int) -> int:
        return self._words.data_ptr() + 4 * word


def _stream_op(call: Callable, stream, address: int, count: int, flags: int) -> None:
    with torch.cuda.device(stream.device):
        code = call(stream.cuda_stream, address, count, flags)
    if code:
        raise FlagsUnavailable(f"{call.__name__} failed on {stream.device}: CUresult {code}")


def wait_for(stream, address: int, count: int) -> None:
    """Work queued on `stream` after this waits until the word at device `address` reaches `count`."""
    _stream_op(_driver().wait, stream, address, count, WAIT_GEQ)


def register_host(buffer, size: int) -> int:
    """The device address of `buffer`'s first `size` bytes (a writable buffer: an mmap of shared
    memory), registered with CUDA so that a stream can wait on its words."""
    driver = _driver()
    host = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    torch.cuda.current_stream()   # this thread's CUDA context is current from here
    code = driver.register(host, size, HOST_REGISTER)
    device = ctypes.c_uint64()
    code = code or driver.device_pointer(ctypes.byref(device), host, 0)
    if code:
        raise FlagsUnavailable(f"registering shared host memory with CUDA failed: CUresult {code}")
    return device.value
