#!/usr/bin/env python3
"""Capture real NCCL INFO logs of N local ranks, for bench.ncclog's tests (needs N GPUs).

For each rank count (--ranks, default 2 and 4, capped at the GPUs present) and transport
setting, the ranks (GPUs 0..N-1) run one all_reduce and a send/recv around the ring with
NCCL_DEBUG=INFO, each writing its stdout and stderr to OUT/<gpu>-x<N>/<setting>/ranks/rank-<R>.log,
as a run folder's ranks/ does:
  default      NCCL's choice (P2P over NVLink or PCIe where the GPUs can reach each other)
  p2p-off      NCCL_P2P_DISABLE=1: through host shared memory (SHM)
  p2p-shm-off  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket: through a socket
NVLink multicast stays off (bench.SAFE_ENV) unless set otherwise.

    python scripts/capture_nccl_logs.py            # -> tests/data/nccl/<gpu>-x<N>/<setting>/ranks/
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench  # noqa: E402

SETTINGS = {
    "default": {},
    "p2p-off": {"NCCL_P2P_DISABLE": "1"},
    "p2p-shm-off": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket"},
}


def _rank(rank: int, out: str, port: int, world: int) -> None:
    # NCCL writes to the C library's stdout: the file descriptors are redirected, not sys.stdout.
    log = os.open(Path(out) / "ranks" / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    # Around the ring, even ranks sending first: every rank's peer connections to its neighbours.
    after, before = (rank + 1) % world, (rank - 1) % world
    received = torch.empty_like(x)
    for step in (0, 1):
        if (rank % 2 == 0) == (step == 0):
            dist.send(x, after)
        else:
            dist.recv(received, before)
    torch.cuda.synchronize()
    print(f"rank {rank}: all_reduce and send/recv done, x[0] = {x[0].item()}", flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="folder for the <gpu>-x<N> folders (default: tests/data/nccl)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="rank counts (default: 2 4)")
    args = parser.parse_args(argv)
    gpus = torch.cuda.device_count()
    counts = sorted({n for n in args.ranks if 2 <= n <= gpus})
    if not counts:
        print(f"xferbench: error: capture_nccl_logs needs 2 or more GPUs for --ranks {args.ranks}; found {gpus}",
              file=sys.stderr)
        return 2
    model = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower().replace("nvidia", "").split()[0])
    os.environ.update({k: os.environ.get(k, v) for k, v in bench.SAFE_ENV.items()})
    for world in counts:
        for setting, env in SETTINGS.items():
            folder = (args.out or ROOT / "tests" / "data" / "nccl") / f"{model}-x{world}" / setting
            (folder / "ranks").mkdir(parents=True, exist_ok=True)
            os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,ENV,NET", **env)
            mp.start_processes(_rank, args=(str(folder), _free_port(), world), nprocs=world, start_method="spawn")
            for key in env:
                del os.environ[key]
            print(f"{world} ranks, {setting}: {folder}/ranks/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
