"""The collectives, each declared once: what it moves, its buffers, its call through
torch.distributed and through NCCL directly, the exact answer it is checked against, how it reads
and how nccl-tests names it (as nccl-tests' one `testColl` record per op).

Torch-free: each call and check is a function of the modules and buffers measure.py hands it
(`Buffers`: this rank's input and output, its rank and world, the patterns every rank's data
follows), so the reading face reads these declarations without loading torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from bench.ops import NVLINK, Op, reduce_bus, split_bus


def whole(count: int, n: int) -> int:
    return count


def chunk(count: int, n: int) -> int:
    return count // n


def none(count: int, n: int) -> int:
    return 0


@dataclass(frozen=True, kw_only=True)
class Collective(Op):
    """A collective: an `Op` with its buffers, its two calls and its check."""

    torch: Callable[[Any, Any], None]      # one call through torch.distributed: (torch.distributed, Buffers)
    nccl: Callable[[Any, Any], list]       # its NCCL calls, for Communicator.prepare: (Communicator, Buffers)
    correct: Callable[[Any], bool]         # one call on fresh data left the exact answer on this rank: (Buffers)
    inp: Callable[[int, int], int] = whole    # its input's elements, for a message of `count` over n ranks
    out: Callable[[int, int], int] = none     # its output's (none: in place)
    reduces: bool = False                  # checked on small values whose sums stay exact
    # Elements this rank sends to each peer, the same it receives from it (count, n, rank); None: even blocks.
    counts: Callable[[int, int, int], list[int]] | None = None
    link: str = NVLINK
    # Held on one host, its calls are captured in a graph whose replays wait on the ranks' start
    # word (docs/method.md, "Held collectives"); False: held as eager calls queued behind it.
    held_in_graph: bool = True


def _all_gather(dist, b) -> None:   # torch 2.13 renamed the tensor form; older releases have only the old name
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(b.out, b.inp)


def _reduce_scatter(dist, b) -> None:
    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(b.out, b.inp)


def _ring(dist, b) -> None:
    """A ring: every rank sends to the next and receives from the previous."""
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, b.inp, b.next), dist.P2POp(dist.irecv, b.out, b.prev)])
    for r in reqs:
        r.wait()


def uneven(count: int, n: int, rank: int) -> list[int]:
    """rccl-tests' alltoallv split: to peer p, k = (rank + p) mod n blocks of 2 count / n^2
    elements, and to the peer of k = 0 the rest; symmetric, so each pair sends what it receives."""
    block = 2 * count // (n * n)
    rest = count - block * (n - 1) * n // 2
    return [(rank + p) % n * block if (rank + p) % n else rest for p in range(n)]


def _all_to_allv(dist, b) -> None:
    dist.all_to_all_single(b.out, b.inp, output_split_sizes=b.counts, input_split_sizes=b.counts)


def _all_to_allv_nccl(comm, b) -> list:
    """As nccl-tests' alltoallv: one group of a send and a receive with every peer, of its own count."""
    calls, lo = [], 0
    for peer, k in enumerate(b.counts):
        if k:
            calls += [comm.send_call(b.inp[lo:lo + k], peer), comm.recv_call(b.out[lo:lo + k], peer)]
        lo += k
    return calls


def _all_to_allv_correct(b) -> bool:
    """Block p of the output (of p's count) holds what p sent this rank: p's data from where p's
    blocks to the ranks before this one end."""
    lo = 0
    for peer, k in enumerate(b.counts):
        start = sum(uneven(b.count, b.n, peer)[:b.rank])
        if not b.matches(b.out[lo:lo + k], b.pattern(peer, start)):
            return False
        lo += k
    return True


# busbw as a share of NVLink one way (docs/judging.md): 2x H200 over NV18, torch.distributed,
# 1 and 4 GiB, two runs (the curves still climb below 1 GiB: no share there).
OPS = (
    Collective(name="all_reduce", order=70, bus=reduce_bus, efficiency=0.74, nccl_tests="all_reduce", reduces=True,
               torch=lambda dist, b: dist.all_reduce(b.inp), nccl=lambda comm, b: comm.all_reduce_calls(b.inp),
               correct=lambda b: b.matches(b.inp, b.total())),
    Collective(name="all_gather", order=80, bus=split_bus, split=True, efficiency=0.60, nccl_tests="all_gather",
               inp=chunk, out=whole, torch=_all_gather, nccl=lambda comm, b: comm.all_gather_calls(b.out, b.inp),
               correct=lambda b: b.blocks(0)),
    Collective(name="reduce_scatter", order=90, bus=split_bus, split=True, efficiency=0.61,
               nccl_tests="reduce_scatter", reduces=True, out=chunk, torch=_reduce_scatter,
               nccl=lambda comm, b: comm.reduce_scatter_calls(b.out, b.inp),
               correct=lambda b: b.matches(b.out, b.total(b.rank * b.chunk))),
    Collective(name="broadcast", order=100, efficiency=0.81, nccl_tests="broadcast",
               torch=lambda dist, b: dist.broadcast(b.inp, src=0), nccl=lambda comm, b: comm.broadcast_calls(b.inp, 0),
               correct=lambda b: b.matches(b.inp, b.pattern(0))),
    # only the root's buffer is defined after a reduce
    Collective(name="reduce", order=110, efficiency=0.82, nccl_tests="reduce", reduces=True,
               torch=lambda dist, b: dist.reduce(b.inp, dst=0), nccl=lambda comm, b: comm.reduce_calls(b.inp, 0),
               correct=lambda b: b.rank != 0 or b.matches(b.inp, b.total())),
    Collective(name="all_to_all", order=120, bus=split_bus, split=True, efficiency=0.73, nccl_tests="alltoall",
               out=whole, torch=lambda dist, b: dist.all_to_all_single(b.out, b.inp),
               nccl=lambda comm, b: comm.all_to_all_calls(b.out, b.inp), correct=lambda b: b.blocks(b.rank * b.chunk)),
    # Uneven blocks between each pair (no measured share yet: judged against other runs only).
    Collective(name="all_to_allv", order=125, bus=split_bus, split=True, default=False, nccl_tests="alltoallv",
               out=whole, counts=uneven, torch=_all_to_allv, nccl=_all_to_allv_nccl, correct=_all_to_allv_correct),
    # the same ring as torch's: send to the next rank, receive from the previous
    # torch queues a batch of sends and receives on a stream of its own: captured, their replays
    # ran at one of two paces from one process to the next, held eagerly they did not.
    Collective(name="sendrecv", order=130, efficiency=0.79, nccl_tests="sendrecv", out=whole, torch=_ring,
               held_in_graph=False,
               nccl=lambda comm, b: comm.sendrecv_calls(b.inp, b.out, b.next, b.prev),
               correct=lambda b: b.matches(b.out, b.pattern(b.prev))),
)
