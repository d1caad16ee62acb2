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
    ranks = round(to_ranks(bus / alg)) if bus < 2 * alg and bus != alg else None
    return ranks if ranks and ranks > 1 else None


class _NcclBlock:
    """The header state a table row is read under: op, ranks, iterations, launch mode."""

    def __init__(self, op: str | None) -> None:
        self.op = op
        self.ranks: dict[int, tuple[str, int, str]] = {}
        self.iters = 0
        self.launch = "eager"
        self.prefix: list[str] | None = None     # columns before the first time column
        self.rows: list[tuple] = []


def parse_nccl_tests(text: str, op: str | None = None, world_size: int | None = None,
                     source: str = "log") -> Imported:
    """Rows of the collectives suite from nccl-tests stdout (one or several tests in a row)."""
    blocks: list[_NcclBlock] = []
    block = _NcclBlock(op)
    version, nccl, cuda = "", "", ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if (m := _TESTS_VERSION.match(stripped)):
                version = m.group(1)
                nccl = nccl or (_nccl_version_from_code(int(m.group(2))) if m.group(2) else "")
            if "Collective test starting" in stripped or stripped.startswith("# nThread"):
                if block.rows:
                    blocks.append(block)
                    block = _NcclBlock(op or block.op)
                elif "Collective test starting" in stripped:
                    block.ranks = {}
            if (m := _PERF_BINARY.search(stripped)) and op is None:
                block.op = _nccl_op(m.group(1))
            if stripped.startswith("# nThread"):
                fields = dict(re.findall(r"([a-z ]+?):\s*(\d+)", stripped.split("step:")[-1]))
                block.iters = int(fields.get(" iters", fields.get("iters", 0)) or 0)
                block.launch = "graph" if int(fields.get(" graph", fields.get("graph", 0)) or 0) > 0 else "eager"
            if (m := _RANK_LINE.match(stripped)):
                block.ranks[int(m.group(1))] = (m.group(2), int(m.group(3)), m.group(4))
            tokens = stripped.lstrip("#").split()
            if "size" in tokens and "count" in tokens and ("time" in tokens or "cputime" in tokens):
                first_time = next(i for i, t in enumerate(tokens) if t in ("time", "cputime"))
                block.prefix = tokens[:first_time]
            continue
        if (m := _NCCL_VERSION.match(stripped)):
            nccl, cuda = m.group(1), m.group(2) or ""
            continue
        if not m and (b := _PERF_BINARY.search(stripped)) and op is None and not stripped[0].isdigit():
            if block.rows:  # a command line starting the next test
                blocks.append(block)
                block = _NcclBlock(None)
            block.op = _nccl_op(b.group(1))
            continue
        tokens = stripped.split()
        prefix = block.prefix or (["size", "count", "type", "redop", "root"] if len(tokens) == 13
                                  else ["size", "count", "type", "redop"])
        if not tokens[0].isdigit() or len(tokens) != len(prefix) + 8:
            continue  # launcher chatter, warnings, anything that is not a table row
        block.rows.append((dict(zip(prefix, tokens)), tokens[len(prefix):]))
    if block.rows:
        blocks.append(block)
    if not blocks:
        raise ResultsError(f"{source}: no nccl-tests result table found")

    samples = []
    for b in blocks:
        if not b.op:
            raise ResultsError(f"{source}: cannot tell which collective a table measures; pass --op")
        ranks = world_size or len(b.ranks) or _infer_ranks(
            b.op, [(int(p["size"]), _number(c[1]) or 0.0, _number(c[2]) or 0.0) for p, c in b.rows])
        if not ranks:
            raise ResultsError(f"{source}: no rank lines to count the ranks of {b.op}; pass --world-size")
        nnodes = len({host for host, _, _ in b.ranks.values()}) or 1
        for p, cells in b.rows:
            for trial, (placement, (t_us, algbw, busbw, wrong)) in enumerate(
                    (("out-of-place", cells[:4]), ("in-place", cells[4:]))):
                samples.append(_nccl_sample(b, p, ranks, nnodes, trial, placement, t_us, algbw, busbw, wrong))
    gpus = [{"index": dev, "name": name} for _, (host, dev, name) in sorted(blocks[0].ranks.items())
            if host == next(iter(blocks[0].ranks.values()))[0]]
    hosts = sorted({host for b in blocks for host, _, _ in b.ranks.values()})
    system = {"hostname": hosts[0] if hosts else "", "nccl": nccl, "cuda": cuda, "gpus": gpus}
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

_NVB_NAME = re.compile(r"^(host_to_device|device_to_host|device_to_device|device_local)"
                       r"(_bidirectional)?(?:_memcpy)?(?:_(read|write))?(?:_(ce|sm))?$|^device_local_copy$")
_NVB_DEVICE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*\(([0-9A-Fa-f:.]+)\)(?::\s*\((.*)\))?\s*$")


def _matrix(testcase: dict) -> list[list[float | None]]:
    rows = testcase.get("bandwidth_matrix") or []
    return [[None if v in ("N/A", "", None) else float(v) for v in row] for row in rows]


