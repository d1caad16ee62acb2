"""The points a run of collectives measures: its worlds of ranks (as many as this machine holds),
its apis, the transport's environment, and every point of one world."""
from __future__ import annotations

import sys

from bench import ConfigError
from bench.contract import Context, Point
from bench.measure.memory import check_fits, format_bytes
from bench.sizes import parse_size
from bench.suites.collectives.reading import CollectivesView
from bench.suites.collectives.settings import ELEMENT_BYTES, OPS, Api, Settings


def backend(ctx: Context) -> str:
    return "nccl" if ctx.device == "cuda" else "gloo"


def _asked(s: Settings, ctx: Context) -> list[int]:
    return list(s.nproc) or [ctx.gpu_count if ctx.device == "cuda" else 2]


def world_sizes(s: Settings, ctx: Context, max_ranks: int = 0) -> list[int]:
    """The ranks of each world measured: collectives.nproc, or one per GPU (2 on a CPU); capped at
    one rank per GPU present and at `max_ranks` (rank_limit: this machine's cores and host
    memory), so [2,4,8] scales as far as the machine goes."""
    limits = ([ctx.gpu_count] if ctx.device == "cuda" else []) + ([max_ranks] if max_ranks else [])
    return list(dict.fromkeys(min([n, *limits]) for n in _asked(s, ctx)))


def check_worlds(s: Settings, ctx: Context, max_ranks: int, limited_by: str) -> None:
    """The worlds of ranks capped at `max_ranks` (what `limited_by` names): a line when the cap bites
    here, ConfigError when they cannot measure, and whether they fit the GPUs' memory."""
    sizes, asked = world_sizes(s, ctx, max_ranks), max(_asked(s, ctx))
    if max(sizes) < asked and ctx.here:
        gpus = ctx.device == "cuda" and ctx.gpu_count == max(sizes)
        why = f"the {ctx.gpu_count} GPU(s) present (one rank per GPU)" if gpus else limited_by
        print(f"xferbench: collectives.nproc={_asked(s, ctx)} capped at {why}: world sizes {sizes}",
              file=sys.stderr)
    if max(sizes) < 2 and all(op == "sendrecv" for op in s.ops):
        raise ConfigError("collectives.ops=[sendrecv] needs 2 or more ranks")
    if ctx.device != "cuda" and ctx.here and max(sizes) < 2 <= asked:
        # gloo between local processes: one rank moves nothing between ranks, however long it runs
        raise ConfigError(f"collectives: one rank only, {limited_by}, and a collective needs 2 (gloo: no "
                          f"traffic between ranks); lower sizes.max (now {format_bytes(max(ctx.sizes))}) or free "
                          "host memory")
    if ctx.device == "cuda" and ctx.here:
        check_fits("collectives (about 2 x sizes.max per GPU)", 2 * max(ctx.sizes), range(max(sizes)))


def apis(s: Settings, ctx: Context) -> list[str]:
    """The apis measured here: NCCL needs GPUs, so gloo runs torch.distributed only."""
    return [str(a) for a in s.api if ctx.device == "cuda" or a == Api.torch]


def transport_env(transport: str, nnodes: int) -> dict[str, str]:
    """NCCL over plain sockets, as between nodes without InfiniBand: on loopback when every rank is
    on this host; across hosts NCCL picks the interface (or the user's NCCL_SOCKET_IFNAME)."""
    if transport != "socket":
        return {}
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}
    return {**env, "NCCL_SOCKET_IFNAME": "lo"} if nnodes == 1 else env


def message_bytes(op: str, size: int, dtype: str, n: int) -> int:
    """The size actually measured: whole elements, and for split ops whole elements per rank."""
    unit = ELEMENT_BYTES[dtype] * (n if OPS[op].split else 1)
    return max(unit, size // unit * unit)


def sweep(s: Settings, ctx: Context) -> list[Point]:
    """Every point of one world of ctx.world_size ranks."""
    n = ctx.world_size
    ops = [op for op in s.ops if not (op == "sendrecv" and n < 2)]
    mode = "socket" if s.transport == "socket" else "default"
    nccl_max = parse_size(s.nccl_max_size) if s.nccl_max_size else None
    out, seen = [], set()
    for size in ctx.sizes:
        for op in ops:
            for dtype in s.dtypes:
                nbytes = message_bytes(op, size, dtype, n)
                # One rank sends nothing: its captured or held ops are local copies or nothing,
                # and time nothing of the interconnect.
                for launch in ctx.launches_at(nbytes, graph=n > 1, held=n > 1):
                    for api in apis(s, ctx):
                        if api == Api.nccl and (nccl_max is not None and nbytes > nccl_max
                                                or launch not in s.nccl_launch):
                            continue
                        p = Point(CollectivesView.name, str(op), nbytes, mode=mode, backend=backend(ctx), world_size=n,
                                  nnodes=ctx.nnodes, dtype=str(dtype), launch=launch, api=api)
                        if p not in seen:
                            seen.add(p)
                            out.append(p)
    return out
