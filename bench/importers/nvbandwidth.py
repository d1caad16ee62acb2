"""nvbandwidth's JSON output as a run of the copy and p2p suites.

Every single-node testcase of v0.8 is read (and the older layouts back to v0.5). Host copies
and latency become suite 'copy' (pinned host memory; numa 'local', as nvbandwidth binds each host
buffer to its GPU's node unless run with -d), GPU-to-GPU ones suite 'p2p'. engine says who moves
the data ('ce' copy engine, 'sm' a copy kernel); mode, for peer tests, the side that drives the
copy ('read' or 'write'). Rows are named by where the data goes: write tests copy row -> column,
read tests column -> row (the row GPU reads from its peer). A bidirectional peer test reports both
directions and their total: parts 'fwd' (src -> dst), 'rev' and 'total'. Host bidirectional
tests report one direction while the other runs; a pair becomes parts 'h2d' and 'd2h' and their
sum 'total'. Whole-machine tests (host_to_all, all_to_host, all_to_one, one_to_all) report a
figure per GPU, each measured while every GPU moves data: parts 'cuda:i' and their sum 'total',
src or dst 'all', world_size the GPU count; all_to_one/one_to_all are named by where the data
goes (all_to_one_read: the peers read from the one GPU, so it is op 'one_to_all'). Latency tests
become op 'latency' with time_s the time of one read and no bandwidth. The JSON does not record
the buffer size (default 512 MiB since v0.5, 64 MiB before), so it is an argument, nor whether the
copies were checked (they are unless -s), so rows say verified=False, "not checked (imported)".
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Iterable

from bench.importers.run_folder import Imported, read_text, write_import
from bench.results import ResultsError, Sample

NVB_NOTE = "not checked (imported)"
NVB_LATENCY_BYTES = 2 << 20   # the latency tests chase pointers through a fixed 2 MiB buffer (-b is ignored)
_NVB_DEVICE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*\(([0-9A-Fa-f:.]+)\)(?::\s*\((.*)\))?\s*$")
_NVB_HOST_BIDIR = re.compile(r"(?:host_to_device|device_to_host|host_to_all|all_to_host)"
                             r"_bidirectional_memcpy_(?:ce|sm)")
_NVB_SPLIT_WARP = ("the SM test runs one kernel whose warps copy both ways; "
                   "each direction is reported as half its bandwidth")


@dataclass(frozen=True)
class _NvbRun:
    """What every row of one import shares."""

    buffer_bytes: int
    numa: str   # where nvbandwidth's host buffers were: 'local' unless it ran with -d


def _matrix(testcase: dict) -> list[list[float | None]]:
    rows = testcase.get("bandwidth_matrix") or []
    return [[None if v in ("N/A", "", None) else float(v) for v in row] for row in rows]


def _cells(matrix: list[list[float | None]]) -> Iterable[tuple[int, int, float]]:
    return ((i, j, v) for i, row in enumerate(matrix) for j, v in enumerate(row) if v is not None)


def _gpu(i: int) -> str:
    return f"cuda:{i}"


def _note(name: str, what: str = "") -> str:
    return "; ".join(filter(None, (NVB_NOTE, f"nvbandwidth {name}", what)))


def _nvb_sample(name: str, run: _NvbRun, bw: float, copies: int = 1, what: str = "", **fields) -> Sample:
    # nvbandwidth reports bandwidth only; time is what it implies for the `copies` buffers the row moves.
    time_s = copies * run.buffer_bytes / (bw * 1e9) if bw > 0 else math.nan
    return Sample(size_bytes=run.buffer_bytes, time_s=time_s, trial=0,
                  algbw_gbps=bw, busbw_gbps=bw, backend="cuda", verified=False, note=_note(name, what), **fields)


def _host_copies(name: str, m: re.Match, matrix: list, run: _NvbRun) -> list[Sample]:
    kind, engine = m.groups()
    out = []
    for _, j, bw in _cells(matrix):
        op, src, dst = ("h2d", "host", _gpu(j)) if kind == "host_to_device" else ("d2h", _gpu(j), "host")
        out.append(_nvb_sample(name, run, bw, suite="copy", op=op, memory="pinned", engine=engine, numa=run.numa,
                               src=src, dst=dst))
    return out


def _local_copies(name: str, m: re.Match, matrix: list, run: _NvbRun) -> list[Sample]:
    return [_nvb_sample(name, run, bw, suite="copy", op="d2d", memory="device", engine="ce", src=_gpu(j), dst=_gpu(j))
            for _, j, bw in _cells(matrix)]


def _peer_copies(name: str, m: re.Match, matrix: list, run: _NvbRun) -> list[Sample]:
    bidir, side, engine = bool(m.group(1)), m.group(2), m.group(3)
    n = len(matrix[0])
    blocks = [matrix[k:k + n] for k in range(0, len(matrix), n)]
    if not bidir:
        parts = [("total", blocks[0])]
    elif len(blocks) == 3:   # since v0.6: the copy j -> i, the copy i -> j, their sum
        parts = list(zip(("rev", "fwd", "total"), blocks))
    elif len(blocks) == 1 and engine == "sm":   # before v0.6 SM bidirectional reported the sum only
        parts = [("total", blocks[0])]
    else:
        raise ValueError(f"{len(blocks)} matrices where 3 (directions and total) were expected")
    out = []
    for part, block in parts:
        for i, j, bw in _cells(block):
            if i == j:
                continue
            # write: row i copies to column j; read: row i reads column j (data j -> i)
            src, dst = (j, i) if side == "read" and not bidir else (i, j)
            out.append(_nvb_sample(name, run, bw, 2 if part == "total" and bidir else 1, suite="p2p",
                                   op="bidir" if bidir else "uni", part=part, memory="device", mode=side,
                                   engine=engine, src=_gpu(src), dst=_gpu(dst)))
    return out


def _concurrent(name: str, run: _NvbRun, per_gpu: list[float | None], copies: int, what: str, **fields) -> list[Sample]:
    """Whole-machine traffic: part 'cuda:i' per GPU (each moving `copies` buffers) and their sum, part 'total'."""
    values = {j: bw for j, bw in enumerate(per_gpu) if bw is not None}
    fields = {"world_size": len(per_gpu), **fields}
    out = [_nvb_sample(name, run, bw, copies, what, part=_gpu(j), **fields) for j, bw in values.items()]
    if values:
        out.append(_nvb_sample(name, run, sum(values.values()), copies * len(values), what, **fields))
    return out


def _host_concurrent(name: str, m: re.Match, matrix: list, run: _NvbRun) -> list[Sample]:
    kind, engine = m.groups()
    op, src, dst = ("h2d", "host", "all") if kind == "host_to_all" else ("d2h", "all", "host")
    return _concurrent(name, run, matrix[0], 1, "each GPU measured while every GPU copies; total: their sum",
                       suite="copy", op=op, memory="pinned", engine=engine, numa=run.numa, src=src, dst=dst)


def _peer_concurrent(name: str, m: re.Match, matrix: list, run: _NvbRun) -> list[Sample]:
    # Named by where the data goes: in all_to_one_read the peers read from the one GPU, so its
    # traffic flows out (one_to_all); in one_to_all_read the one GPU reads from every peer.
    pattern, side, engine = m.groups()
    op = "all_to_one" if (pattern == "all_to_one") == (side == "write") else "one_to_all"
    where = "into" if op == "all_to_one" else "out of"
    return _concurrent(name, run, matrix[0], len(matrix[0]) - 1,
                       f"cuda:i: all peers' traffic {where} cuda:i at once; total: the GPUs' figures summed",
                       suite="p2p", op=op, memory="device", mode=side, engine=engine, src="all", dst="all")


def _latency(name: str, m: re.Match, matrix: list, run: _NvbRun) -> list[Sample]:
    what = "time_s: one dependent read (pointer chase) by the dst GPU's SMs of memory on src; no bandwidth"
    same = dict(op="latency", size_bytes=NVB_LATENCY_BYTES, trial=0, engine="sm", backend="cuda", verified=False,
                note=_note(name, what))
    if m.group(1) == "host_device":   # column GPU j reads host memory
        return [Sample(suite="copy", time_s=ns * 1e-9, memory="pinned", numa=run.numa, src="host", dst=_gpu(j), **same)
                for _, j, ns in _cells(matrix)]
    # row GPU i reads the memory of column GPU j
    return [Sample(suite="p2p", time_s=ns * 1e-9, memory="device", mode="read", src=_gpu(j), dst=_gpu(i), **same)
            for i, j, ns in _cells(matrix) if i != j]


# Every single-node testcase of nvbandwidth v0.8 (its testcase.h) but the host bidirectional
# ones, which _host_bidir() reads in pairs.
_NVB_TESTS = [
    (re.compile(r"(host_to_device|device_to_host)_memcpy_(ce|sm)"), _host_copies),
    (re.compile(r"device_local_copy"), _local_copies),
    (re.compile(r"device_to_device(_bidirectional)?_memcpy_(read|write)_(ce|sm)"), _peer_copies),
    (re.compile(r"(host_to_all|all_to_host)_memcpy_(ce|sm)"), _host_concurrent),
    (re.compile(r"(all_to_one|one_to_all)_(read|write)_(ce|sm)"), _peer_concurrent),
    (re.compile(r"(host_device|device_to_device)_latency_sm"), _latency),
]


def _host_bidir(halves: dict[str, list], run: _NvbRun) -> list[Sample]:
    """Host bidirectional tests measure one direction while the other runs: each pair of tests is one point.

    Per GPU (host_to_device_/device_to_host_bidirectional): parts 'h2d', 'd2h' and, with both, 'total'.
    All GPUs at once (host_to_all_/all_to_host_bidirectional): parts 'h2d' and 'd2h' (summed over
    GPUs) and, with both, 'cuda:i' (the GPU's two directions) and 'total'.
    """
    out = []
    for scope, engine in product(("device", "all"), ("ce", "sm")):
        names = {"h2d": f"host_to_{scope}_bidirectional_memcpy_{engine}",
                 "d2h": f"{scope}_to_host_bidirectional_memcpy_{engine}"}
        rows = {d: halves[n][0] for d, n in names.items() if n in halves}
        both = " + ".join(names.values())
        what = _NVB_SPLIT_WARP if engine == "sm" else "the other direction runs unmeasured"
        fields = dict(suite="copy", op="bidir", memory="pinned", engine=engine, numa=run.numa, src="host")
        if scope == "device":
            out += _host_bidir_per_gpu(names, rows, both, what, run, fields)
        elif rows:
            out += _host_bidir_all(names, rows, both, what, run, fields)
    return out


def _host_bidir_per_gpu(names: dict, rows: dict, both: str, what: str, run: _NvbRun, fields: dict) -> list[Sample]:
    out = []
    for j in range(max((len(r) for r in rows.values()), default=0)):
        got = {d: r[j] for d, r in rows.items() if j < len(r) and r[j] is not None}
        out += [_nvb_sample(names[d], run, bw, 1, what, part=d, dst=_gpu(j), **fields) for d, bw in got.items()]
        if len(got) == 2:
            out.append(_nvb_sample(both, run, sum(got.values()), 2, what, dst=_gpu(j), **fields))
    return out


def _host_bidir_all(names: dict, rows: dict, both: str, what: str, run: _NvbRun, fields: dict) -> list[Sample]:
    what = f"each GPU measured while every GPU copies both ways; {what}"
    fields = {**fields, "dst": "all"}
    out = []
    for d, row in rows.items():
        values = [v for v in row if v is not None]
        out.append(_nvb_sample(names[d], run, sum(values), len(values), what, part=d, world_size=len(row), **fields))
    if len(rows) == 2:
        per_gpu = [None if None in pair else sum(pair) for pair in zip(rows["h2d"], rows["d2h"])]
        out += _concurrent(both, run, per_gpu, 2, what, **fields)
    return out


def _nvb_testcase(tc: dict, run: _NvbRun, halves: dict) -> list[Sample]:
    """One testcase's rows; host bidirectional halves are put aside in `halves`. ValueError: why not imported."""
    name, status = str(tc.get("name", "")), str(tc.get("status", ""))
    if status.lower() != "passed":
        raise ValueError(f"status {status or 'missing'}" + (f": {tc['error']}" if tc.get("error") else ""))
    if name.startswith("multinode_"):
        raise ValueError("multi-node test (nvbandwidth's MPI build): "
                         "its GPUs are ranks on hosts the JSON does not name")
    try:
        matrix = _matrix(tc)
    except (TypeError, ValueError):
        raise ValueError("unreadable bandwidth_matrix") from None
    if not matrix or not matrix[0]:
        raise ValueError("no bandwidth_matrix")
    if _NVB_HOST_BIDIR.fullmatch(name):
        halves[name] = matrix
        return []
    for pattern, rows in _NVB_TESTS:
        if (m := pattern.fullmatch(name)):
            return rows(name, m, matrix, run)
    raise ValueError("not a testcase of nvbandwidth v0.8")


def _nvb_root(data: dict | str, source: str) -> dict:
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{source}: not JSON ({exc}); run nvbandwidth with -j") from None
    root = data.get("nvbandwidth") if isinstance(data, dict) else None
    if not isinstance(root, dict) or not isinstance(root.get("testcases"), list):
        raise ResultsError(f"{source}: not nvbandwidth JSON output (no nvbandwidth.testcases)")
    return root


def parse_nvbandwidth(data: dict | str, buffer_bytes: int, source: str = "json", numa: str = "local") -> Imported:
    """Rows of the copy and p2p suites from nvbandwidth -j output (a dict or its JSON text).

    `numa` is where its host buffers were: 'local' (nvbandwidth binds to each GPU's NUMA node
    before allocating) or 'none' (it ran with -d, --disableAffinity); its JSON does not say.
    """
    root = _nvb_root(data, source)
    run = _NvbRun(buffer_bytes, numa)
    samples: list[Sample] = []
    halves: dict[str, list] = {}
    not_imported = []
    for tc in root["testcases"]:
        try:
            samples += _nvb_testcase(tc, run, halves)
        except ValueError as exc:
            not_imported.append(f"{tc.get('name', '')}: {exc}")
    samples += _host_bidir(halves, run)
    devices = [d for e in root.get("GPU Device list") or [] if (d := _NVB_DEVICE.match(str(e)))]
    cuda = root.get("CUDA Runtime Version")   # an int such as 12080
    system = {"hostname": next((d.group(4) for d in devices if d.group(4)), ""),
              "driver": str(root.get("Driver Version", "")),
              "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else "",
              "gpus": [{"index": int(d.group(1)), "name": d.group(2), "pci_bus_id": d.group(3)} for d in devices]}
    return Imported(samples, str(root.get("version") or root.get("git_version") or ""),
                    {k: v for k, v in system.items() if v}, not_imported)


def import_nvbandwidth(files: Iterable[str | Path], out_dir: str | Path, buffer_bytes: int,
                       instance: str | None = None, run_id: str | None = None, numa: str = "local") -> Path:
    """nvbandwidth -j outputs -> one run folder."""
    files = [Path(p) for p in files]
    merged = Imported([])
    for path in files:
        found = parse_nvbandwidth(read_text(path), buffer_bytes, source=str(path), numa=numa)
        merged.samples += found.samples
        merged.not_imported += [f"{path.name}: {n}" for n in found.not_imported]
        merged.tool_version = merged.tool_version or found.tool_version
        merged.system = merged.system or found.system
    return write_import(out_dir, merged, "nvbandwidth", files, instance, run_id)
