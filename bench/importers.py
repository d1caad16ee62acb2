"""Import other tools' results as xferbench runs: nccl-tests stdout and nvbandwidth's JSON.

An imported run is an ordinary run folder (samples + meta.json), so plots and compare treat it
like a measured one. Conventions of the mapping:

nccl-tests: each size is measured twice, out-of-place then in-place; they become trials 0 and 1
of one point (the note says which), and repeated tests in the logs add further trials. Time in
the table is µs, bandwidths GB/s. A row with #wrong > 0 is recorded as failed; '#wrong' N/A
(validation off, or in-place sendrecv) gives verified=False with the note "not checked".

nvbandwidth: host copies become suite 'copy' (pinned host memory), GPU-to-GPU copies suite
'p2p'; mode says the engine and, for peer copies, the side that drives it: 'ce'/'sm' for host
copies, 'ce-read', 'sm-write', ... for p2p. Write tests copy row -> column, read tests column ->
row (the row GPU reads from its peer). A bidirectional CE test reports both directions and
their total: parts 'fwd' (src -> dst), 'rev' and 'total'. Host bidirectional tests report one
direction while the other runs; the pair becomes parts 'h2d' and 'd2h' and their sum 'total'.
nvbandwidth's JSON does not record the buffer size (default 512 MiB since v0.5, 64 MiB before),
so it is an argument. Contention (all_to_*, *_to_all) and latency tests are not imported.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import yaml

from bench.results import SCHEMA_VERSION, ResultsError, RunWriter, Sample, point_key, write_json

CONF_INSTANCES = Path(__file__).resolve().parent.parent / "conf" / "instance"

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
        self.prefix: list[str] | None = None   # the columns before the first time column
        self.rows: list[tuple[dict, list[str]]] = []

    def read_comment(self, line: str) -> None:
        if line.startswith("# nThread"):
            iters = re.search(r"\d\s+iters:\s*(\d+)", line)       # not 'warmup iters' or 'agg iters'
            graph = re.search(r"\bgraph:\s*(\d+)", line)
            self.iters = int(iters.group(1)) if iters else 0
            self.launch = "graph" if graph and int(graph.group(1)) > 0 else "eager"
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


def parse_nccl_tests(text: str, op: str | None = None, world_size: int | None = None,
                     source: str = "log") -> Imported:
    """Rows of the collectives suite from nccl-tests stdout (one or several tests in a row).

    A line naming a *_perf binary (a command line, '# Collective test starting: ...') or a
    '# nThread' line starts the next test once the current one has rows. `op` and
    `world_size` fill in what a log does not say (no binary named, no '# Rank' lines).
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
    return Imported(samples, version, {k: v for k, v in system.items() if v})


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

# host_to_device_memcpy_ce, device_to_device_bidirectional_memcpy_read_sm, ..., device_local_copy
_NVB_NAME = re.compile(r"^(host_to_device|device_to_host|device_to_device)(_bidirectional)?_memcpy"
                       r"(?:_(read|write))?_(ce|sm)$|^(device_local)_copy$")
_NVB_DEVICE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*\(([0-9A-Fa-f:.]+)\)(?::\s*\((.*)\))?\s*$")


def _matrix(testcase: dict) -> list[list[float | None]]:
    rows = testcase.get("bandwidth_matrix") or []
    return [[None if v in ("N/A", "", None) else float(v) for v in row] for row in rows]


def _gpu(i: int) -> str:
    return f"cuda:{i}"


def _nvb_sample(buffer_bytes: int, bw: float, **fields) -> Sample:
    # A bidirectional total moves the buffer both ways; time is what the bandwidth implies.
    moved = buffer_bytes * (2 if fields["op"] == "bidir" and fields.get("part", "total") == "total" else 1)
    return Sample(size_bytes=buffer_bytes, time_s=moved / (bw * 1e9), trial=0, algbw_gbps=bw, busbw_gbps=bw,
                  backend="cuda", verified=False, note="nvbandwidth (its data check is not recorded in its JSON)",
                  **fields)


def _host_copies(kind: str, bidir: bool, engine: str, row: list[float | None], buffer_bytes: int) -> list[Sample]:
    out = []
    for j, bw in enumerate(row):
        if bw is None:
            continue
        gpu = _gpu(j)
        if kind == "device_local":
            out.append(_nvb_sample(buffer_bytes, bw, suite="copy", op="d2d", memory="device", mode=engine,
                                   src=gpu, dst=gpu))
        elif bidir:  # one direction measured while the other runs: a part of 'bidir'
            part = "h2d" if kind == "host_to_device" else "d2h"
            out.append(_nvb_sample(buffer_bytes, bw, suite="copy", op="bidir", part=part, memory="pinned",
                                   mode=engine, src="host", dst=gpu))
        else:
            op = "h2d" if kind == "host_to_device" else "d2h"
            src, dst = ("host", gpu) if op == "h2d" else (gpu, "host")
            out.append(_nvb_sample(buffer_bytes, bw, suite="copy", op=op, memory="pinned", mode=engine,
                                   src=src, dst=dst))
    return out


