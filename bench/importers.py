"""Import other tools' results as xferbench runs: nccl-tests stdout and nvbandwidth's JSON.

An imported run is an ordinary run folder (samples + meta.json), so plots and compare treat it
like a measured one. Conventions of the mapping:

nccl-tests: each size is measured twice, out-of-place then in-place; they become trials 0 and 1
of one point (the note says which), and repeated tests in the logs add further trials. Time in
the table is µs, bandwidths GB/s. A row with #wrong > 0 is recorded as failed; '#wrong' N/A
(validation off, or in-place sendrecv) gives verified=False with the note "not checked".

nvbandwidth: every single-node testcase of v0.8 (and the older layouts back to v0.5). Host copies
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
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Iterable

import yaml

from bench.config.files import INSTANCES
from bench.results import SCHEMA_VERSION, ResultsError, RunWriter, Sample, point_key, write_json
from bench.sizes import format_size

# nccl-tests binary -> our op name
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "sendrecv": "sendrecv",
            "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}
NCCL_TYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "char": "int8"}
# busbw / algbw, as nccl-tests computes it (n = ranks); ops of factor 1 tell nothing about n
_BUS_FACTOR_TO_RANKS = {"all_reduce": lambda f: 2 / (2 - f), "all_gather": lambda f: 1 / (1 - f),
                        "reduce_scatter": lambda f: 1 / (1 - f), "all_to_all": lambda f: 1 / (1 - f)}

_PERF_BINARY = re.compile(r"\b([a-z_]+?)_perf(?:_mpi)?\b")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s.*?\bon\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$")
_NCCL_VERSION = re.compile(r"^NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_TESTS_VERSION = re.compile(r"^# nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")


@dataclass
class Imported:
    """What a parser found: rows plus what meta.json should say about the machine and tool."""

    samples: list[Sample]
    tool_version: str = ""
    system: dict = field(default_factory=dict)
    not_imported: list[str] = field(default_factory=list)   # 'name: reason', for the user
    incomplete: list[str] = field(default_factory=list)     # tests whose sweep stops short: 'what: why'


def _nccl_op(binary: str) -> str:
    return NCCL_OPS.get(binary, binary)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _nccl_version_from_code(code: int) -> str:
    # NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older ones major*1000 + minor*100 + patch
    major, rest = (code // 10000, code % 10000) if code >= 20900 else (code // 1000, code % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _infer_ranks(op: str, rows: list[tuple[int, float, float]]) -> int | None:
    """Ranks from the busbw/algbw ratio of the largest row (the most digits), when the op tells."""
    to_ranks = _BUS_FACTOR_TO_RANKS.get(op)
    usable = [(size, alg, bus) for size, alg, bus in rows if alg > 0]
    if to_ranks is None or not usable:
        return None
    _, alg, bus = max(usable)
    try:
        ranks = round(to_ranks(bus / alg))
    except ZeroDivisionError:
        return None
    return ranks if ranks >= 2 else None


class _NcclBlock:
    """One test's table and the header it is read under: op, ranks, iterations, launch mode."""

    def __init__(self, op: str | None) -> None:
        self.op = op
        self.ranks: dict[int, tuple[str, int, str]] = {}   # rank -> (host, device, GPU name)
        self.iters = 0
        self.launch = "eager"
        self.max_bytes: int | None = None      # the header's maxBytes: None until a '# nThread' line
        self.footer = False                    # the '# Avg bus bandwidth' line a finished test prints
        self.prefix: list[str] | None = None   # the columns before the first time column
        self.rows: list[tuple[dict, list[str]]] = []

    def read_comment(self, line: str) -> None:
        if line.startswith("# nThread"):
            iters = re.search(r"\d\s+iters:\s*(\d+)", line)       # not 'warmup iters' or 'agg iters'
            graph = re.search(r"\bgraph:\s*(\d+)", line)
            max_bytes = re.search(r"\bmaxBytes\s+(\d+)", line)
            self.iters = int(iters.group(1)) if iters else 0
            self.launch = "graph" if graph and int(graph.group(1)) > 0 else "eager"
            self.max_bytes = int(max_bytes.group(1)) if max_bytes else 0
        elif line.startswith("# Avg bus bandwidth"):
            self.footer = True
        elif (m := _RANK_LINE.match(line)):
            self.ranks[int(m.group(1))] = (m.group(2), int(m.group(3)), m.group(4))
        else:
            tokens = line.lstrip("#").split()
            if "size" in tokens and "count" in tokens and ("time" in tokens or "cputime" in tokens):
                self.prefix = tokens[:next(i for i, t in enumerate(tokens) if t in ("time", "cputime"))]

    def read_row(self, line: str) -> None:
        tokens = line.split()
        # without a column header: 13 columns have 'root', 12 are the older layout without it
        prefix = self.prefix or (["size", "count", "type", "redop", "root"][:5 if len(tokens) == 13 else 4])
        if tokens[0].isdigit() and len(tokens) == len(prefix) + 8:
            self.rows.append((dict(zip(prefix, tokens)), tokens[len(prefix):]))

    def unfinished(self) -> str | None:
        """Why this test's sweep looks cut short, or None. Only a test whose header was seen is
        judged (a log stripped of its '#' lines says nothing): it must end with the footer."""
        if self.max_bytes is None or self.footer:
            return None
        op = self.op or "a test"
        if not self.rows:
            return f"{op}: started, no rows"
        last = max(int(p["size"]) for p, _ in self.rows)
        of = f" of the header's {format_size(self.max_bytes)}" if self.max_bytes else ""
        return f"{op}: stops at {format_size(last)}{of}, no '# Avg bus bandwidth' line"


