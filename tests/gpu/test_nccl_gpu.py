"""The ctypes NCCL binding on 2 GPUs: every op on known data, eagerly and replayed from a CUDA graph."""
import socket

import pytest
import torch
import torch.distributed as tdist
import torch.multiprocessing as tmp

import bench
from bench.measure import nccl

pytestmark = pytest.mark.gpu
if torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA GPUs", allow_module_level=True)

N, K = 2, 256  # ranks; elements in one rank's block


def _cases(comm: nccl.Communicator, dtype: torch.dtype):
    """fill(), which resets the buffers, and (name, op, result, expected) for every op."""
    r, n, dev = comm.rank, comm.nranks, comm.device

    def data(src: int, count: int = K * n) -> torch.Tensor:  # small integers: exact in any dtype
        return ((torch.arange(count, device=dev) + 7 * src) % 13).to(dtype)

    def block(t: torch.Tensor, i: int) -> torch.Tensor:
        return t[i * K:(i + 1) * K]

    a, b = torch.empty(K * n, dtype=dtype, device=dev), torch.empty(K * n, dtype=dtype, device=dev)
    every = torch.stack([data(s).double() for s in range(n)])
    total, nxt, prv = every.sum(0), (r + 1) % n, (r - 1) % n

    def fill() -> None:
        a.copy_(data(r))
        b.zero_()

    return fill, [
        ("all_reduce", lambda: comm.all_reduce(a), a, total),
        ("all_reduce max to out", lambda: comm.all_reduce(a, b, op="max"), b, every.amax(0)),
        ("all_gather", lambda: comm.all_gather(b, block(a, 0)), b, torch.cat([block(x, 0) for x in every])),
        ("reduce_scatter", lambda: comm.reduce_scatter(block(b, 0), a), block(b, 0), block(total, r)),
        ("broadcast", lambda: comm.broadcast(a, root=n - 1), a, every[n - 1]),
        ("reduce", lambda: comm.reduce(a, root=n - 1), a, total if r == n - 1 else every[r]),
        ("all_to_all", lambda: comm.all_to_all(b, a), b, torch.cat([block(x, r) for x in every])),
        ("sendrecv", lambda: comm.sendrecv(block(a, 0), block(b, 0), nxt, prv), block(b, 0), block(every[prv], 0)),
    ]


def _check_ops(comm: nccl.Communicator) -> None:
    for dtype in map(lambda name: getattr(torch, name), nccl.DATA_TYPES):   # keyed by dtype name
        fill, cases = _cases(comm, dtype)
        for name, op, result, expected in cases:
            fill()
            op()
            torch.cuda.synchronize()
            assert torch.equal(result.double(), expected), f"{name} {dtype} eager, rank {comm.rank}"
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                op()
            fill()  # the capture ran nothing: the replay alone must give the answer
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(result.double(), expected), f"{name} {dtype} graph, rank {comm.rank}"


def _mapped_nccls() -> set[str]:
    with open("/proc/self/maps") as f:
        fields = [line.split(maxsplit=5) for line in f]
    return {x[5].strip() for x in fields if len(x) == 6 and "libnccl.so" in x[5]}


def _rank(rank: int, port: int) -> None:
    torch.cuda.set_device(rank)
    tdist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=N,
                             device_id=torch.device("cuda", rank))
    try:
        uid = [nccl.unique_id() if rank == 0 else None]
        tdist.broadcast_object_list(uid, src=0)
        with nccl.Communicator(rank, N, uid[0]) as comm:
            assert comm.device == rank
            _check_ops(comm)
            with pytest.raises(ValueError, match="ncclAllGather"):
                comm.all_gather(torch.empty(K, device="cuda"), torch.empty(K, device="cuda"))
        assert _mapped_nccls() == {nccl.load().path}  # torch's library, not a second copy
        t = torch.ones(1, device="cuda")
        tdist.all_reduce(t)  # torch's own NCCL still works beside ours
        assert t.item() == N
    finally:
        tdist.destroy_process_group()


def test_every_op_eager_and_in_a_graph(monkeypatch):
    for key, value in {**bench.SAFE_ENV, "NCCL_NVLS_ENABLE": "0"}.items():
        monkeypatch.setenv(key, value)  # inherited by the ranks, before NCCL reads its settings
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp.spawn(_rank, args=(port,), nprocs=N)
