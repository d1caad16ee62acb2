"""The ctypes NCCL binding without a GPU: enums, the id's layout, finding and refusing the library.

Tests taking the `real_library` fixture need libnccl.so.2 (torch's CUDA wheels bring it; with a
CPU-only torch, PYTHONPATH=DIR after `pip install --target DIR nvidia-nccl-cu13`) and skip without it.
"""
import ctypes
import os

import pytest
import torch

from bench.measure import nccl
from bench.suites.collectives.settings import DTYPES


def test_every_collectives_dtype_has_its_header_value():
    # ncclDataType_t in nccl.h
    header = {"int8": 0, "uint8": 1, "int32": 2, "int64": 4, "float16": 6, "float32": 7,
              "float64": 8, "bfloat16": 9}
    assert {name: nccl.DATA_TYPES[name] for name in DTYPES} == header
    # keyed by the name a tensor's dtype gives: torch.float32 -> 'float32'
    assert all(str(getattr(torch, name)).removeprefix("torch.") == name for name in DTYPES)


def test_reduce_ops_have_their_header_values():
    assert nccl.REDUCE_OPS == {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


def test_unique_id_is_128_bytes_and_goes_by_value_to_init():
    assert ctypes.sizeof(nccl.UniqueId) == nccl.UNIQUE_ID_BYTES == 128
    assert nccl._CALLS["ncclCommInitRank"][2] is nccl.UniqueId
    raw = bytes(range(128))
    assert bytes(nccl.UniqueId.from_buffer_copy(raw)) == raw  # zero bytes survive the round trip


def test_load_without_cuda_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(nccl.NcclUnavailable) as err:
        nccl.load()
    assert "needs a CUDA GPU" in str(err.value) and "\n" not in str(err.value)


def test_no_library_is_one_line(monkeypatch):
    monkeypatch.setattr(nccl, "library_path", lambda: None)
    nccl._load.cache_clear()
    with pytest.raises(nccl.NcclUnavailable, match="no libnccl.so.2") as err:
        nccl._load()
    assert "\n" not in str(err.value)
    with pytest.raises(nccl.NcclUnavailable, match="cannot use /nonexistent/libnccl.so.2: ") as err:
        nccl.NCCL("/nonexistent/libnccl.so.2")
    assert "\n" not in str(err.value)


def test_mapped_library_is_read_from_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f10 r-xp 00000000 08:01 11 /usr/lib/libc.so.6\n"
        "7f10-7f20 r--p 00000000 00:00 0 \n"
        "7f20-7f30 r-xp 00000000 08:01 12 /opt/py/site-packages/nvidia/nccl/lib/libnccl.so.2\n")
    assert nccl._mapped_library(str(maps)) == "/opt/py/site-packages/nvidia/nccl/lib/libnccl.so.2"
    maps.write_text("7f00-7f10 r-xp 00000000 08:01 11 /usr/lib/libc.so.6\n")
    assert nccl._mapped_library(str(maps)) is None
    assert nccl._mapped_library(str(tmp_path / "absent")) is None


def test_installed_library_is_found_on_sys_path(tmp_path, monkeypatch):
    other = tmp_path / "a" / "nvidia" / "cu13" / "lib"
    own = tmp_path / "b" / "nvidia" / "nccl" / "lib"
    for d in (other, own):
        d.mkdir(parents=True)
        (d / "libnccl.so.2").touch()
    monkeypatch.setattr(nccl, "_mapped_library", lambda: None)
    monkeypatch.setattr("sys.path", [str(tmp_path / "none"), str(tmp_path / "a"), str(tmp_path / "b")])
    assert nccl.library_path() == str(other / "libnccl.so.2")  # sys.path order decides
    monkeypatch.setattr("sys.path", [str(tmp_path / "b"), str(tmp_path / "a")])
    assert nccl.library_path() == str(own / "libnccl.so.2")
    monkeypatch.setattr("sys.path", [str(tmp_path / "none")])
    assert nccl.library_path() is None


def test_communicator_refuses_a_short_id():
    with pytest.raises(ValueError, match="128 bytes, got 16"):
        nccl.Communicator(0, 1, b"x" * 16)


class _Recorder:
    """Stands for the library: records each call with its arguments."""

    def __init__(self) -> None:
        self.calls = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))


def _fake_comm(device: int = -1) -> nccl.Communicator:
    """Rank 1 of 2 on `device` (-1: CPU tensors pass), calling a _Recorder."""
    comm = nccl.Communicator.__new__(nccl.Communicator)
    comm.lib, comm.rank, comm.nranks, comm.device, comm._comm = _Recorder(), 1, 2, device, "comm"
    return comm