def _gpu(i: int) -> str:
    return f"cuda:{i}"


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
    host_bidir: dict[tuple, dict[str, float]] = defaultdict(dict)
    not_imported = []
    for tc in root["testcases"]:
        name, status = str(tc.get("name", "")), str(tc.get("status", ""))
        m = _NVB_NAME.match(name)
        if status.lower() != "passed":
            not_imported.append(f"{name}: status {status or 'missing'}{': ' + tc['error'] if tc.get('error') else ''}")
            continue
        if not m:
            not_imported.append(f"{name}: no xferbench equivalent (contention or latency test)")
            continue
        kind, bidir, side, engine = m.group(1) or "device_local", bool(m.group(2)), m.group(3), m.group(4) or "ce"
        matrix = _matrix(tc)

        def add(**fields) -> None:
            bw = fields.pop("bw")
            moved = buffer_bytes * (2 if fields.get("part") == "total" and fields["op"] == "bidir" else 1)
            samples.append(Sample(size_bytes=buffer_bytes, time_s=moved / (bw * 1e9), trial=0,
                                  algbw_gbps=bw, busbw_gbps=bw, verified=False,
                                  note="nvbandwidth (its own data check is not recorded in its JSON)", **fields))

        if kind in ("host_to_device", "device_to_host", "device_local"):
            for j, bw in enumerate(matrix[0] if matrix else []):
                if bw is None:
                    continue
                if kind == "device_local":
                    add(suite="copy", op="d2d", memory="device", mode=engine, backend="cuda",
                        src=_gpu(j), dst=_gpu(j), bw=bw)
                elif bidir:  # one direction measured while the other runs: a part of 'bidir'
                    direction = "h2d" if kind == "host_to_device" else "d2h"
                    host_bidir[(engine, j)][direction] = bw
                    add(suite="copy", op="bidir", part=direction, memory="pinned", mode=engine, backend="cuda",
                        src="host", dst=_gpu(j), bw=bw)
                else:
                    op = "h2d" if kind == "host_to_device" else "d2h"
                    src, dst = ("host", _gpu(j)) if op == "h2d" else (_gpu(j), "host")
                    add(suite="copy", op=op, memory="pinned", mode=engine, backend="cuda", src=src, dst=dst, bw=bw)
            continue
        # device_to_device: square matrices; a CE bidirectional test stacks rev, fwd and total
        n = len(matrix[0]) if matrix else 0
        blocks = [matrix[k:k + n] for k in range(0, len(matrix), n)] if n else []
        mode = f"{engine}-{side or 'write'}"
        if not bidir:
            parts = [("total", blocks[0])] if blocks else []
        elif len(blocks) == 3:
            parts = list(zip(("rev", "fwd", "total"), blocks))
        elif len(blocks) == 1 and engine == "sm":   # SM bidirectional reports the sum
            parts = [("total", blocks[0])]
        else:
            not_imported.append(f"{name}: {len(blocks)} matrices, expected 3 (directions and total)")
            continue
        for part, block in parts:
            for i, row in enumerate(block):
                for j, bw in enumerate(row):
                    if bw is None or i == j:
                        continue
                    # write: row i copies to column j; read: row i reads column j (data j -> i)
                    src, dst = (i, j) if bidir or side != "read" else (j, i)
                    add(suite="p2p", op="bidir" if bidir else "uni", part=part, memory="device", mode=mode,
                        backend="cuda", src=_gpu(src), dst=_gpu(dst), bw=bw)
    for (engine, j), parts in sorted(host_bidir.items()):
        if len(parts) == 2:
            samples.append(Sample(suite="copy", op="bidir", size_bytes=buffer_bytes, part="total", trial=0,
                                  time_s=2 * buffer_bytes / (sum(parts.values()) * 1e9), memory="pinned",
                                  mode=engine, backend="cuda", src="host", dst=_gpu(j),
                                  algbw_gbps=sum(parts.values()), busbw_gbps=sum(parts.values()),
                                  note="sum of nvbandwidth's two bidirectional host tests"))
    gpus = []
    for entry in root.get("GPU Device list") or []:
        if (m := _NVB_DEVICE.match(str(entry))):
            gpus.append({"index": int(m.group(1)), "name": m.group(2), "pci_bus_id": m.group(3)})
    hosts = [m.group(4) for e in root.get("GPU Device list") or [] if (m := _NVB_DEVICE.match(str(e))) and m.group(4)]
    cuda = root.get("CUDA Runtime Version")
    system = {"hostname": hosts[0] if hosts else "", "driver": str(root.get("Driver Version", "")),
              "cuda": f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}" if isinstance(cuda, int) else "",
              "gpus": gpus}
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
    import yaml

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
        text = _read_text(log)
        found = parse_nccl_tests(text, op=op, world_size=world_size, source=str(log))
        if not any(_PERF_BINARY.search(line) for line in text.splitlines()) and op is None:
            raise ResultsError(f"{log}: cannot tell which collective it measures; pass --op")
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
