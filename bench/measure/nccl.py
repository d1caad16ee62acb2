"""A thin ctypes binding to the NCCL library torch itself loads, to call NCCL beside torch.distributed.

torch.distributed adds host time to every collective; calling ncclAllReduce straight from
Python on torch's current stream leaves mostly NCCL's own cost, so the difference between the
two shows the framework's overhead. Signatures follow nccl.h of the 2.28 series.

The library is the very file torch mapped (ctypes.CDLL on an already loaded path returns that
same library), so this module and torch share one NCCL: one version, one set of environment
settings, read once per process.

Every op enqueues on the stream it is given, by default the current stream at call time, so
inside `torch.cuda.graph(g)` (whose capture stream is then current) the ops are captured.

Environment: NCCL reads its variables once per process, when first needed, and keeps them.
NCCL_GRAPH_MIXING_SUPPORT in particular (default 1: NCCL orders its internal streams between
eager launches and graph replays, adding event records and waits to eager launches once
anything was captured) must be set before the communicator is created, and as the library is
torch's, before torch's own first NCCL communicator too; setting it later has no effect.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import glob
import os
import sys
from collections.abc import Callable, Iterator

from bench import lazy
from bench.gpus import cuda_started

torch = lazy.module("torch")
tdist = lazy.module("torch.distributed")

UNIQUE_ID_BYTES = 128

# ncclDataType_t and ncclRedOp_t, from nccl.h.
DATA_TYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 4, "float16": 6, "float32": 7, "float64": 8,
              "bfloat16": 9}   # by torch.dtype's name: torch.float32 -> 'float32'
REDUCE_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


class NcclUnavailable(RuntimeError):
    """NCCL can't be used in this process; the message is one line saying why."""


