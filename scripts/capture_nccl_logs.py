#!/usr/bin/env python3
"""Capture real NCCL INFO logs of two local ranks, for bench.ncclog's tests (needs 2 GPUs).

For each transport setting, two ranks (GPUs 0 and 1) run one all_reduce and one send/recv with
NCCL_DEBUG=INFO, each writing its stdout and stderr to OUT/<setting>/ranks/rank-<N>.log, as a
run folder's ranks/ does:
  default      NCCL's choice (P2P over NVLink or PCIe where the GPUs can reach each other)
  p2p-off      NCCL_P2P_DISABLE=1: through host shared memory (SHM)
  p2p-shm-off  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket: through a socket
NVLink multicast stays off (bench.SAFE_ENV) unless set otherwise.

    python scripts/capture_nccl_logs.py            # -> tests/data/nccl/<gpu>-x2/<setting>/ranks/
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


def _rank(rank: int, out: str, port: int) -> None:
    # NCCL writes to the C library's stdout: the file descriptors are redirected, not sys.stdout.
    log = os.open(Path(out) / "ranks" / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    if rank == 0:
        dist.send(x, 1)
    else:
        dist.recv(x, 0)
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
    parser.add_argument("--out", type=Path, help="folder for the settings' folders "
                        "(default: tests/data/nccl/<gpu model>-x2)")
    args = parser.parse_args(argv)
    if torch.cuda.device_count() < 2:
        print("xferbench: error: capture_nccl_logs needs 2 GPUs", file=sys.stderr)
        return 2
    model = torch.cuda.get_device_name(0).lower().replace("nvidia", "").split()[0]
    out = args.out or ROOT / "tests" / "data" / "nccl" / f"{re.sub(r'[^a-z0-9]+', '-', model)}-x2"
    for setting, env in SETTINGS.items():
        folder = out / setting
        (folder / "ranks").mkdir(parents=True, exist_ok=True)
        os.environ.update({k: os.environ.get(k, v) for k, v in bench.SAFE_ENV.items()})
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,ENV,NET", **env)
        mp.start_processes(_rank, args=(str(folder), _free_port()), nprocs=2, start_method="spawn")
        for key in env:
            del os.environ[key]
        print(f"{setting}: {folder}/ranks/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
