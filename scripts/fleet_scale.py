#!/usr/bin/env python3
"""Measure xferbench-doctor --fleet at scale: fleets of N synthetic nodes (scripts/make_fleet.py,
2% of them bad), judged three ways, each timed (wall clock, and the CPU time of its processes) with the peak memory of the doctor's
process tree (the sum of its processes' resident sets, sampled every 20 ms: an upper bound, as
forked workers share pages), and scored against the fleet's truth:

- kept: the runs' own levels.parquet, as runs of this version keep them when they end;
- cold: without them (as runs of older versions, or imports): every run's rows read and reduced,
  in a pool of one process per core, into an empty cache;
- cached: the same again, from that cache.

Fleets larger than --cold-up-to are judged from their kept levels only.

Scored: the bad nodes named wrong with the right place first (the GPU of a halved h2d link, the
pair of a slow peer link, NCCL for the transport, the host side for the slow host), and the
healthy nodes named wrong.

    python scripts/fleet_scale.py --nodes 100 1000 --work /tmp/fleet-scale
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = {"h2d": "gpu", "p2p": "link", "transport": "nccl", "slow host": "host side", "moved": "gpu"}


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        grew, tree = bool(more), tree | more
    total = 0
    for p in tree:
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024
        except (OSError, StopIteration):
            pass
    return total


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def doctor(fleet: Path, cache: str, out: Path) -> tuple[float, float, int, int]:
    """(seconds, CPU seconds of its processes, peak bytes, exit code) of one judgment, its JSON
    written to out. CPU seconds over the cores tell what an idle machine's wall clock would be."""
    env = dict(os.environ, XFERBENCH_CACHE=cache, PYTHONPATH=str(ROOT))
    cpu, started = _cpu(), time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bench.cli.doctor", "--fleet", str(fleet), "--json", str(out)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.02)
    seconds, cpu = time.perf_counter() - started, _cpu() - cpu
    if proc.returncode not in (0, 1, 3):
        sys.exit(f"fleet_scale: the doctor failed ({proc.returncode}): {proc.stderr.read()}")
    return seconds, cpu, peak, proc.returncode


def score(verdict: dict, truth: dict) -> tuple[int, int, int, int]:
    """(bad nodes named at the right place, bad nodes, healthy nodes named, healthy nodes)."""
    nodes = {n["hostname"]: n for n in verdict["nodes"]}
    right = 0
    for name, fault in truth.items():
        node = nodes[name]
        first = node["where"][0] if node["where"] else {}
        place_ok = first.get("kind") == EXPECTED[fault["fault"]] and (
            not fault["gpus"] or first.get("gpus") == fault["gpus"])
        right += node["state"] == "wrong" and place_ok and (fault["fault"] != "moved" or bool(node["moved"]))
    healthy = [n for name, n in nodes.items() if name not in truth]
    return right, len(truth), sum(n["state"] == "wrong" for n in healthy), len(healthy)


def _aside(fleet: Path, back: bool) -> None:
    """The runs' kept levels moved aside (or back), for the cold judgment."""
    for path in fleet.rglob(".levels.parquet.aside" if back else "levels.parquet"):
        path.rename(path.with_name("levels.parquet" if back else ".levels.parquet.aside"))


def measure(n: int, work: Path, cold: bool) -> list[str]:
    fleet = work / f"fleet-{n}"
    if not fleet.exists():
        subprocess.run([sys.executable, str(ROOT / "scripts/make_fleet.py"), str(fleet), "--nodes", str(n),
                        "--bad", "0.02"], check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    truth = json.loads((fleet / "truth.json").read_text())
    rows = []
    with tempfile.TemporaryDirectory(dir=work) as cache:
        for label in ("kept", "cold", "cached") if cold else ("kept",):
            if label == "cold":
                _aside(fleet, back=False)
            out = work / f"fleet-{n}-{label}.json"
            seconds, cpu, peak, code = doctor(fleet, "off" if label == "kept" else cache, out)
            right, bad, named, healthy = score(json.loads(out.read_text()), truth)
            rows.append(f"| {n:,} | {label} | {seconds:.1f} s | {cpu:.1f} s | {peak / 2**30:.2f} GiB | {right} of {bad} | "
                        f"{named} of {healthy} | {code} |")
            print(rows[-1], flush=True)
        _aside(fleet, back=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--cold-up-to", type=int, default=1000, metavar="N",
                        help="larger fleets are judged from their kept levels only (cold: N's time per run)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "fleet-scale",
                        help="where the fleets are made (kept for another call) and the verdicts written")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    print("| nodes | levels | time | CPU time | peak memory | bad nodes named, right place | healthy nodes named | exit |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in args.nodes:
        measure(n, args.work, n <= args.cold_up_to)
    return 0


if __name__ == "__main__":
    sys.exit(main())
