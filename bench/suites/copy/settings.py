"""The copy suite's settings (the config section `copy`) and the names of its ops (from their
declarations in ops.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from bench import ConfigError
from bench.config.settings import Choice, Engine, HostMemory, nonempty, require
from bench.ops import PCIE, choices, defaults
from bench.points import ALL
from bench.sizes import parse_size
from bench.suites.copy.ops import OPS as DECLARED

EACH = "each"
OPS = {op.name: op for op in DECLARED}
HOST_OPS = tuple(op.name for op in DECLARED if op.link == PCIE and op.bandwidth)   # host <-> one GPU or all
ON_ONE_GPU = tuple(op.name for op in DECLARED if op.on_one_gpu)
CopyOp = Choice("CopyOp", choices(DECLARED))


class NumaMode(Choice):
    local = "local"
    remote = "remote"
    none = "none"


@dataclass
class Settings:
    ops: List[CopyOp] = field(default_factory=lambda: [CopyOp(op) for op in defaults(DECLARED)])
    memory: List[HostMemory] = field(default_factory=lambda: list(HostMemory))
    # each (every GPU alone), all (every GPU at once) or GPU indices: strings, as the items mix kinds
    gpus: List[str] = field(default_factory=lambda: [EACH, ALL])
    # GPU counts of 'all' (the first N GPUs at once); [] (or auto): every GPU. Counts above the
    # machine's are capped to it, so [2,4,8] scales as far as the machine goes.
    together: List[int] = field(default_factory=list, metadata={"auto": "[]"})
    engine: List[Engine] = field(default_factory=lambda: list(Engine))
    numa: List[NumaMode] = field(default_factory=lambda: [NumaMode.local])
    # Pageable copies up to this size (null: every size). The host's own memory copy sets them
    # and their rate is flat from a few MiB on: a larger copy costs seconds and tells nothing
    # more (docs/usage.md, the four-GPU sweep's time).
    pageable_max_size: Optional[str] = "256MiB"

    def __post_init__(self) -> None:
        for key in ("ops", "memory", "gpus", "engine", "numa"):
            nonempty(f"copy.{key}", getattr(self, key))
        for item in self.gpus:
            if item not in (EACH, ALL) and not str(item).isdigit():
                raise ConfigError(f"copy.gpus: {item!r} is not each, all or a GPU index")
        for n in self.together:
            require(n >= 2, "copy.together", n, "a count of GPUs at once must be >= 2")
        if self.pageable_max_size is not None:
            parse_size(self.pageable_max_size, "copy.pageable_max_size")
