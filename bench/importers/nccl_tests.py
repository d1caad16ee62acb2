"""nccl-tests stdout as a run of the collectives suite.

Each size is measured twice, out-of-place then in-place; they become trials 0 and 1
of one point (the note says which), and repeated tests in the logs add further trials. Time in
the table is µs, bandwidths GB/s. A row with #wrong > 0 is recorded as failed; '#wrong' N/A
(validation off, or in-place sendrecv) gives verified=False with the note "not checked".
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Iterable

from bench import suites
from bench.importers.run_folder import Imported, read_text, write_import
from bench.ops import Op, named
from bench.results import ResultsError, Sample
from bench.sizes import format_size

NCCL_TYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "char": "int8"}


@functools.cache
def _declared() -> dict[str, tuple[str, Op]]:
    """nccl-tests' name of each op (all_reduce for all_reduce_perf) -> (suite, op), from the ops'
    declarations (bench/ops.py: nccl_tests)."""
    return named({suite.name: suite for suite in suites.all()}, "nccl_tests")


def op_name(binary: str) -> str:
    """Our name of nccl-tests' op (its binary's stem, alltoall); an op we do not measure keeps its own."""
    found = _declared().get(binary)
    return found[1].name if found else binary


def _suite() -> str:
    """The suite nccl-tests' rows belong to: the one whose ops nccl-tests names."""
    return next(suite for suite, _ in _declared().values())


_PERF_BINARY = re.compile(r"\b([a-z_]+?)_perf(?:_mpi)?\b")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s.*?\bon\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$")
_NCCL_VERSION = re.compile(r"^NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_TESTS_VERSION = re.compile(r"^# nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _nccl_version_from_code(code: int) -> str:
    # NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older ones major*1000 + minor*100 + patch
    major, rest = (code // 10000, code % 10000) if code >= 20900 else (code // 1000, code % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _ranks_of(op: Op, factor: float) -> int | None:
    """The rank count whose bus factor (busbw / algbw) is `factor`, rounded; None for an op whose
    factor tells nothing of it (1 at any count). The factors climb with the count: bisection."""
    if op.bus(2) == op.bus(1 << 20):
        return None
    lo, hi = 1.0, float(1 << 20)
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if op.bus(mid) < factor else (lo, mid)
    return round(lo)


def _infer_ranks(op: str, rows: list[tuple[int, float, float]]) -> int | None:
    """Ranks from the busbw/algbw ratio of the largest row (the most digits), when the op tells."""
    declared = next((found for _, found in _declared().values() if found.name == op), None)
    usable = [(size, alg, bus) for size, alg, bus in rows if alg > 0]
    if declared is None or not usable:
        return None
    _, alg, bus = max(usable)
    ranks = _ranks_of(declared, bus / alg)
    return ranks if ranks is not None and ranks >= 2 else None


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
                blocks[-1].op = op_name(binary.group(1))
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
        suite=_suite(), op=block.op, size_bytes=int(p["size"]), time_s=float(t_us) * 1e-6,
        iters=block.iters, trial=trial, memory="", mode="default", backend="nccl", world_size=ranks,
        nnodes=nnodes, dtype=NCCL_TYPES.get(p.get("type", ""), p.get("type", "")), launch=block.launch,
        algbw_gbps=float("nan") if failed else float(algbw), busbw_gbps=float("nan") if failed else float(busbw),
        verified=n_wrong == 0, status="failed" if failed else "ok", note=note)


def import_nccl_tests(logs: Iterable[str | Path], out_dir: str | Path, instance: str | None = None,
                      run_id: str | None = None, op: str | None = None, world_size: int | None = None) -> Path:
    """nccl-tests logs -> one run folder (every test of every log)."""
    logs = [Path(p) for p in logs]
    merged = Imported([])
    for log in logs:
        found = parse_nccl_tests(read_text(log), op=op, world_size=world_size, source=str(log))
        merged.samples += found.samples
        merged.incomplete += [f"{log.name}: {why}" for why in found.incomplete]
        merged.tool_version = merged.tool_version or found.tool_version
        merged.system = merged.system or found.system
    return write_import(out_dir, merged, "nccl-tests", logs, instance, run_id)