def _peer_copies(name: str, bidir: bool, side: str | None, engine: str, matrix: list[list[float | None]],
                 buffer_bytes: int) -> list[Sample]:
    n = len(matrix[0]) if matrix else 0
    blocks = [matrix[k:k + n] for k in range(0, len(matrix), n)] if n else []
    if not bidir:
        parts = list(zip(["total"], blocks[:1]))
    elif len(blocks) == 3:   # CE: nvbandwidth appends the two directions and their total
        parts = list(zip(("rev", "fwd", "total"), blocks))
    elif len(blocks) == 1 and engine == "sm":   # SM bidirectional reports the sum only
        parts = [("total", blocks[0])]
    else:
        raise ValueError(f"{name}: {len(blocks)} matrices where 3 (directions and total) were expected")
    out = []
    for part, block in parts:
        for i, row in enumerate(block):
            for j, bw in enumerate(row):
                if bw is None or i == j:
                    continue
                # write: row i copies to column j; read: row i reads column j (data j -> i)
                src, dst = (j, i) if side == "read" and not bidir else (i, j)
                out.append(_nvb_sample(buffer_bytes, bw, suite="p2p", op="bidir" if bidir else "uni", part=part,
                                       memory="device", mode=f"{engine}-{side or 'write'}",
                                       src=_gpu(src), dst=_gpu(dst)))
    return out


def _bidir_totals(samples: list[Sample]) -> list[Sample]:
    """The sum of nvbandwidth's two host bidirectional tests, per GPU and engine, as part 'total'."""
    halves: dict[tuple, dict[str, Sample]] = defaultdict(dict)
    for s in samples:
        if s.suite == "copy" and s.op == "bidir" and s.part in ("h2d", "d2h"):
            halves[(s.mode, s.dst)][s.part] = s
    return [_nvb_sample(h["h2d"].size_bytes, h["h2d"].algbw_gbps + h["d2h"].algbw_gbps, suite="copy", op="bidir",
                        memory="pinned", mode=mode, src="host", dst=dst)
            for (mode, dst), h in sorted(halves.items()) if len(h) == 2]


def parse_nvbandwidth(data: dict | str, buffer_bytes: int, source: str = "json") -> Imported:
    """Rows of the copy and p2p suites from nvbandwidth -j output (a dict or its JSON text)."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{source}: not JSON ({exc}); run nvbandwidth with -j") from None
    root = data.get("nvbandwidth") if isinstance(data, dict) else None
    if not isinstance(root, dict) or not isinstance(root.get("testcases"), list):
        raise ResultsError(f"{source}: not nvbandwidth JSON output (no nvbandwidth.testcases)")
    samples: list[Sample] = []
    not_imported = []
    for tc in root["testcases"]:
        name, status = str(tc.get("name", "")), str(tc.get("status", ""))
        m = _NVB_NAME.match(name)
        if status.lower() != "passed":
            error = f": {tc['error']}" if tc.get("error") else ""
            not_imported.append(f"{name}: status {status or 'missing'}{error}")
        elif not m:
            not_imported.append(f"{name}: no xferbench equivalent (contention or latency test)")
        else:
            kind, bidir, side, engine = m.group(1) or m.group(5), bool(m.group(2)), m.group(3), m.group(4) or "ce"
            matrix = _matrix(tc)
            if kind == "device_to_device":
                try:
                    samples += _peer_copies(name, bidir, side, engine, matrix, buffer_bytes)
                except ValueError as exc:
                    not_imported.append(str(exc))
            elif matrix:
                samples += _host_copies(kind, bidir, engine, matrix[0], buffer_bytes)
    samples += _bidir_totals(samples)
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
    """meta.json's instance: the catalogue entry conf/instance/<name>.yaml when there is one."""
    entry: dict = {}
    if name and (CONF_INSTANCES / f"{name}.yaml").is_file():
        entry = yaml.safe_load((CONF_INSTANCES / f"{name}.yaml").read_text()) or {}
    name = name or "imported"
    return {**entry, "name": name, "label": label or name}


def write_import(out_dir: str | Path, imported: Imported, tool: str, sources: Iterable[str | Path],
                 instance: str | None = None, run_id: str | None = None) -> Path:
    """An xferbench run folder holding the imported rows; ResultsError if it already has rows."""
    out_dir = Path(out_dir)
    if (out_dir / "samples.parquet").exists() or (out_dir / "meta.json").exists():
        raise ResultsError(f"{out_dir}: already holds a run; import into a new folder")
    if not imported.samples:
        raise ResultsError(f"nothing to import from {', '.join(map(str, sources))}")
    run_id = run_id or out_dir.name
    writer = RunWriter(out_dir, run_id)
    writer.add_point(number_trials(imported.samples))  # one batch: a single atomic write
    write_json(out_dir / "meta.json", {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "start_time": "",
        "instance": instance_meta(instance, instance or imported.system.get("hostname")),
        "system": imported.system,
        "tool": {"name": tool, "version": imported.tool_version},
        "source": [str(s) for s in sources],
        "not_imported": imported.not_imported,
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
        merged.tool_version = merged.tool_version or found.tool_version
        merged.system = merged.system or found.system
    return write_import(out_dir, merged, "nccl-tests", logs, instance, run_id)


def import_nvbandwidth(files: Iterable[str | Path], out_dir: str | Path, buffer_bytes: int,
                       instance: str | None = None, run_id: str | None = None) -> Path:
    """nvbandwidth -j outputs -> one run folder."""
    files = [Path(p) for p in files]
    merged = Imported([])
    for path in files:
        found = parse_nvbandwidth(_read_text(path), buffer_bytes, source=str(path))
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
