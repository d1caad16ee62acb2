"""Whole-machine traffic on GPUs (`pytest tests/gpu/test_whole_machine.py -s` prints the figures):
every GPU at once, SM copies, link latency and NUMA placement through the real command, small
sizes so the file runs in well under a minute."""
import math
import os
import subprocess

import pandas as pd
import pytest
import torch

from bench.results import load
from conftest import env, xferbench_cmd

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
multigpu = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more GPUs")
QUICK = ["sizes.min=4MiB", "sizes.max=64MiB", "launch=eager", "timing.trials=2"]   # whole-machine sizes 4, 64 MiB


def _ok(df: pd.DataFrame) -> None:
    bad = df[(df.status != "ok") | ~df.verified]
    assert bad.empty, bad[["op", "src", "dst", "engine", "status", "note"]].drop_duplicates().to_string()


def _median(df: pd.DataFrame, **where) -> float:
    for key, value in where.items():
        df = df[df[key] == value]
    assert len(df), f"no rows for {where}"
    return float(df.algbw_gbps.median())


@multigpu
def test_copies_with_every_gpu_at_once(xferbench):
    proc, runs = xferbench("suite=copy", *QUICK, "copy.memory=[pinned]", "copy.ops=[h2d,d2h,bidir,latency]")
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    _ok(df)
    n = torch.cuda.device_count()
    assert set(df.engine) == {"ce", "sm"} and set(df.numa) == {"local"}
    alone = df[(df.src == "host") & (df.world_size == 1)]
    assert alone.note.str.contains("host memory on NUMA node").all()   # each row says where its host memory is
    at_once = df[(df.dst == "all") | (df.src == "all")]  # h2d and bidir: host -> all; d2h: all -> host
    assert set(at_once.part) == {f"cuda:{i}" for i in range(n)} | {"total"} and set(at_once.world_size) == {n}
    big = 64 << 20
    for op in ("h2d", "d2h", "bidir"):
        for engine in ("ce", "sm"):
            rows = at_once[(at_once.op == op) & (at_once.engine == engine) & (at_once.size_bytes == big)]
            for _, trial in rows.groupby("trial"):
                parts = trial.set_index("part").algbw_gbps
                # the total is every GPU's bytes over the longest span: no more than the parts' sum
                assert parts["total"] <= parts.drop("total").sum() * 1.0001
            gpu_end = "src" if op == "d2h" else "dst"
            solo = range(n) if engine == "ce" else [0]   # SM copies run alone on the first GPU only
            alone = max(_median(df, op=op, engine=engine, size_bytes=big, world_size=1, **{gpu_end: f"cuda:{i}"})
                        for i in solo)
            total = _median(rows, part="total")
            print(f"\n{op} {engine} 64 MiB: best GPU alone {alone:.1f} GB/s, all {n} at once {total:.1f} GB/s")
            if op == "h2d":
                # The lent machines give each GPU its own PCIe link: GPUs that ran one after the other
                # (a latch that did not hold, a shared stream) would total no more than one alone.
                assert total > 1.3 * alone, "the GPUs did not copy at the same time"
    lat = df[df.op == "latency"]
    assert set(lat.dst) == {f"cuda:{i}" for i in range(n)} and lat.algbw_gbps.isna().all()
    ns = lat.groupby("dst").time_s.median() * 1e9
    print("host load latency, ns:", ns.round(0).to_dict())
    assert ns.between(200, 20_000).all()   # PCIe round trips: about a microsecond, never a cached 10s of ns
    assert "every GPU at once" in proc.stdout and "link latency" in proc.stdout


@multigpu
def test_peer_traffic_sm_and_latency(xferbench):
    proc, runs = xferbench("suite=p2p", *QUICK, "p2p.pairs=ring", "p2p.modes=[peer]")
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    _ok(df)
    n, big = torch.cuda.device_count(), 64 << 20
    ce = _median(df, op="uni", engine="ce", size_bytes=big, part="total")
    sm = _median(df, op="uni", engine="sm", size_bytes=big, part="total")
    print(f"\npeer write 64 MiB: ce {ce:.0f} GB/s, sm {sm:.0f} GB/s")
    assert sm > 0.5 * ce
    for op, one in (("all_to_one", "dst"), ("one_to_all", "src")):
        rows = df[df.op == op]
        assert set(rows[one]) == {f"cuda:{i}" for i in range(n)} and set(rows.engine) == {"ce", "sm"}
        assert set(rows.part) == {f"cuda:{i}" for i in range(n)} | {"total"}
    ns = df[df.op == "latency"].groupby(["src", "dst"]).time_s.median() * 1e9
    print("peer load latency, ns:", ns.round(0).to_dict())
    assert ns.between(200, 20_000).all() and df[df.op == "latency"].algbw_gbps.isna().all()
    assert "p2p uni peer sm" in proc.stdout


def test_one_gpu_says_what_it_skips(tmp_path):
    # One visible GPU: 'all' and, on a one-node machine, numa=remote are said once and left out.
    cmd = xferbench_cmd(tmp_path / "results", "suite=copy", "sizes.min=1MiB", "sizes.max=1MiB", "launch=eager",
                        "timing.trials=1", "copy.ops=[h2d]", "copy.memory=[pinned]", "copy.engine=[ce]",
                        "copy.numa=[local,remote]")
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**env(), "CUDA_VISIBLE_DEVICES": first})
    assert proc.returncode == 0, proc.stderr
    assert "xferbench: copy: copy.gpus=all skipped: needs 2 or more GPUs, found 1" in proc.stderr
    df = load(sorted(p.parent for p in (tmp_path / "results").rglob("meta.json")))
    _ok(df)
    one_node = "xferbench: copy: one NUMA node" in proc.stderr
    assert ("copy.numa=remote skipped: one NUMA node" in proc.stderr) == one_node
    assert set(df.numa) == ({"local"} if one_node else {"local", "remote"})
    assert not math.isnan(df.algbw_gbps.iloc[0])