def parse_nccl_tests(text: str, op: str | None = None, world_size: int | None = None,
                     source: str = "log") -> Imported:
    """Rows of the collectives suite from nccl-tests stdout (one or several tests in a row).

    A line naming a *_perf binary (a command line, '# Collective test starting: ...') or a
    '# nThread' line starts the next test once the current one has rows. `op` and
    `world_size` fill in what a log does not say (no binary named, no '# Rank' lines). A test
    whose header was read but whose table ends without the '# Avg bus bandwidth' line that
    nccl-tests prints after the last size (a log cut short: a killed job, a time limit) is
    named in `incomplete`, as is one that started and printed no rows.
    """
    blocks = [_NcclBlock(None)]
    version = nccl = cuda = ""
    for line in map(str.strip, text.splitlines()):
        if not line:
            continue
        binary = _PERF_BINARY.search(line)
        if binary or line.startswith("# nThread"):
            if blocks[-1].rows:
                blocks.append(_NcclBlock(blocks[-1].op))
            if binary:
                blocks[-1].op = _nccl_op(binary.group(1))
        if (m := _TESTS_VERSION.match(line)):
            version = m.group(1)
            nccl = nccl or (_nccl_version_from_code(int(m.group(2))) if m.group(2) else "")
        elif (m := _NCCL_VERSION.match(line)):
            nccl, cuda = m.group(1), m.group(2) or ""
        elif line.startswith("#"):
            blocks[-1].read_comment(line)
        elif not binary:
            blocks[-1].read_row(line)
    incomplete = [why for b in blocks if (why := b.unfinished())]
    blocks = [b for b in blocks if b.rows]
    if not blocks:
        raise ResultsError(f"{source}: no nccl-tests result table found")

    samples = []
    for b in blocks:
        b.op = b.op or op
        if not b.op:
            raise ResultsError(f"{source}: cannot tell which collective a table measures; pass --op")
        ranks = len(b.ranks) or world_size or _infer_ranks(
            b.op, [(int(p["size"]), _number(c[1]) or 0.0, _number(c[2]) or 0.0) for p, c in b.rows])
        if not ranks:
            raise ResultsError(f"{source}: no rank lines to count the ranks of {b.op}; pass --world-size")
        nnodes = len({host for host, _, _ in b.ranks.values()}) or 1
        for p, cells in b.rows:
            for trial, placement in enumerate(("out-of-place", "in-place")):
                samples.append(_nccl_sample(b, p, ranks, nnodes, trial, placement, *cells[4 * trial:4 * trial + 4]))
    ranks = sorted(blocks[0].ranks.values())
    first_host = ranks[0][0] if ranks else ""
    system = {"hostname": first_host, "nccl": nccl, "cuda": cuda,
              "gpus": [{"index": dev, "name": name} for host, dev, name in ranks if host == first_host]}
    return Imported(samples, version, {k: v for k, v in system.items() if v}, incomplete=incomplete)


