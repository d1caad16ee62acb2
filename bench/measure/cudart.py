"""cudaMemcpyAsync from the CUDA runtime torch itself loads, for copies torch would wrap.

torch's `copy_` between two GPUs joins both GPUs' current streams around every copy (an event
recorded on each side and waited on by the other), so each copy also pays two cross-GPU event
waits on the device. A held peer copy must time the link alone: one cudaMemcpyAsync on the
source GPU's stream, as nvbandwidth and p2pBandwidthLatencyTest issue it. The library is the file
torch mapped (found in /proc/self/maps, as bench.measure.nccl finds NCCL's), so no second CUDA
runtime is loaded.
"""
from __future__ import annotations

import ctypes
import functools
import os
from typing import Callable

from bench import lazy

torch = lazy.module("torch")

MEMCPY_DEFAULT = 4   # cudaMemcpyDefault: the direction from the pointers (unified addressing)


class CudartUnavailable(RuntimeError):
    """No CUDA runtime library is mapped in this process; the message says so in one line."""


def _mapped(maps: str = "/proc/self/maps") -> str | None:
    try:
        with open(maps) as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libcudart.so"):
                    return fields[5].strip()
    except OSError:
        pass
    return None


@functools.cache
def _memcpy_async():
    torch.cuda.init()
    path = _mapped()
    if path is None:
        raise CudartUnavailable("torch has no libcudart mapped (a statically linked CUDA runtime): "
                                "held peer copies need cudaMemcpyAsync")
    fn = ctypes.CDLL(path).cudaMemcpyAsync
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def require() -> None:
    """CudartUnavailable unless cudaMemcpyAsync can be called here."""
    _memcpy_async()


def copier(dst: torch.Tensor, src: torch.Tensor) -> Callable[[], None]:
    """A call that queues dst <- src as one cudaMemcpyAsync on the stream current now (contiguous
    tensors of equal size): pointers, size and stream are read once, so each copy of a run costs
    the host one library call."""
    memcpy_async = _memcpy_async()
    args = (dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size(), MEMCPY_DEFAULT,
            torch.cuda.current_stream().cuda_stream)

    def issue() -> None:
        code = memcpy_async(*args)
        if code != 0:
            raise RuntimeError(f"cudaMemcpyAsync failed: cudaError_t {code}")
    return issue


def copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- src as one cudaMemcpyAsync on the current stream (contiguous tensors of equal size)."""
    copier(dst, src)()
