"""A point's identity and its name: the one declaration of the keys that identify a point (one
sweep step), the subsets the others use derived from it, and the one labeler.

Tables, figures, the report, the gate (analysis/compare.py), the doctor (analysis/judge.py), the
plan and the run's progress all name a variant with `variant_label` and a point with
`point_label`, so one variant reads the same everywhere: 'collectives all_reduce torch.distributed
eager float32 n=4' beside raw NCCL's 'collectives all_reduce nccl eager float32 n=4'. The api,
the launch and the engine are always named where a point has them (a family measures more than
one of each); defaults that tell nothing apart (uint8, one rank, one node, collectives' default
mode, NCCL under torch.distributed) are left out.

No pandas, numpy or torch here: the plan, the contract and the analysis all import it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, get_type_hints

from bench.sizes import format_size


@dataclass(frozen=True)
class PointKey:
    """What identifies a point (one sweep step); trials and parts are rows within it. A suite's
    `contract.Point` and a result's `results.Sample` are this with more: neither lists these
    fields again."""

    suite: str
    op: str
    size_bytes: int
    memory: str = ""             # pinned | pageable | device | host
    mode: str = ""               # p2p: peer | staged; collectives: default | socket
    backend: str = ""            # cuda | cpu | nccl | gloo
    src: str = ""
    dst: str = ""
    world_size: int = 1
    nnodes: int = 1
    dtype: str = "uint8"
    launch: str = "eager"        # eager | graph | held
    api: str = ""                # collectives: torch (torch.distributed) | nccl (the library, directly)
    engine: str = ""             # copies: ce (copy engine) | sm (a copy kernel)
    numa: str = ""               # host copies: local | remote | none (where the host buffer lives)
    params: Any = None           # the suite's own description of the point (a Point's frozen dataclass)


# The point's keys in the order rows are grouped and sorted by: its size last.
POINT_KEYS = [f.name for f in fields(PointKey) if f.name != "size_bytes"] + ["size_bytes"]
# Its whole numbers (read back from text as numbers).
INT_KEYS = [k for k in POINT_KEYS if get_type_hints(PointKey)[k] is int]
# A variant: a point but its size (the gate's and the doctor's families are a variant's sizes).
VARIANT_KEYS = [k for k in POINT_KEYS if k != "size_bytes"]
# The GPUs or the pair a point runs on.
ENDS = ["src", "dst"]
ALL = "all"   # src or dst of a point that runs on every GPU at once (world_size of them)
# A variant over its GPUs and pairs, its params left to the suite's own tables: a summary row, a
# peak, a series of the plan.
SERIES_KEYS = [k for k in VARIANT_KEYS if k not in (*ENDS, "params")]
# What tells two curves of one suite's op apart (figures' panels and lines, the report's cells).
CURVE_KEYS = [k for k in SERIES_KEYS if k not in ("suite", "op")]
# What tells apart copies made on every GPU at once (the copy and p2p suites' concurrent tables):
# the GPU count is their `gpu` column, and they are eager copies of bytes.
AT_ONCE_KEYS = [k for k in SERIES_KEYS if k not in ("backend", "world_size", "nnodes", "dtype", "launch", "api")]
# A family measured at several GPU counts (the scaling table): a series but its ranks and nodes,
# which are its GPU count.
SCALING_KEYS = [k for k in SERIES_KEYS if k not in ("world_size", "nnodes")]
# A variant's role on a machine (expected.csv's columns): GPUs read as 'gpu', a pair's link class
# in `link` (analysis/expected.py).
ROLE_KEYS = [*VARIANT_KEYS[:VARIANT_KEYS.index("dst") + 1], "link", *VARIANT_KEYS[VARIANT_KEYS.index("dst") + 1:]]

API_NAMES = {"torch": "torch.distributed", "nccl": "nccl"}


def _key(point: Any) -> Mapping[str, Any]:
    if isinstance(point, Mapping):
        return point
    if hasattr(point, "to_dict"):    # a pandas row
        return point.to_dict()
    return {k: getattr(point, k) for k in POINT_KEYS if hasattr(point, k)}


def _text(value: Any) -> str:
    return "" if value is None or str(value) in ("nan", "None") else str(value)


def _words(key: Mapping[str, Any]) -> list[str]:
    get = lambda k: _text(key.get(k, ""))   # noqa: E731
    api, backend = get("api"), get("backend")
    # NCCL under torch.distributed and the GPU's own backends go without saying; gloo does not.
    implied = backend in ("", "cuda", "cpu") or api == "nccl" or (backend == "nccl" and api in ("", "torch"))
    src, dst = get("src"), get("dst")
    world, nodes = get("world_size"), get("nnodes")
    return [get("suite"), get("op"), get("memory"),
            get("mode") if get("mode") != "default" else "",
            API_NAMES.get(api, api),
            "" if implied else backend,
            get("launch"), get("engine"),
            f"numa={get('numa')}" if get("numa") else "",
            f"{src}->{dst}" if src or dst else "",
            get("dtype") if get("dtype") != "uint8" else "",
            f"n={world}" if world and int(float(world)) > 1 else "",
            f"{nodes} nodes" if nodes and int(float(nodes)) > 1 else ""]


def variant_label(point: Any) -> str:
    """A variant's one name (a dict, a Point, a Sample or a row; keys it lacks are left out):
    'copy h2d pinned eager ce numa=local host->cuda:0', 'collectives all_reduce torch.distributed
    eager float32 n=4'."""
    return " ".join(w for w in _words(_key(point)) if w)


def point_label(point: Any) -> str:
    """A variant's name and the point's size: 'copy h2d pinned eager ce host->cuda:0 64MiB'."""
    key = _key(point)
    return f"{variant_label(key)} {format_size(int(key['size_bytes']))}"


def curve_words(key: Mapping[str, Any], keys: list[str]) -> str:
    """The words of variant_label for `keys` only (a curve named by what varies among its
    neighbours): 'torch.distributed', 'sm numa=remote', 'float32 n=4'."""
    words = _words({**{k: key.get(k, "") for k in keys}, "api": key.get("api", "")})
    if "api" not in keys:
        words[4] = ""   # read only for whether the backend goes without saying
    return " ".join(w for w in words if w)