def _nccl_sample(block: _NcclBlock, p: dict, ranks: int, nnodes: int, trial: int, placement: str,
                 t_us: str, algbw: str, busbw: str, wrong: str) -> Sample:
    n_wrong = _number(wrong)
    failed = n_wrong is not None and n_wrong > 0
    note = placement if n_wrong is not None else f"{placement}; not checked"
    if failed:
        note = f"{placement}; {int(n_wrong)} wrong elements (nccl-tests #wrong)"
    return Sample(
        suite="collectives", op=block.op, size_bytes=int(p["size"]), time_s=float(t_us) * 1e-6,
        iters=block.iters, trial=trial, memory="", mode="default", backend="nccl", world_size=ranks,
        nnodes=nnodes, dtype=NCCL_TYPES.get(p.get("type", ""), p.get("type", "")), launch=block.launch,
        algbw_gbps=float("nan") if failed else float(algbw), busbw_gbps=float("nan") if failed else float(busbw),
        verified=n_wrong == 0, status="failed" if failed else "ok", note=note)


# --- nvbandwidth ---------------------------------------------------------------------------------

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


# --- writing a run -------------------------------------------------------------------------------

def number_trials(samples: list[Sample]) -> list[Sample]:
    """Renumber trials per point and part in order of appearance, so repeated tests add trials."""
    seen: dict[tuple, int] = defaultdict(int)
    for s in samples:
        key = (point_key(s), s.part)
        s.trial = seen[key]
        seen[key] += 1
    return samples


def instance_meta(name: str | None, label: str | None = None) -> dict:
    """meta.json's instance: the instance entry conf/instance/<name>.yaml when there is one."""
    entry: dict = {}
    if name and (INSTANCES / f"{name}.yaml").is_file():
        entry = yaml.safe_load((INSTANCES / f"{name}.yaml").read_text()) or {}
    name = name or "imported"
    return {**entry, "name": name, "label": label or name}


def write_import(out_dir: str | Path, imported: Imported, tool: str, sources: Iterable[str | Path],
                 instance: str | None = None, run_id: str | None = None) -> Path:
    """An xferbench run folder holding the imported rows; ResultsError if it already has rows.
    An import whose sweep stops short (imported.incomplete) gets status 'interrupted', which
    plots, reports and the choice of runs treat as they treat a measured run cut short, and the
    reasons as 'incomplete'; a whole import records no status (taken as complete)."""
    out_dir = Path(out_dir)
    if (out_dir / "samples.parquet").exists() or (out_dir / "meta.json").exists():
        raise ResultsError(f"{out_dir}: already holds a run; import into a new folder")
    if not imported.samples:
        raise ResultsError(f"nothing to import from {', '.join(map(str, sources))}")
    run_id = run_id or out_dir.name
    writer = RunWriter(out_dir, run_id)
    writer.add_point(number_trials(imported.samples))
    writer.close()
    write_json(out_dir / "meta.json", {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "start_time": "",
        "instance": instance_meta(instance, instance or imported.system.get("hostname")),
        "system": imported.system,
        "tool": {"name": tool, "version": imported.tool_version},
        "source": [str(s) for s in sources],
        "not_imported": imported.not_imported,
        **({"status": "interrupted", "incomplete": imported.incomplete} if imported.incomplete else {}),
    })
    return out_dir


def import_nccl_tests(logs: Iterable[str | Path], out_dir: str | Path, instance: str | None = None,
                      run_id: str | None = None, op: str | None = None, world_size: int | None = None) -> Path:
    """nccl-tests logs -> one run folder (every test of every log)."""
    logs = [Path(p) for p in logs]
    merged = Imported([])
    for log in logs:
        found = parse_nccl_tests(_read_text(log), op=op, world_size=world_size, source=str(log))
        merged.samples += found.samples
        merged.incomplete += [f"{log.name}: {why}" for why in found.incomplete]
        merged.tool_version = merged.tool_version or found.tool_version
        merged.system = merged.system or found.system
    return write_import(out_dir, merged, "nccl-tests", logs, instance, run_id)


def import_nvbandwidth(files: Iterable[str | Path], out_dir: str | Path, buffer_bytes: int,
                       instance: str | None = None, run_id: str | None = None, numa: str = "local") -> Path:
    """nvbandwidth -j outputs -> one run folder."""
    files = [Path(p) for p in files]
    merged = Imported([])
    for path in files:
        found = parse_nvbandwidth(_read_text(path), buffer_bytes, source=str(path), numa=numa)
        merged.samples += found.samples
        merged.not_imported += [f"{path.name}: {n}" for n in found.not_imported]
        merged.tool_version = merged.tool_version or found.tool_version
        merged.system = merged.system or found.system
    return write_import(out_dir, merged, "nvbandwidth", files, instance, run_id)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror})") from None