class NcclError(RuntimeError):
    """An NCCL call returned an error; `code` is its ncclResult_t."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


class UniqueId(ctypes.Structure):
    # Read and written through the buffer protocol (bytes(uid), from_buffer_copy): reading the
    # char array as a field would stop at its first zero byte.
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


StreamLike = "torch.cuda.Stream | int | None"  # None: the current stream at call time
_Comm = ctypes.c_void_p
_Stream = ctypes.c_void_p
_ptr, _count, _int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
_type = _op = _root = _peer = ctypes.c_int

# Functions returning ncclResult_t: name -> argument types, in the header's order.
_CALLS = {
    "ncclGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "ncclGetUniqueId": [ctypes.POINTER(UniqueId)],
    "ncclCommInitRank": [ctypes.POINTER(_Comm), _int, UniqueId, _int],  # the id goes by value
    "ncclCommDestroy": [_Comm],
    "ncclCommAbort": [_Comm],
    "ncclAllReduce": [_ptr, _ptr, _count, _type, _op, _Comm, _Stream],
    "ncclAllGather": [_ptr, _ptr, _count, _type, _Comm, _Stream],
    "ncclReduceScatter": [_ptr, _ptr, _count, _type, _op, _Comm, _Stream],
    "ncclBroadcast": [_ptr, _ptr, _count, _type, _root, _Comm, _Stream],
    "ncclReduce": [_ptr, _ptr, _count, _type, _op, _root, _Comm, _Stream],
    "ncclSend": [_ptr, _count, _type, _peer, _Comm, _Stream],
    "ncclRecv": [_ptr, _count, _type, _peer, _Comm, _Stream],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
}


def _mapped_library(maps: str = "/proc/self/maps") -> str | None:
    """The libnccl file this process has mapped (torch's, once imported), if any."""
    try:
        with open(maps) as f:
            lines = f.readlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and "libnccl.so" in os.path.basename(fields[5].strip()):
            return fields[5].strip()
    return None


def _installed_library() -> str | None:
    """libnccl.so.2 of the nvidia-nccl wheel on sys.path (nvidia is a namespace package)."""
    for entry in sys.path:
        for pattern in ("nvidia/nccl/lib/libnccl.so.2", "nvidia/*/lib/libnccl.so.2"):
            found = sorted(glob.glob(os.path.join(entry or ".", pattern)))
            if found:
                return found[0]
    return None


def library_path() -> str | None:
    """The libnccl.so.2 torch uses: the one already mapped, else the wheel's on sys.path."""
    return _mapped_library() or _installed_library()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class NCCL:
    """The library's functions under their C names (lib.ncclAllReduce(...)), each raising NcclError."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._lib = ctypes.CDLL(path)
            self._error_string = self._lib.ncclGetErrorString
            self._last_error = self._lib.ncclGetLastError
            for name, argtypes in _CALLS.items():
                fn = getattr(self._lib, name)
                fn.argtypes, fn.restype, fn.errcheck = argtypes, ctypes.c_int, self._check
                setattr(self, name, fn)
        except (OSError, AttributeError) as exc:
            raise NcclUnavailable(f"cannot use {path}: {_one_line(exc)}") from None
        self._error_string.argtypes, self._error_string.restype = [ctypes.c_int], ctypes.c_char_p
        self._last_error.argtypes, self._last_error.restype = [_Comm], ctypes.c_char_p

    def _check(self, result: int, fn, args) -> int:
        if result != 0:
            # ncclGetLastError ignores its comm argument (2.28): the text is the process's last.
            what = (self._error_string(result) or b"").decode(errors="replace")
            last = (self._last_error(None) or b"").decode(errors="replace")
            raise NcclError(f"{fn.__name__} failed: {what} (ncclResult_t {result})"
                            + (f": {last}" if last else ""), result)
        return result

    def version(self) -> tuple[int, int, int]:
        code = ctypes.c_int()
        self.ncclGetVersion(ctypes.byref(code))
        # NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
        v = code.value
        if v >= 10000:
            return v // 10000, v // 100 % 100, v % 100
        return v // 1000, v // 100 % 10, v % 100

    def unique_id(self) -> bytes:
        uid = UniqueId()
        self.ncclGetUniqueId(ctypes.byref(uid))
        return bytes(uid)

    @contextlib.contextmanager
    def group(self) -> Iterator[None]:
        """ncclGroupStart/ncclGroupEnd around the block: its calls are launched together."""
        self.ncclGroupStart()
        try:
            yield
        finally:
            self.ncclGroupEnd()


@functools.cache
def _load() -> NCCL:
    path = library_path()
    if path is None:
        raise NcclUnavailable("no libnccl.so.2: torch has none loaded and no nvidia/nccl/lib is on sys.path")
    return NCCL(path)


def load() -> NCCL:
    """The NCCL library torch uses, bound once per process; NcclUnavailable says why not."""
    if not torch.cuda.is_available():
        why = "torch is built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise NcclUnavailable(f"NCCL needs a CUDA GPU: {why} (torch {torch.__version__})")
    return _load()


def require() -> None:
    """NcclUnavailable unless NCCL can be used here, checked before any rank starts: bound, once
    this process has started CUDA (a run); found, before (a plan, which starts neither torch nor
    CUDA: the library torch would load is the wheel's on sys.path, else the loader's)."""
    if cuda_started():
        load()
    elif library_path() is None and ctypes.util.find_library("nccl") is None:
        raise NcclUnavailable("no libnccl.so.2: no nvidia/nccl/lib on sys.path and none the loader finds")


def unique_id() -> bytes:
    """A fresh ncclUniqueId (128 bytes), made on rank 0 and given to every rank."""
    return load().unique_id()


class Communicator:
    """One rank's NCCL communicator on a CUDA device, with ops on torch tensors.

    Tensors must be contiguous, on this device and of a dtype in DATA_TYPES. Each op enqueues
    on `stream` (a torch.cuda.Stream or a cudaStream_t as int), by default the current stream
    at call time. Creating and closing are collective: every rank does both.
    """

    def __init__(self, rank: int, nranks: int, uid: bytes, device: int | None = None) -> None:
        if len(uid) != UNIQUE_ID_BYTES:
            raise ValueError(f"an NCCL unique id has {UNIQUE_ID_BYTES} bytes, got {len(uid)}")
        self.lib = load()
        self.rank, self.nranks = rank, nranks
        self.device = torch.cuda.current_device() if device is None else device
        comm = _Comm()
        try:
            with torch.cuda.device(self.device):  # ncclCommInitRank takes the current CUDA device
                self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, UniqueId.from_buffer_copy(uid), rank)
        except NcclError:
            if comm.value:  # a blocking init that failed late leaves a comm in error state
                with contextlib.suppress(NcclError):
                    self.lib.ncclCommAbort(comm)
            raise
        self._comm = comm

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def close(self) -> None:
        """ncclCommDestroy: waits for this comm's pending ops; every rank on the node must call it."""
        comm, self._comm = self._comm, None
        if comm is not None:
            self.lib.ncclCommDestroy(comm)

    def abort(self) -> None:
        """ncclCommAbort: stops pending ops and frees the comm, for error paths."""
        comm, self._comm = self._comm, None
        if comm is not None:
            self.lib.ncclCommAbort(comm)

    def _stream(self, stream: StreamLike) -> int:
        if stream is None:
            # Looked up at every call: inside torch.cuda.graph the capture stream is current.
            return torch.cuda.current_stream(self.device).cuda_stream
        return getattr(stream, "cuda_stream", stream)

    def _buf(self, t: torch.Tensor) -> tuple[int, int, int]:
        """(address, element count, ncclDataType_t) of t."""
        if t.get_device() != self.device or not t.is_contiguous():
            raise ValueError(f"NCCL needs contiguous tensors on cuda:{self.device}, got {t.device}"
                             + ("" if t.is_contiguous() else " (not contiguous)"))
        try:
            return t.data_ptr(), t.numel(), DATA_TYPES[str(t.dtype).removeprefix("torch.")]
        except KeyError:
            raise TypeError(f"NCCL binding has no data type for {t.dtype}") from None

    def _pair(self, a: torch.Tensor, b: torch.Tensor, a_per_b: int, what: str) -> tuple:
        """Buffers of a and b, checked: same dtype and a.numel() == a_per_b * b.numel()."""
        pa, na, ta = self._buf(a)
        pb, nb, tb = self._buf(b)
        if ta != tb or na != a_per_b * nb:
            raise ValueError(f"{what}: {a.dtype} x {na} and {b.dtype} x {nb} don't fit")
        return pa, pb, nb, ta

    def prepare(self, calls: list) -> Callable[[int], None]:
        """Library calls (an op's, from the *_calls builders below) as one function of a
        cudaStream_t handle, their buffers checked once by the builder; several calls go as one group.

        Back-to-back small collectives are bound by the host: checks repeated at every launch
        would show in their time. The public methods below are prepare(<op>_calls(...))(stream).
        """
        if len(calls) == 1:
            (fn, fixed), = calls
            return lambda stream: fn(*fixed, stream)
        lib = self.lib

        def grouped(stream: int) -> None:
            lib.ncclGroupStart()
            try:
                for fn, fixed in calls:
                    fn(*fixed, stream)
            finally:
                lib.ncclGroupEnd()

        return grouped

    def all_reduce(self, inp: torch.Tensor, out: torch.Tensor | None = None, op: str = "sum",
                   stream: StreamLike = None) -> None:
        """Reduce inp over the ranks into out (by default in place, into inp)."""
        self.prepare(self.all_reduce_calls(inp, out, op))(self._stream(stream))

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, stream: StreamLike = None) -> None:
        """out[r*k:(r+1)*k] = rank r's inp, where k = inp.numel()."""
        self.prepare(self.all_gather_calls(out, inp))(self._stream(stream))

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, op: str = "sum", stream: StreamLike = None) -> None:
        """out = block `rank` (of out.numel() elements) of inp reduced over the ranks."""
        self.prepare(self.reduce_scatter_calls(out, inp, op))(self._stream(stream))

    def broadcast(self, buf: torch.Tensor, root: int = 0, stream: StreamLike = None) -> None:
        """buf = root's buf, in place."""
        self.prepare(self.broadcast_calls(buf, root))(self._stream(stream))

    def reduce(self, buf: torch.Tensor, root: int = 0, op: str = "sum", stream: StreamLike = None) -> None:
        """root's buf = buf reduced over the ranks, in place; the others' buf is left as it was."""
        self.prepare(self.reduce_calls(buf, root, op))(self._stream(stream))

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, stream: StreamLike = None) -> None:
        """Block r of inp goes to rank r, whose block `rank` of out receives it; as nccl-tests'
        alltoall: one group of a send and a receive of equal chunks with every rank."""
        self.prepare(self.all_to_all_calls(out, inp))(self._stream(stream))

    def sendrecv(self, send: torch.Tensor, recv: torch.Tensor, peer_send: int, peer_recv: int,
                 stream: StreamLike = None) -> None:
        """Send `send` to peer_send while receiving `recv` from peer_recv, grouped (as nccl-tests'
        sendrecv, so a ring of them cannot deadlock)."""
        self.prepare(self.sendrecv_calls(send, recv, peer_send, peer_recv))(self._stream(stream))

    # Each *_calls returns its library calls as (function, arguments but the trailing stream).
    def all_reduce_calls(self, inp: torch.Tensor, out: torch.Tensor | None = None, op: str = "sum") -> list:
        pi, po, n, t = self._pair(inp, inp if out is None else out, 1, "ncclAllReduce")
        return [(self.lib.ncclAllReduce, (pi, po, n, t, REDUCE_OPS[op], self._comm))]

    def all_gather_calls(self, out: torch.Tensor, inp: torch.Tensor) -> list:
        po, pi, k, t = self._pair(out, inp, self.nranks, "ncclAllGather")
        return [(self.lib.ncclAllGather, (pi, po, k, t, self._comm))]

    def reduce_scatter_calls(self, out: torch.Tensor, inp: torch.Tensor, op: str = "sum") -> list:
        pi, po, k, t = self._pair(inp, out, self.nranks, "ncclReduceScatter")
        return [(self.lib.ncclReduceScatter, (pi, po, k, t, REDUCE_OPS[op], self._comm))]

    def broadcast_calls(self, buf: torch.Tensor, root: int = 0) -> list:
        p, n, t = self._buf(buf)
        return [(self.lib.ncclBroadcast, (p, p, n, t, root, self._comm))]

    def reduce_calls(self, buf: torch.Tensor, root: int = 0, op: str = "sum") -> list:
        p, n, t = self._buf(buf)
        return [(self.lib.ncclReduce, (p, p, n, t, REDUCE_OPS[op], root, self._comm))]

    def all_to_all_calls(self, out: torch.Tensor, inp: torch.Tensor) -> list:
        po, pi, n, t = self._pair(out, inp, 1, "all to all")
        if n % self.nranks:
            raise ValueError(f"all to all: {n} elements don't split into {self.nranks} equal chunks")
        chunk = n // self.nranks
        step = chunk * inp.element_size()
        calls = []
        for peer in range(self.nranks):
            calls.append((self.lib.ncclSend, (pi + peer * step, chunk, t, peer, self._comm)))
            calls.append((self.lib.ncclRecv, (po + peer * step, chunk, t, peer, self._comm)))
        return calls

    def send_call(self, send: torch.Tensor, peer: int) -> tuple:
        """ncclSend of `send` to `peer`: one call of a group (an op's calls go as one)."""
        p, n, t = self._buf(send)
        return self.lib.ncclSend, (p, n, t, peer, self._comm)

    def recv_call(self, recv: torch.Tensor, peer: int) -> tuple:
        """ncclRecv into `recv` from `peer`: one call of a group."""
        p, n, t = self._buf(recv)
        return self.lib.ncclRecv, (p, n, t, peer, self._comm)

    def sendrecv_calls(self, send: torch.Tensor, recv: torch.Tensor, peer_send: int, peer_recv: int) -> list:
        return [self.send_call(send, peer_send), self.recv_call(recv, peer_recv)]


def join(rank: int, world_size: int, device: int) -> Communicator:
    """A communicator over torch.distributed's default group's ranks: rank 0's unique id reaches
    the others through it. Every rank must call it together."""
    uid = [unique_id() if rank == 0 else None]
    tdist.broadcast_object_list(uid, src=0)
    return Communicator(rank, world_size, uid[0], device)
