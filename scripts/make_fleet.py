#!/usr/bin/env python3
"""Make a fleet of N synthetic 4x H200 nodes from the committed runs, a few of them with a fault,
to judge with `xferbench-doctor --fleet` (docs/judging.md, "A fleet"; scripts/fleet_scale.py
measures it at scale).

    python scripts/make_fleet.py OUT --nodes 1000 --bad 0.02 [--seed 1] [--second 0.05] [--moved 0]

Healthy nodes: each the rows of one of the committed healthy default sweeps of 4x H200 hosts made
by this schema and the newest method among them (results/reference/h200-x4: complete, copy, p2p
and collectives; one method, so that no noise between two methods' figures passes for a node's
own), every point's trials moved so that its level is those runs' median level plus one draw of
the between-run noise measured between them (per point: the median |difference| of their levels,
as a sigma): no two nodes alike, and no one run's mood copied onto a sixth of the fleet.
Bad nodes get one fault each, the four in turn:
- h2d: one GPU's host->device copies at half its link's rate (each copy's time plus its size over
  that GPU's peak pinned rate), its telemetry recording the link at x8 while busy;
- p2p: one pair's peer copies at a third of their rate (plus twice their size over the variant's
  peak rate), nothing recorded;
- transport: collectives as much slower as the committed NCCL_P2P_DISABLE=1 run of host A was
  against that host's healthy run (per op, launch and size, two ranks' factors on four), the
  variable in its environment and that run's NCCL logs beside;
- slow host: every copy to or from host memory (and staged peer copy) of 1 MiB or more as much
  slower as the committed slow host was against hosts A and C at that point.
--second: that share of the nodes gets a second run (fresh noise, the same fault); --moved: that
many more healthy nodes whose second run has the h2d fault. Each node's runs land in
OUT/nodeNNNNN/h200-x4/<run_id>/ (as `xferbench out_dir=OUT/$(hostname)` lays them out), with its own
host_id and GPU UUIDs in meta.json and its levels.parquet as a run keeps it when it ends (not with
--no-levels, as runs of older versions); OUT/truth.json names each bad node's fault and GPUs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis.compare import point_levels  # noqa: E402
from bench.analysis.fleet_levels import keep  # noqa: E402
from bench.analysis.noise import run_noise  # noqa: E402
from bench.cli.common import catalog  # noqa: E402
from bench.methods import generation_order  # noqa: E402
from bench.points import POINT_KEYS  # noqa: E402
from bench.results import COLUMNS, SCHEMA_VERSION, arrow_schema, find_runs, load, read_meta, run_samples  # noqa: E402

H200X4 = ROOT / "results/reference/h200-x4"
FAULTS = ROOT / "results/faults/h200-x4"
P2P_OFF, HOST_A = FAULTS / "20261126-051936-p2p-off", ROOT / "results/reference/h200-x4/20261126-052446-scaling"
SLOW_HOST = FAULTS / "20261126-053304-slow-host"
HOSTS_A_C = ["results/reference/h200-x4/20261126-052446-default-1", "results/noise/h200-x4/held-out/20261126-052446-default-2",
             "results/reference/h200-x4/20261126-055113-default-4", "results/noise/h200-x4/held-out/20261126-055113-default-5"]
KINDS = ("h2d", "p2p", "transport", "slow host")
HOST_SIDE_FROM = 1 << 20   # the slow host's copies: from this size (smaller ones are the host's launch, not its link)
MIB = 1 << 20


def _levels(runs: list[Path]) -> pd.DataFrame:
    rows = pd.concat([run_samples(r).assign(run_dir=str(r)) for r in runs], ignore_index=True)
    return point_levels(rows, catalog()).set_index(POINT_KEYS)


class Base:
    """One committed healthy run: its rows, meta, and each row's point."""

    def __init__(self, run: Path) -> None:
        self.run, self.meta = run, read_meta(run)
        self.rows = run_samples(run)
        self.point = self.rows.groupby(POINT_KEYS, sort=False).ngroup().to_numpy()
        first = np.unique(self.point, return_index=True)[1]
        self.keys = [tuple(k) for k in self.rows.iloc[first][POINT_KEYS].itertuples(index=False, name=None)]
        ok = (self.rows["status"] == "ok") & (self.rows["part"] == "total")
        self.time = self.rows["time_s"].where(ok).groupby(self.point).median().reindex(range(len(self.keys))).to_numpy()
        self.size = np.array([k[POINT_KEYS.index("size_bytes")] for k in self.keys], dtype=float)

    def key(self, name: str) -> np.ndarray:
        return np.array([k[POINT_KEYS.index(name)] for k in self.keys], dtype=object)


def bases() -> list[Base]:
    metas = {run: read_meta(run) for run in find_runs([H200X4])}
    places = {run: generation_order((meta.get("tool") or {}).get("method"))
              for run, meta in metas.items() if _healthy_sweep(meta)}
    newest = max(places.values())
    return [Base(run) for run, place in places.items() if place == newest]


