"""One name per variant: bench/points.py declares a point's identity and labels it, and the
progress bar, the summary's peaks, the report, the gate and the doctor all name a variant so."""
from __future__ import annotations

import ast
import dataclasses
import re

from bench.analysis.compare import compare
from bench.analysis.figures.peaks import peak_table
from bench.analysis.judge import judge
from bench.analysis.report import variants
from bench.analysis.runs import with_series
from bench.contract import Point
from bench.cli.common import catalog
from bench.driver import reference_times
from bench.points import POINT_KEYS, VARIANT_KEYS, PointKey, point_label, variant_label
from bench.results import COLUMNS, Sample, load, read_meta
from conftest import ROOT

RUN = ROOT / "results" / "reference" / "h200-x2" / "20261123-044635"   # torch and raw NCCL, ce and sm, eager and graph
SUITES = catalog()
TORCH = dict(suite="collectives", op="all_reduce", memory="device", mode="default", backend="nccl", src="", dst="",
             world_size=4, nnodes=1, dtype="float32", launch="eager", api="torch", engine="", numa="", params="")


def test_the_point_and_the_sample_hold_the_declared_keys():
    assert issubclass(Point, PointKey) and issubclass(Sample, PointKey)
    assert {f.name for f in dataclasses.fields(Point)} == set(POINT_KEYS)
    assert set(POINT_KEYS) <= set(COLUMNS)
    assert set(reference_times.KEYS) == set(POINT_KEYS) - {"params"}


def test_no_module_lists_the_points_keys_by_hand():
    # an identity (more than a third of a point's keys) is points.py's or derived from it; a suite's
    # own tables choose their columns (bench/suites/ is theirs)
    keys = set(POINT_KEYS)
    by_hand = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        if path.name == "points.py" and path.parent.name == "bench" or "suites" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                named = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in keys]
                if len(named) > len(keys) // 3:
                    by_hand.append(f"{path.relative_to(ROOT)}:{node.lineno}: {named}")
    assert not by_hand, by_hand


def test_api_launch_and_engine_are_named():
    assert variant_label(TORCH) == "collectives all_reduce device torch.distributed eager float32 n=4"
    assert variant_label({**TORCH, "api": "nccl"}) == "collectives all_reduce device nccl eager float32 n=4"
    assert variant_label({**TORCH, "backend": "gloo", "launch": "graph"}) == \
        "collectives all_reduce device torch.distributed gloo graph float32 n=4"
    copy = dict(suite="copy", op="h2d", memory="pinned", mode="", backend="cuda", src="host", dst="cuda:0",
                world_size=1, nnodes=1, dtype="uint8", launch="eager", api="", engine="ce", numa="local", params="")
    assert variant_label(copy) == "copy h2d pinned eager ce numa=local host->cuda:0"
    assert point_label({**copy, "size_bytes": 64 << 20}) == "copy h2d pinned eager ce numa=local host->cuda:0 64MiB"
    point = Point("copy", "h2d", 64 << 20, memory="pinned", backend="cuda", src="host", dst="cuda:0", engine="ce",
                  numa="local")
    assert point.label() == point_label({**copy, "size_bytes": 64 << 20})


def test_the_same_variant_gets_the_same_label_everywhere():
    frame = load([RUN])
    gate = compare(frame, frame, SUITES)
    assert gate.families
    for f in gate.families:
        assert f.label == variant_label(f.variant)
    for p in gate.points:
        assert p.label == point_label(p.key)
    # distinct variants, distinct names (a copy on each GPU alone included)
    by_class = {}
    for f in gate.families:
        assert by_class.setdefault((f.label, f.size_class), f.variant) == f.variant
    gate_labels = {f.label for f in gate.families}

    doctor = judge(frame, read_meta(RUN), SUITES, run_dir=RUN)
    assert doctor.verdicts
    for v in doctor.verdicts:
        assert v.family.startswith(variant_label(v.key) + " (") and v.family.endswith(")")
    assert gate_labels & {variant_label(v.key) for v in doctor.verdicts}
    # torch.distributed and raw NCCL each named for what they are, in the gate and the doctor alike
    for labels in (gate_labels, {variant_label(v.key) for v in doctor.verdicts}):
        collectives = {lab for lab in labels if lab.startswith("collectives all_reduce")}
        assert any(" torch.distributed " in lab for lab in collectives)
        assert any(re.match(r"collectives all_reduce (device )?nccl (eager|graph)", lab) for lab in collectives)
        assert not any("nccl nccl" in lab or " default " in lab for lab in collectives)
        assert all(" eager" in lab or " graph" in lab for lab in labels)
        assert all(" ce" in lab or " sm" in lab for lab in labels if lab.startswith(("copy", "p2p")))

    # the peaks (their variants are a family's over its GPUs and pairs): the same words
    peaks = peak_table(with_series(frame), SUITES)
    assert len(peaks)
    for _, row in peaks.iterrows():
        family = next(f for f in gate.families if all(str(f.variant[k]) == str(row[k]) for k in VARIANT_KEYS
                                                        if k in row.index and k not in ("src", "dst", "params")))
        ends = f" {family.variant['src']}->{family.variant['dst']}" if family.variant["src"] else ""
        assert family.label.replace(ends, "") == row["label"]

    # the report names a curve by the label's words for what varies
    rows = frame[(frame["suite"] == "collectives") & (frame["op"] == "all_reduce") & (frame["status"] == "ok")]
    names = {name for name, _ in variants(rows)}
    assert {"torch.distributed", "nccl"} <= {w for name in names for w in name.split()}
    for name, curve in variants(rows):
        label = variant_label(curve.iloc[0])
        assert all(word in label.split() for word in name.split())
