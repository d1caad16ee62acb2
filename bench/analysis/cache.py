"""Copies within one GPU at sizes its L2 cache holds measure the cache, not HBM.

A d2d copy of 16 MiB on an H200 (50 MiB L2) reads and writes 32 MiB that stay in L2 from one
copy to the next: it shows about 2,970 GB/s where HBM gives about 2,100. Such a figure is
real, but it is no HBM peak. So, for on-GPU copies (the ops whose declarations say `on_one_gpu`,
bench/ops.py, with source and destination on one GPU):

- cache-resident: the working set (source + destination = 2 x size) fits in L2. The copy
  suite says so in the row's note when it measures (`resident_note`); for runs without the note,
  the L2 that meta.json records (column l2_bytes) decides.
- HBM figures (peaks, the report's cells) come only from sizes well past L2: at least PAST_L2 x
  L2, where a copy's working set is 8 x L2 and the cache holds a negligible part of it. Where
  no L2 is recorded (runs from before l2_bytes, imports), from UNKNOWN_L2_FROM on.
Graph-mode d2d stops at timing.graph_max_size (16 MiB by default), so it has no HBM figure.
"""
from __future__ import annotations

from bench import lazy
from bench.ops import every
from bench.sizes import format_size
from bench.suite_view import Catalog

np = lazy.module("numpy")
pd = lazy.module("pandas")

NOTE = "cache-resident"
PAST_L2 = 4
UNKNOWN_L2_FROM = 256 << 20     # 4 x 64 MiB: past the L2 of every GPU this tool has met (H100/H200: 50 MiB)
RULE = (f"on-GPU copies count toward HBM peaks only from {PAST_L2} x the GPU's L2 "
        f"({format_size(UNKNOWN_L2_FROM)} where the run did not record its L2)")


def _mib(n: int) -> str:
    return f"{n / 2**20:g}MiB"


def resident_note(size_bytes: int, l2_bytes: int) -> str:
    """The note of an on-GPU copy of `size_bytes` whose working set fits in `l2_bytes`; '' otherwise."""
    if not l2_bytes or 2 * size_bytes > l2_bytes:
        return ""
    return f"{NOTE}: 2 x {format_size(size_bytes)} fits in the {_mib(l2_bytes)} L2"


def _on_gpu(rows: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    copies: dict[str, list[str]] = {}
    for suite, op in every(catalog):
        if op.on_one_gpu:
            copies.setdefault(suite, []).append(op.name)
    # Column against column, not row by row: a run's thousands of rows, and a table's hundreds of thousands.
    declared = np.zeros(len(rows), bool)
    for suite, ops in copies.items():
        declared |= ((rows["suite"] == suite) & rows["op"].isin(ops)).to_numpy(bool, na_value=False)
    src = rows["src"].astype(str)
    return declared & ((src == rows["dst"].astype(str)) & src.str.startswith("cuda:")).to_numpy()


def _l2(rows: pd.DataFrame) -> np.ndarray:
    if "l2_bytes" not in rows.columns:
        return np.full(len(rows), np.nan)
    return pd.to_numeric(rows["l2_bytes"], errors="coerce").to_numpy(float)


def cache_resident(rows: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """Per row: its note says it is cache-resident, or it copies within one GPU and 2 x size fits in L2."""
    noted = rows["note"].fillna("").astype(str).str.contains(NOTE, regex=False).to_numpy() \
        if "note" in rows.columns else np.zeros(len(rows), bool)
    fits = _on_gpu(rows, catalog) & (2 * rows["size_bytes"].to_numpy(float) <= _l2(rows))
    return noted | fits


def short_of_hbm(rows: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """Per row: an on-GPU copy too small to be an HBM figure (cache-resident, or below PAST_L2 x L2;
    below UNKNOWN_L2_FROM where L2 is unknown). Such rows are drawn apart and kept out of peaks."""
    l2 = _l2(rows)
    size = rows["size_bytes"].to_numpy(float)
    floor = np.where(np.isnan(l2), UNKNOWN_L2_FROM, PAST_L2 * np.nan_to_num(l2))
    return cache_resident(rows, catalog) | (_on_gpu(rows, catalog) & (size < floor))


def hbm_rows(rows: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """The rows that may give a peak: every row but on-GPU copies short of HBM."""
    return rows[~short_of_hbm(rows, catalog)]
