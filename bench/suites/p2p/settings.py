"""The p2p suite's settings (the config section `p2p`) and the names of its ops (from their
declarations in ops.py) and modes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List

from bench import ConfigError
from bench.config.settings import Choice, Engine, nonempty, require
from bench.ops import choices, defaults
from bench.suites.p2p.ops import OPS as DECLARED


OPS = {op.name: op for op in DECLARED}
P2POp = Choice("P2POp", choices(DECLARED))


PAIR_OPS = ("uni", "bidir")
CONCURRENT_OPS = ("all_to_one", "one_to_all")


class P2PMode(Choice):
    peer = "peer"
    staged = "staged"


@dataclass(frozen=True)
class Staging:
    """How a held staged copy goes through host memory: round a ring of `slots` buffers."""
    slots: int


# Four slots: a held staged copy then waits on one hand-off between the GPUs, not on a round trip
# through host memory, whose pace strays from process to process (docs/method.md, "Eager and held").
# A figure of a point with these params is a copy's time in a stream of them, as NCCL's
# shared-memory transport moves a FIFO of steps; a staged copy's lone trip is the eager point's.
HELD_STAGING = Staging(slots=4)


_PAIRS_HELP = "use auto, all, ring, or a list of [src, dst] pairs like [[0,1],[1,0]]"


@dataclass
class Settings:
    # auto | all | ring | [[src, dst], ...]: one of two shapes, so it is checked here rather than typed.
    # auto: every ordered pair at the smallest and the largest whole-machine size, one pair per link
    # class at the others (see points())
    pairs: Any = "auto"
    ops: List[P2POp] = field(default_factory=lambda: [P2POp(op) for op in defaults(DECLARED)])
    modes: List[P2PMode] = field(default_factory=lambda: list(P2PMode))
    engine: List[Engine] = field(default_factory=lambda: list(Engine))
    # GPU counts of all_to_one and one_to_all (the first N GPUs); [] (or auto): every GPU. Counts
    # above the machine's are capped to it, so [2,4,8] scales as far as the machine goes.
    together: List[int] = field(default_factory=list, metadata={"auto": "[]"})

    def __post_init__(self) -> None:
        for n in self.together:
            require(n >= 2, "p2p.together", n, "a count of GPUs at once must be >= 2")
        nonempty("p2p.ops", self.ops)
        nonempty("p2p.modes", self.modes)
        nonempty("p2p.engine", self.engine)
        if isinstance(self.pairs, str):
            if self.pairs not in ("auto", "all", "ring"):
                raise ConfigError(f"p2p.pairs={self.pairs!r} is unknown; {_PAIRS_HELP}")
            return
        try:
            self.pairs = [[int(x) for x in item] for item in self.pairs]
        except (TypeError, ValueError):
            raise ConfigError(f"p2p.pairs={self.pairs!r}: {_PAIRS_HELP}") from None
        for item in self.pairs:
            if len(item) != 2 or item[0] == item[1] or min(item) < 0:
                raise ConfigError(f"p2p.pairs: {item} is not a pair of two different GPU indices")
        nonempty("p2p.pairs", self.pairs)