def _healthy_sweep(meta: dict) -> bool:
    suites = (meta.get("config") or {}).get("suites") or []
    return (meta.get("schema_version") == SCHEMA_VERSION and meta.get("status") == "complete"
            and sorted(suites) == ["collectives", "copy", "p2p"])


def centred(runs: list[Base]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per base, per point: the multiplier of its times that brings the point to the bases' median
    level, and the between-run sigma measured between the bases (a floor of 0.002)."""
    levels = _levels([b.run for b in runs])
    centre = levels["y"].to_dict()
    sigma = {k: max(run_noise(p), 0.002) if len(p) else 0.01 for k, p in zip(levels.index, levels["pairs"])}
    out = {}
    for b in runs:
        own = _levels([b.run])["y"].to_dict()
        shift = np.array([math.exp(own[k] - centre[k]) if k in own and k in centre else 1.0 for k in b.keys])
        out[id(b)] = (shift, np.array([sigma.get(k, 0.01) for k in b.keys]))
    return out


def _peak_multiplier(base: Base, mask: np.ndarray, extra: float, by: list[str]) -> np.ndarray:
    """Per point: time' / time where each masked point's copy takes `extra` x its size over the peak
    rate of its group (points alike in `by`) longer."""
    out = np.ones(len(base.keys))
    rate = base.size / base.time
    groups = pd.Series(range(len(base.keys)))[mask].groupby([base.key(k)[mask] for k in by])
    for _, members in groups:
        idx = members.to_numpy()
        peak = np.nanmax(rate[idx])
        out[idx] = 1 + extra * base.size[idx] / (peak * base.time[idx])
    return np.nan_to_num(out, nan=1.0)


def h2d_fault(base: Base, gpu: int) -> np.ndarray:
    mask = (base.key("op") == "h2d") & (base.key("src") == "host") & (base.key("dst") == f"cuda:{gpu}")
    out = np.ones(len(base.keys))
    pinned = mask & (base.key("memory") == "pinned")
    peak = np.nanmax(base.size[pinned] / base.time[pinned])
    out[mask] = 1 + base.size[mask] / (peak * base.time[mask])   # the link's rate halved: its time added again
    return np.nan_to_num(out, nan=1.0)


def p2p_fault(base: Base, pair: tuple[int, int]) -> np.ndarray:
    ends = {f"cuda:{g}" for g in pair}
    mask = ((base.key("suite") == "p2p") & (base.key("mode") == "peer") & (base.key("op") != "latency")
            & np.array([{s, d} == ends for s, d in zip(base.key("src"), base.key("dst"))]))
    return _peak_multiplier(base, mask, 2.0, ["op", "engine", "launch", "src", "dst"])


def _factor_table(slow: list[Path], healthy: list[Path]) -> pd.Series:
    """Per point: how many times longer the slow runs took than the healthy ones (median over each)."""
    a, b = _levels(slow), _levels(healthy)
    joined = a[["y"]].merge(b[["y"]], left_index=True, right_index=True, suffixes=("", "_h"))
    return np.exp(joined["y_h"] - joined["y"])


def transport_factors() -> pd.DataFrame:
    f = _factor_table([P2P_OFF], [HOST_A]).reset_index()
    return f[["op", "launch", "size_bytes", 0]].rename(columns={0: "factor"})


def transport_fault(base: Base, table: pd.DataFrame) -> np.ndarray:
    out = np.ones(len(base.keys))
    for i, (suite, op, launch, size) in enumerate(zip(base.key("suite"), base.key("op"), base.key("launch"), base.size)):
        if suite != "collectives":
            continue
        same = table[(table["op"] == op) & (table["launch"] == launch)].sort_values("size_bytes")
        if len(same):   # read on a log-size line, as the expectation table is
            out[i] = max(1.0, float(np.interp(math.log(size), np.log(same["size_bytes"]), same["factor"])))
    return out


def slow_host_factors() -> dict[tuple, float]:
    return {tuple(k): float(v) for k, v in _factor_table([SLOW_HOST], [ROOT / r for r in HOSTS_A_C]).items()}


def slow_host_fault(base: Base, table: dict[tuple, float]) -> np.ndarray:
    host_side = ((np.isin(base.key("src"), ["host"]) | np.isin(base.key("dst"), ["host"]) | (base.key("mode") == "staged"))
                 & (base.key("op") != "h2h") & (base.size >= HOST_SIDE_FROM))
    return np.array([max(1.0, table.get(k, 1.0)) if h else 1.0 for k, h in zip(base.keys, host_side)])


class Faults:
    """Each fault's per-point multipliers of a base's times, made once per base and place."""

    def __init__(self) -> None:
        self.transport, self.slow = transport_factors(), slow_host_factors()
        self.made: dict[tuple, np.ndarray] = {}

    def of(self, base: Base, kind: str, gpus: tuple[int, ...]) -> np.ndarray:
        key = (id(base), kind, gpus)
        if key not in self.made:
            self.made[key] = {"h2d": lambda: h2d_fault(base, gpus[0]), "p2p": lambda: p2p_fault(base, gpus),
                              "transport": lambda: transport_fault(base, self.transport),
                              "slow host": lambda: slow_host_fault(base, self.slow)}[kind]()
        return self.made[key]


def node_meta(base: Base, name: str, run_id: str, kind: str, gpus: tuple[int, ...]) -> dict:
    """The base's meta.json as this node's: its own hostname, host_id and GPU UUIDs, and what its
    fault leaves in its record."""
    meta = json.loads(json.dumps(base.meta))
    meta["run_id"] = run_id
    meta.setdefault("config", {})["run_id"] = run_id
    system = meta["system"]
    system["hostname"], system["host_id"] = name, hashlib.sha256(name.encode()).hexdigest()[:12]
    telemetry = (meta.get("telemetry") or {}).get("gpus") or []
    for i, gpu in enumerate(system.get("gpus") or []):
        gpu["uuid"] = f"GPU-{hashlib.sha256(f'{name}/{i}'.encode()).hexdigest()[:32]}"
        for seen in telemetry:
            if seen.get("index") == i:
                seen["uuid"] = gpu["uuid"]
                if kind == "h2d" and i == gpus[0] and seen.get("pcie"):
                    seen["pcie"]["width_min_busy"] = 8
    if kind == "transport":
        system.setdefault("env", {})["NCCL_P2P_DISABLE"] = "1"
    return meta


def write_run(folder: Path, base: Base, meta: dict, multiplier: np.ndarray, sigma: np.ndarray,
              rng: np.random.Generator, kind: str, levels: bool) -> None:
    """One node's run: the base's rows, each point's times by its multiplier and one draw of noise."""
    per_point = multiplier * np.exp(-rng.normal(0.0, sigma))
    factor = per_point[base.point]
    rows = base.rows.copy()
    for column in ("time_s", "time_fastest_rank_s"):
        rows[column] = rows[column] * factor
    for column in ("algbw_gbps", "busbw_gbps"):
        rows[column] = rows[column] / factor
    rows["run_id"] = meta["run_id"]
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(rows[COLUMNS], schema=arrow_schema(), preserve_index=False),
                   folder / "samples.parquet")
    if kind == "transport":
        shutil.copytree(P2P_OFF / "ranks", folder / "ranks")
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    if levels:   # as a run of this version keeps them when it ends
        keep(folder, load(folder, warn=lambda line: None), catalog())


