"""The work a point times: the bf16 matrix product, a transfer beside it, and this rank's GPU."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bench import lazy
from bench.contract import Context

torch = lazy.module("torch")

TINY = 1024             # elements summed by the idle synchronizations' kernel


class Matmul:
    """The bf16 product C = A @ B of n x n matrices, k at a time on the current stream."""

    def __init__(self, n: int, device: torch.device | str, seed: int = 0) -> None:
        gen = torch.Generator(device=device).manual_seed(seed)
        self.n = n
        self.a = torch.randn(n, n, generator=gen, device=device, dtype=torch.bfloat16)
        self.b = torch.randn(n, n, generator=gen, device=device, dtype=torch.bfloat16)
        self.c = torch.zeros(n, n, device=device, dtype=torch.bfloat16)

    @property
    def flops(self) -> int:
        return 2 * self.n ** 3

    def __call__(self, k: int = 1) -> None:
        for _ in range(k):
            torch.mm(self.a, self.b, out=self.c)

    def correct(self, rows: int = 64) -> bool:
        """C's first rows against a float32 product. bf16 keeps 8 significant bits, so an exact
        product rounds by at most 2^-9 of itself; 1% of the largest entry also covers the
        float32 sums' order, and still fails on a product not made or made of other data."""
        ref = self.a[:rows].float() @ self.b.float()
        return bool((self.c[:rows].float() - ref).abs().max() <= 1e-2 * ref.abs().max())


@dataclass
class Transfer:
    """A transfer: `run(k)` enqueues k of them on the current stream; `correct()` checks the data."""

    run: Callable[[int], None]
    correct: Callable[[], bool]
    host_blocks: bool = False     # pageable copies: the host waits in them, so the host clock times them
    bus_factor: float = 1.0



def rank_device(ctx: Context) -> torch.device:
    return torch.device("cuda", ctx.local_rank)
