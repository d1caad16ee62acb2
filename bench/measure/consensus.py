"""Agreement between the ranks of a distributed suite: every rank takes the same decisions on
values reduced over all of them (the slowest time, whether every check passed), so each calls
the same collectives in the same order. Within one process there is nothing to agree."""
from __future__ import annotations

from bench import lazy

torch = lazy.module("torch")
tdist = lazy.module("torch.distributed")


class Consensus:
    """Reductions over the ranks of torch.distributed's default group, on `device`'s tensors
    (a CUDA device for NCCL, the CPU for gloo); Consensus(None): one process, values as they are."""

    def __init__(self, device=None) -> None:
        self.device = device

    def reduce(self, values: list[float], op: str = "max") -> list[float]:
        """Each value's maximum (or minimum, op='min') over the ranks."""
        if self.device is None:
            return list(values)
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX if op == "max" else tdist.ReduceOp.MIN)
        return t.tolist()

    def least(self, values: list[float]) -> list[float]:
        """Each value's minimum over the ranks."""
        return self.reduce(values, "min")

    def max(self, value: float) -> float:
        return self.reduce([value])[0]

    def all(self, ok: bool) -> bool:
        """True on every rank when it is True on every rank."""
        return bool(self.reduce([1.0 if ok else 0.0], "min")[0])

    def barrier(self) -> None:
        self.max(0.0)