def test_ops_pass_the_headers_arguments():
    c, s = _fake_comm(), 99
    x, y, w = torch.zeros(4), torch.zeros(8), torch.zeros(8)
    p, q, o = x.data_ptr(), y.data_ptr(), w.data_ptr()
    c.all_reduce(x, stream=s)
    c.all_reduce(y, w, op="max", stream=s)
    c.all_gather(y, x, stream=s)
    c.reduce_scatter(x, y, op="min", stream=s)
    c.broadcast(x, root=1, stream=s)
    c.reduce(x, root=1, op="prod", stream=s)
    c.all_to_all(w, y, stream=s)
    c.sendrecv(x, x, 0, 1, stream=s)
    f32 = nccl.DATA_TYPES["float32"]
    assert c.lib.calls == [
        ("ncclAllReduce", p, p, 4, f32, 0, "comm", s),
        ("ncclAllReduce", q, o, 8, f32, 2, "comm", s),
        ("ncclAllGather", p, q, 4, f32, "comm", s),  # sendcount: the input's
        ("ncclReduceScatter", q, p, 4, f32, 3, "comm", s),  # recvcount: the output's
        ("ncclBroadcast", p, p, 4, f32, 1, "comm", s),
        ("ncclReduce", p, p, 4, f32, 1, 1, "comm", s),
        ("ncclGroupStart",),
        ("ncclSend", q, 4, f32, 0, "comm", s), ("ncclRecv", o, 4, f32, 0, "comm", s),
        ("ncclSend", q + 16, 4, f32, 1, "comm", s), ("ncclRecv", o + 16, 4, f32, 1, "comm", s),
        ("ncclGroupEnd",),
        ("ncclGroupStart",), ("ncclSend", p, 4, f32, 0, "comm", s), ("ncclRecv", p, 4, f32, 1, "comm", s),
        ("ncclGroupEnd",),
    ]


def test_a_prepared_op_launches_with_only_a_stream():
    c = _fake_comm()
    x = torch.zeros(4)
    launch = c.prepare(c.all_reduce_calls(x))
    launch(7)
    launch(8)
    assert [call[-1] for call in c.lib.calls] == [7, 8] and c.lib.calls[0][1] == x.data_ptr()


def test_ops_refuse_buffers_nccl_would_overrun():
    c = _fake_comm()
    with pytest.raises(ValueError, match="ncclAllGather"):
        c.all_gather(torch.zeros(7), torch.zeros(4), stream=0)
    with pytest.raises(ValueError, match="ncclReduceScatter"):
        c.reduce_scatter(torch.zeros(4), torch.zeros(8, dtype=torch.float16), stream=0)
    with pytest.raises(ValueError, match="equal chunks"):
        c.all_to_all(torch.zeros(5), torch.zeros(5), stream=0)
    with pytest.raises(ValueError, match="not contiguous"):
        c.broadcast(torch.zeros(4, 4).t(), stream=0)
    with pytest.raises(TypeError, match="complex64"):
        c.broadcast(torch.zeros(4, dtype=torch.complex64), stream=0)
    with pytest.raises(ValueError, match="on cuda:0"):
        _fake_comm(device=0).broadcast(torch.zeros(4), stream=0)
    assert c.lib.calls == []


@pytest.fixture(scope="module")
def real_library():
    path = nccl.library_path()
    if path is None:
        pytest.skip("no libnccl.so.2 here (torch is CPU-only and no nvidia-nccl wheel is on sys.path)")
    return nccl.NCCL(path)


def test_real_library_version_and_ids(real_library):
    major, minor, patch = real_library.version()
    assert (major, minor) >= (2, 18) and patch >= 0
    a, b = real_library.unique_id(), real_library.unique_id()
    assert len(a) == len(b) == 128 and a != b


def test_real_library_is_the_mapped_one(real_library):
    # ctypes.CDLL on a loaded path adds no second copy: /proc/self/maps names the same file.
    assert os.path.realpath(nccl._mapped_library()) == os.path.realpath(real_library.path)


def test_real_library_errors_carry_both_messages(real_library):
    with pytest.raises(nccl.NcclError, match=r"ncclGroupEnd failed: .*\(ncclResult_t 5\): .*not in a group") as err:
        real_library.ncclGroupEnd()
    assert err.value.code == 5  # ncclInvalidUsage
    with real_library.group():  # balanced: no error
        pass
