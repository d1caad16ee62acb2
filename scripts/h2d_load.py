#!/usr/bin/env python3
"""Load one GPU's host link from a second process: pinned host -> device copies on one GPU in a
loop until stopped (SIGTERM or SIGINT: it finishes the copies in flight and exits 0).

A handicap for scripts/noise_study.py, which starts it before a run and stops it after:

  python scripts/noise_study.py ... --handicap 'h2d-load:bg=python scripts/h2d_load.py' -- ...

It prints one line when it starts copying and one when it stops (the GB/s it moved). --duty
sets the share of time it copies: in each --period it copies for duty x period seconds and
sleeps the rest. It touches CUDA only when run (--help needs no GPU), and keeps NVLink
multicast off (bench.SAFE_ENV) unless the environment says otherwise.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from bench import SAFE_ENV, ConfigError
from bench.sizes import format_size, parse_size


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a share of time in (0, 1]")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256MiB", help="bytes per copy (default 256MiB)")
    parser.add_argument("--duty", type=_fraction, default=1.0, help="share of time spent copying (default 1)")
    parser.add_argument("--period", type=float, default=0.1, help="seconds of one copy-then-sleep cycle (default 0.1)")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU whose link it loads (default 0)")
    args = parser.parse_args(argv)
    try:
        size = parse_size(args.size, "--size")
    except ConfigError as exc:
        parser.error(str(exc))
    for key, value in SAFE_ENV.items():
        os.environ.setdefault(key, value)

    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))

    import torch   # only now: a process that copies needs CUDA, --help does not

    if not torch.cuda.is_available() or args.gpu >= torch.cuda.device_count():
        print(f"h2d_load: error: no CUDA GPU {args.gpu} here", file=sys.stderr)
        return 2
    torch.cuda.set_device(args.gpu)
    src = torch.empty(size, dtype=torch.uint8).pin_memory()
    dst = torch.empty(size, dtype=torch.uint8, device=f"cuda:{args.gpu}")
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    print(f"h2d_load: copying {format_size(size)} pinned host -> cuda:{args.gpu}, duty {args.duty:g}, "
          f"pid {os.getpid()}", flush=True)
    copies, started = 0, time.perf_counter()
    while not stop:
        busy_until = time.perf_counter() + args.duty * args.period
        while not stop and time.perf_counter() < busy_until:
            dst.copy_(src, non_blocking=True)
            copies += 1
            torch.cuda.synchronize()   # one copy in flight: a stop waits for one copy at most
        if args.duty < 1 and not stop:
            time.sleep((1 - args.duty) * args.period)
    seconds = time.perf_counter() - started
    print(f"h2d_load: stopped after {seconds:.1f} s, {copies} copies, "
          f"{copies * size / max(seconds, 1e-9) / 1e9:.1f} GB/s on average", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
