"""Synthetic result sets for CPU-only tests: plausible bandwidth curves written as real run folders.

Bandwidth follows a latency + bandwidth model, bw(S) = peak * S / (S + S_half), so curves have
the shape real runs have; each trial multiplies it by (1 + noise * N(0, 1)).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from bench.journal import RunWriter, write_json
from bench.results import SCHEMA_VERSION, Sample

KiB, MiB = 1024, 1024**2
SIZES = [4 * KiB * 4**i for i in range(8)]          # 4KiB .. 64MiB
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def _bw(peak: float, size: int, half: int = 256 * KiB) -> float:
    return peak * size / (size + half)


def _trials(point: dict, peak: float, rng: np.random.Generator, trials: int, noise: float,
            bus_factor: float = 1.0) -> list[Sample]:
    rows = []
    for t in range(trials):
        bw = _bw(peak, point["size_bytes"]) * (1 + noise * rng.standard_normal())
        rows.append(Sample(**point, trial=t, iters=100, time_s=point["size_bytes"] / (bw * 1e9),
                           algbw_gbps=bw, busbw_gbps=bw * bus_factor, verified=True))
    return rows


def copy_samples(rng: np.random.Generator, scale: float = 1.0, noise: float = 0.01, trials: int = 5,
                 sizes: list[int] = SIZES) -> list[Sample]:
    """h2d/d2h (pinned, pageable), d2d; eager everywhere, graph for pinned h2d."""
    peaks = {("h2d", "pinned"): 50.0, ("d2h", "pinned"): 52.0, ("h2d", "pageable"): 20.0,
             ("d2h", "pageable"): 18.0, ("d2d", "device"): 1500.0}
    out = []
    for (op, memory), peak in peaks.items():
        launches = ["eager", "graph"] if (op, memory) == ("h2d", "pinned") else ["eager"]
        for launch in launches:
            for size in sizes:
                src, dst = {"h2d": ("host", "cuda:0"), "d2h": ("cuda:0", "host")}.get(op, ("cuda:0", "cuda:0"))
                point = dict(suite="copy", op=op, size_bytes=size, memory=memory, backend="cuda",
                             src=src, dst=dst, launch=launch)
                out += _trials(point, peak * scale * (1.1 if launch == "graph" else 1.0), rng, trials, noise)
    return out


def p2p_samples(rng: np.random.Generator, gpus: int = 4, scale: float = 1.0, noise: float = 0.01,
                trials: int = 3, sizes: list[int] = SIZES[-4:]) -> list[Sample]:
    out = []
    for op, peak in (("uni", 380.0), ("bidir", 700.0)):
        for mode, mode_scale in (("peer", 1.0), ("staged", 0.05)):
            for i in range(gpus):
                for j in range(gpus):
                    if i == j:
                        continue
                    for size in sizes:
                        point = dict(suite="p2p", op=op, size_bytes=size, memory="device", mode=mode,
                                     backend="cuda", src=f"cuda:{i}", dst=f"cuda:{j}")
                        # one slow pair, so the heatmap has something to show
                        slow = 0.6 if (i, j) == (0, gpus - 1) else 1.0
                        out += _trials(point, peak * mode_scale * slow * scale, rng, trials, noise)
    return out


def collective_samples(rng: np.random.Generator, world_size: int = 4, scale: float = 1.0, noise: float = 0.01,
                       trials: int = 5, sizes: list[int] = SIZES) -> list[Sample]:
    out = []
    for op, factor in BUS_FACTOR.items():
        for launch in ("eager", "graph"):
            for size in sizes:
                point = dict(suite="collectives", op=op, size_bytes=size, memory="device", mode="default",
                             backend="nccl", world_size=world_size, dtype="float32", launch=launch)
                busbw_peak = 360.0 * scale
                n_factor = factor(world_size)
                out += _trials(point, busbw_peak / n_factor, rng, trials, noise, n_factor)
    return out


def write_run(run_dir: str | Path, samples: list[Sample], instance: str = "test-box", run_id: str | None = None,
              **instance_fields) -> Path:
    """A run folder load() accepts: samples through RunWriter, meta.json with the instance's fields."""
    run_dir = Path(run_dir)
    run_id = run_id or run_dir.name
    writer = RunWriter(run_dir, run_id)
    writer.add_point(samples)
    writer.close()
    write_json(run_dir / "meta.json", {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "start_time": "2026-01-01T00:00:00",
        "instance": {"name": instance, "label": instance, **instance_fields},
        "system": {"hostname": "synthetic", "gpus": [{"name": "Synthetic GPU"}]},
        "tool": {"name": "xferbench", "version": "test"},
    })
    return run_dir


# --- many runs, fast: load()-like frames with known between-run noise ------------------------

# Under bw = peak * S / (S + 256KiB), SIZES split into latency-bound (time within 1.5x the
# shortest) and bandwidth-bound (at least half the peak) sizes, with none between.
LATENCY_SIZES, BANDWIDTH_SIZES = SIZES[:3], SIZES[3:]
VARIANTS = [
    dict(suite="copy", op="h2d", memory="pinned", backend="cuda", src="host", dst="cuda:0", peak=50.0),
    dict(suite="copy", op="d2h", memory="pinned", backend="cuda", src="cuda:0", dst="host", peak=52.0),
    dict(suite="collectives", op="all_reduce", memory="device", mode="default", backend="nccl", world_size=2,
         dtype="float32", api="torch", peak=300.0),
    dict(suite="collectives", op="all_gather", memory="device", mode="default", backend="nccl", world_size=2,
         dtype="float32", api="torch", peak=150.0),
]
_DEFAULTS = asdict(Sample(suite="", op="", size_bytes=0, verified=True))


def size_class(size: int) -> str:
    return "latency" if size in LATENCY_SIZES else "bandwidth"


def noisy_runs(rng: np.random.Generator, runs: int, noise: Callable[[dict, str], float], prefix: str = "run",
               trials: int = 3, trial_noise: float = 0.01, correlation: float = 0.5,
               slowdown: Callable[[dict, int], float] | None = None, instance: str = "test-box") -> pd.DataFrame:
    """A frame as load() returns it, of `runs` runs of VARIANTS over SIZES.

    Each run and point gets log-normal noise of sigma noise(variant, size class); `correlation`
    of its variance is shared by a variant's sizes of one class within a run (a run-wide
    disturbance), the rest is the point's own. Trials add `trial_noise` each. slowdown(variant, size)
    divides the bandwidth (1: unchanged).
    """
    rows = []
    for r in range(runs):
        for variant in VARIANTS:
            point = {k: v for k, v in variant.items() if k != "peak"}
            shared = {c: rng.standard_normal() for c in ("latency", "bandwidth")}
            for size in SIZES:
                cls = size_class(size)
                eps = noise(variant, cls) * (np.sqrt(correlation) * shared[cls]
                                             + np.sqrt(1 - correlation) * rng.standard_normal())
                bw = _bw(variant["peak"], size) * np.exp(eps) / (slowdown(variant, size) if slowdown else 1.0)
                for t, trial_bw in enumerate(bw * (1 + trial_noise * rng.standard_normal(trials))):
                    rows.append({**_DEFAULTS, **point, "size_bytes": size, "trial": t, "iters": 100,
                                 "time_s": size / (trial_bw * 1e9), "algbw_gbps": trial_bw, "busbw_gbps": trial_bw,
                                 "run_id": f"{prefix}{r}", "run_dir": f"/synthetic/{prefix}{r}", "instance": instance})
    return pd.DataFrame(rows)