def _run_id(day: int, i: int) -> str:
    return f"202612{day:02d}-{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}"


def make(out: Path, nodes: int, bad: float, seed: int, second: float, moved: int, levels: bool = True) -> dict:
    """The fleet under out; returns the truth: each bad node's fault and GPUs."""
    rng = np.random.default_rng(seed)
    runs = bases()
    shifts = centred(runs)
    faults = Faults()
    bad_nodes = set(rng.choice(nodes, size=round(nodes * bad), replace=False).tolist())
    truth, turn = {}, 0
    for i in range(nodes + moved):
        name, base = f"node{i:05d}", runs[int(rng.integers(len(runs)))]
        kind, gpus = "", ()
        if i in bad_nodes or i >= nodes:
            kind = KINDS[turn % len(KINDS)] if i < nodes else "h2d"
            turn += i < nodes
            gpus = ((int(rng.integers(4)),) if kind == "h2d" else
                    tuple(sorted(int(g) for g in rng.choice(4, 2, replace=False))) if kind == "p2p" else ())
            truth[name] = {"fault": kind if i < nodes else "moved", "gpus": list(gpus)}
        twice = i >= nodes or rng.random() < second
        for day in (1, 2)[:1 + twice]:
            this = "" if i >= nodes and day == 1 else kind
            shift, sigma = shifts[id(base)]
            mult = shift * (faults.of(base, this, gpus) if this else 1.0)
            run_id = _run_id(day, i)
            write_run(out / name / "h200-x4" / run_id, base, node_meta(base, name, run_id, this, gpus), mult,
                      sigma, rng, this, levels)
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
    return truth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the fleet's folder (made; must not exist)")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--bad", type=float, default=0.02, help="the share of nodes with a fault")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--second", type=float, default=0.05, help="the share of nodes with a second run")
    parser.add_argument("--moved", type=int, default=0, help="healthy nodes more whose second run has a fault")
    parser.add_argument("--no-levels", action="store_true",
                        help="runs without their levels.parquet, as runs of older versions are")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"make_fleet: {args.out} exists; name a new folder", file=sys.stderr)
        return 2
    if args.nodes < 1 or not 0 <= args.bad <= 1 or not 0 <= args.second <= 1 or args.moved < 0:
        print("make_fleet: --nodes at least 1, --bad and --second shares in [0, 1], --moved 0 or more", file=sys.stderr)
        return 2
    truth = make(args.out, args.nodes, args.bad, args.seed, args.second, args.moved, not args.no_levels)
    print(f"{args.out}: {args.nodes + args.moved} nodes, {len(truth)} bad ({', '.join(sorted({t['fault'] for t in truth.values()}))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
