"""One self-contained HTML page that compares instances (xferbench-report).

The page holds a headline table (a column per run shown, one run per instance by default: see
bench.analysis.runs; a row per headline metric the suites declare), the caveats, every figure
bench.analysis.figures draws (embedded as PNG data URIs), each machine's description and
versions, and the list of runs found. It loads nothing when opened: no scripts, fonts, styles or
images from elsewhere.
"""
from __future__ import annotations

import base64
import html
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

import bench
from bench.analysis.cache import RULE as CACHE_RULE
from bench.analysis.cache import hbm_rows
from bench.suite_view import Catalog, Metric, view
from bench.analysis.figures import render
from bench.analysis.figures.fleet import heat_map
from bench.analysis.figures.style import Canvas
from bench.analysis.fleet_verdicts import NORMAL, FleetJudgement
from bench.analysis.figures.style import SMALL_BYTES, VALUE_ORDER, rank_in, with_bandwidth
from bench.analysis.judge import judge
from bench.analysis.runs import COMPLETE, SERIES, palette, with_series
from bench.analysis.scaling import TITLE as SCALING_TITLE
from bench.analysis.scaling import format_scaling, scaling_table
from bench.points import CURVE_KEYS, curve_words
from bench.results import ResultsError, read_meta, usable_rows
from bench.sizes import format_size


# What tells two curves of one metric apart (a run may hold several dtypes, APIs, engines...);
# the launch is the cells' own split (eager figures; eager / device-side times).
CELL_KEYS = [k for k in CURVE_KEYS if k != "launch"]
ALWAYS_NAMED = ("api", "engine")    # named in a cell even where a run measured one of them
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Cell:
    value: str          # one figure per variant measured, each named where there are several
    notes: list[str]


def _curves(frame: pd.DataFrame, metric: Metric, catalog: Catalog) -> pd.DataFrame:
    data = with_bandwidth(usable_rows(frame), catalog)
    data = data[(data["suite"] == metric.suite) & (data["op"] == metric.op)]
    for column, value in metric.where:
        data = data[data[column].astype(str).isin(value)]
    return data


def _set(value) -> bool:
    return str(value) not in ("", "nan", "None")


def variants(data: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The curves of a metric's rows, each with its name: its values of the keys that vary among
    them, and its api and engine ('torch.distributed', 'nccl', 'ce', 'sm numa=remote'), in VALUE_ORDER."""
    varying = [k for k in CELL_KEYS if data[k].astype(str).nunique() > 1]
    keys = varying + [k for k in ALWAYS_NAMED if k not in varying and data[k].map(_set).any()]
    if not keys:
        return [("", data)]
    out = []
    for values, curve in data.groupby(keys, sort=False, dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        named = [(k, v) for k, v in zip(keys, values) if _set(v)]
        out.append(([rank_in(str(v), VALUE_ORDER) for _, v in named],
                    curve_words({**dict(named), "api": curve["api"].iloc[0]}, keys), curve))
    return [(name, curve) for _, name, curve in sorted(out, key=lambda t: (t[0], t[1]))]


RANKED = ("nccl", "gloo")   # backends whose rows are one world of ranks (its size: world_size)


def _ranks_note(curve: pd.DataFrame) -> list[str]:
    first = curve.iloc[0]
    return [f"{first['world_size']} ranks, {first['dtype']}"] if first["backend"] in RANKED else []


def _spread_note(curve: pd.DataFrame, size: int) -> list[str]:
    """The range over GPUs or pairs, where they differ by more than 5% (an uneven topology)."""
    at = curve[curve["size_bytes"] == size]
    per_device = at.groupby(["src", "dst"])["bandwidth_gbps"].median()
    if len(per_device) < 2 or per_device.max() <= 1.05 * per_device.min():
        return []
    src, dst = at["src"].astype(str), at["dst"].astype(str)
    pairs = (src.str.startswith("cuda:") & dst.str.startswith("cuda:") & (src != dst)).all()
    what = "pairs" if pairs else "GPUs"
    return [f"median of {len(per_device)} {what}: {per_device.min():.1f} to {per_device.max():.1f}"]


def _gbps(value: float) -> str:
    return f"{value:,.0f} GB/s" if value >= 1000 else f"{value:.1f} GB/s"


def _bandwidth_notes(curve: pd.DataFrame, metric: Metric, catalog: Catalog) -> tuple[float, list[str]]:
    """One curve's figure at its largest size, and what to say about it: the size, the share of
    the link it crosses, the peak where a smaller size beat it, GB/s per dollar where priced."""
    median = curve.groupby("size_bytes")["bandwidth_gbps"].median()
    value, size = float(median.iloc[-1]), int(median.index[-1])
    notes = [f"eager at {format_size(size)}", *_spread_note(curve, size)]
    link_gbps, link = view(catalog, metric.suite).link_limit(curve.iloc[0])
    if link_gbps > 0:
        notes.append(f"{100 * value / link_gbps:.0f}% of {link} ({link_gbps:.0f} GB/s)")
    if median.max() > 1.03 * value:
        notes.append(f"peak {_gbps(median.max())} at {format_size(int(median.idxmax()))}")
    price = pd.to_numeric(curve["usd_per_hour"].iloc[0], errors="coerce")
    if price > 0:
        notes.append(f"{value / price:.2f} GB/s per $/h")
    return value, notes


def bandwidth_cell(frame: pd.DataFrame, metric: Metric, catalog: Catalog) -> Cell | None:
    """Eager launches, the median at the largest size of each variant measured (torch beside
    nccl, ce beside sm: never the best of them), each named with its size and link share; on-GPU
    copies only from sizes well past L2 (bench.analysis.cache)."""
    data = _curves(frame, metric, catalog)
    data = data[data["launch"] == "eager"].dropna(subset=["bandwidth_gbps"])
    if data.empty:
        return None
    hbm = hbm_rows(data, catalog)
    if hbm.empty:
        return Cell("—", [f"up to {format_size(int(data['size_bytes'].max()))} only: in or near L2, no HBM figure"])
    curves = variants(hbm)
    parts = [(name, *_bandwidth_notes(curve, metric, catalog)) for name, curve in curves]
    if len(parts) == 1:
        name, value, notes = parts[0]
        return Cell(_gbps(value), [f"{name}, {notes[0]}" if name else notes[0], *notes[1:], *_ranks_note(hbm)])
    largest = [int(curve["size_bytes"].max()) for _, curve in curves]
    if len(set(largest)) == 1:
        value = " · ".join(f"{name} {_gbps(v)}" for name, v, _ in parts)
        return Cell(value, [f"{name}: {', '.join(notes)}" for name, _, notes in parts] + _ranks_note(hbm))
    # Largest sizes differ: each figure names its size, and a note compares them at one size.
    value = " · ".join(f"{name} {_gbps(v)} ({format_size(n)})" for (name, v, _), n in zip(parts, largest))
    notes = [f"{name}: {', '.join(notes)}" for name, _, notes in parts]
    common = set.intersection(*(set(curve["size_bytes"]) for _, curve in curves))
    if common:
        size = max(common)
        at = " · ".join(f"{name} {_gbps(curve.loc[curve['size_bytes'] == size, 'bandwidth_gbps'].median())}"
                        for name, curve in curves)
        notes.append(f"each at {format_size(size)}: {at}")
    return Cell(value, notes + _ranks_note(hbm))


def _us(times: pd.Series) -> str:
    return f"{times.median() * 1e6:.1f}" if len(times) else "—"


def latency_cell(frame: pd.DataFrame, metric: Metric, catalog: Catalog) -> Cell | None:
    """Median time per op at the smallest size (1 MiB or less), eager / on the device (held behind
    a latch, or where a run has none, replayed from a graph), for each variant measured there
    (torch beside nccl), each named."""
    data = _curves(frame, metric, catalog)
    data = data[(data["size_bytes"] <= SMALL_BYTES) & (data["time_s"] > 0)]
    if data.empty:
        return None
    size = int(data["size_bytes"].min())
    at = data[data["size_bytes"] == size]
    device = "held" if (at["launch"] == "held").any() else "graph"
    parts = [(name, f"{_us(c.loc[c['launch'] == 'eager', 'time_s'])} / {_us(c.loc[c['launch'] == device, 'time_s'])}")
             for name, c in variants(at)]
    value = parts[0][1] + " µs" if len(parts) == 1 else " · ".join(f"{name} {times}" for name, times in parts) + " µs"
    notes = [f"at {format_size(size)}, eager / {device}" + (f", {parts[0][0]}" if len(parts) == 1 and parts[0][0] else "")]
    elsewhere = [name for name, _ in variants(data) if name not in {n for n, _ in parts}]
    if elsewhere:
        notes.append(f"not measured at {format_size(size)}: {', '.join(elsewhere)}")
    return Cell(value, notes + _ranks_note(at))


def headline(frame: pd.DataFrame, catalog: Catalog) -> dict[str, dict[str, Cell | None]]:
    """metric label -> series -> its cell (None where that run did not measure it): the suites'
    headline metrics, bandwidth first, for the suites the frame holds."""
    data = with_series(frame)
    series = sorted(data[SERIES].unique())
    metrics = [m for suite in dict.fromkeys(frame["suite"]) for m in view(catalog, suite).headline]
    table = {}
    for metric in sorted(metrics, key=lambda m: m.latency):
        cell = latency_cell if metric.latency else bandwidth_cell
        table[metric.label] = {s: cell(data[data[SERIES] == s], metric, catalog) for s in series}
    return table


# ---------------------------------------------------------------- machine descriptions


def _meta(run_dir: str) -> dict:
    try:
        return read_meta(run_dir)
    except ResultsError:
        return {}


def _gpus(system: dict) -> str:
    gpus = system.get("gpus") or []
    if not gpus:
        return "none (CPU run)"
    first = gpus[0]
    memory = f", {first['memory_bytes'] / 2**30:.0f} GiB" if first.get("memory_bytes") else ""
    return f"{len(gpus)}× {first.get('name', '?')}{memory}"


def _pcie(gpu: dict) -> str:
    if gpu.get("pcie_gen_max") is None:
        return ""
    now = f"Gen{gpu.get('pcie_gen_current')} x{gpu.get('pcie_width_current')}"
    top = f"Gen{gpu.get('pcie_gen_max')} x{gpu.get('pcie_width_max')}"
    return now if now == top else f"{now} now, {top} max"


def _price(instance: dict) -> str:
    if not instance.get("usd_per_hour"):
        return "no public price in the catalogue"
    when = f" ({instance['price_date']})" if instance.get("price_date") else ""
    return f"${instance['usd_per_hour']:.2f}/h on demand{when}"


def machine_facts(meta: dict) -> list[tuple[str, str]]:
    """(name, value) pairs describing a run's machine, versions and command; empty values dropped."""
    system, instance = meta.get("system", {}), meta.get("instance", {})
    gpu = (system.get("gpus") or [{}])[0]
    nvlink = f"{gpu['nvlink_links']} links a GPU" if gpu.get("nvlink_links") else ""
    if instance.get("nvlink_gbps_per_gpu"):
        nvlink += f" ({instance['nvlink_gbps_per_gpu']} GB/s a GPU, one direction, from the catalogue)"
    clocks = ""
    if gpu.get("sm_clock_max_mhz"):
        clocks = f"SM {gpu['sm_clock_max_mhz']} MHz, memory {gpu.get('mem_clock_max_mhz')} MHz (max)"
    wall = ", ".join(f"{k} {v} s" for k, v in (meta.get("suite_wall_s") or {}).items())
    facts = [
        ("GPUs", _gpus(system)), ("PCIe", _pcie(gpu)), ("NVLink", nvlink),
        ("Power limit", f"{gpu['power_limit_w']:.0f} W" if gpu.get("power_limit_w") else ""), ("Clocks", clocks),
        ("CPU", f"{system.get('cpu', '')} ({system.get('cpu_count', '?')} threads)" if system.get("cpu") else ""),
        ("OS", system.get("os", "")), ("Driver", system.get("driver", "")), ("CUDA", system.get("cuda", "")),
        ("torch", system.get("torch", "")), ("NCCL", system.get("nccl", "")), ("Python", system.get("python", "")),
        ("Provider", instance.get("provider") or ""), ("Price", _price(instance)),
        ("Catalogue note", instance.get("note", "")),
        ("Run", f"{meta.get('run_id', '')}, {meta.get('status') or 'status not recorded'}"),
        ("Started", str(meta.get("start_time") or "")), ("Suite wall time", wall),
        ("Command", " ".join(["xferbench", *map(str, meta.get("argv") or [])]) if "argv" in meta else ""),
        ("Skipped", "; ".join(meta.get("skipped_suites") or [])),
        ("Tool", f"{meta.get('tool', {}).get('name', '')} {meta.get('tool', {}).get('version', '')}".strip()),
    ]
    return [(k, str(v)) for k, v in facts if v not in ("", None)]


# ---------------------------------------------------------------- HTML


CSS = """
:root { --ink: #1d2433; --muted: #5b6475; --line: #dde2ea; --soft: #f5f7fa; --accent: #0b6bcb; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--ink); background: #fff; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 32px 64px; }
header { border-bottom: 3px solid var(--accent); padding-bottom: 12px; margin-bottom: 8px; }
h1 { font-size: 28px; margin: 0 0 4px; }
h2 { font-size: 21px; margin: 36px 0 12px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 17px; margin: 20px 0 8px; }
.sub, .note, figcaption { color: var(--muted); font-size: 13.5px; }
nav a { color: var(--accent); margin-right: 16px; text-decoration: none; font-size: 14px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 8px 12px; text-align: left; vertical-align: top; }
thead th { background: var(--soft); font-size: 14px; }
thead th small { display: block; font-weight: normal; color: var(--muted); }
td.value b { font-size: 16px; }
td.value small { display: block; color: var(--muted); font-size: 12.5px; line-height: 1.35; }
td.none { color: #a0a7b4; }
td.flagged b { color: #b3261e; }
table.headline { table-layout: fixed; min-width: 720px; }
th[scope=row] { font-weight: 600; width: 24%; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px;
          vertical-align: -1px; }
ul.caveats li { margin: 4px 0; }
figure { margin: 20px 0 28px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
.machines { display: grid; grid-template-columns: repeat(auto-fit, minmax(360px, 1fr)); gap: 16px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px; background: var(--soft); }
.card h3 { margin-top: 0; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; font-size: 13.5px; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
pre { background: #fff; border: 1px solid var(--line); padding: 8px; font-size: 12px; overflow-x: auto; }
details summary { cursor: pointer; color: var(--accent); font-size: 13.5px; margin-top: 8px; }
tr.left td { color: var(--muted); }
"""


def _esc(value) -> str:
    return html.escape(str(value))


def _hex(colour: tuple) -> str:
    return "#" + "".join(f"{round(255 * c):02x}" for c in colour[:3])


def _series_runs(frame: pd.DataFrame) -> dict[str, str]:
    """series -> its run folder (the first, for a series that is one run)."""
    data = with_series(frame)
    return data.groupby(SERIES)["run_dir"].first().to_dict()


def verdict_cells(frame: pd.DataFrame, catalog: Catalog, shown: int = 4) -> dict[str, Cell]:
    """series -> "is this normal?": the judge's verdict on each of its runs (xferbench-doctor's
    states and result), what is wrong named (the first `shown` lines), and the share judged."""
    data = with_series(frame)
    cells = {}
    for series, rows in data.groupby(SERIES):
        judged = [judge(run_rows, _meta(run_dir), catalog, run_dir=run_dir)
                  for run_dir, run_rows in rows.groupby("run_dir")]
        wrong = [w for j in judged for w in j.wrong()]
        worst = max((j.exit_code() for j in judged), key=lambda c: {0: 0, 3: 1, 1: 2}[c])
        value = ", ".join(wrong) if wrong else {0: "normal", 3: "not enough judged"}[worst]
        flagged = [line for j in judged for line in j.lines()[:-2]]
        notes = flagged[:shown] + ([f"and {len(flagged) - shown} more (xferbench-doctor)"] if len(flagged) > shown else [])
        notes.append(_judged_note(judged))
        cells[series] = Cell(value, notes)
    return cells


def _judged_note(judged: list) -> str:
    """How many of the measured families were judged; the host's own (h2h copies: no machine kind
    sets them) are measured too, and said apart, as the doctor says them."""
    measured = sum(len(j.measured) for j in judged)
    own = sum(len(j.host_own) for j in judged)
    if not measured:
        return f"{own} families the host's own (reported, not judged)" if own else "nothing measured"
    return f"{sum(len(j.judged) for j in judged)} of {measured} families judged" + (
        f" ({own} more the host's own, not judged)" if own else "")


def _headline_html(table: dict, frame: pd.DataFrame, colours: dict, verdicts: dict[str, Cell]) -> str:
    runs = _series_runs(frame)
    gpus = {s: _gpus(_meta(d).get("system", {})) for s, d in runs.items()}
    head = "".join(f'<th><span class="swatch" style="background:{_hex(colours[s])}"></span>{_esc(s)}'
                   f"<small>{_esc(gpus[s])}</small></th>" for s in runs)
    body = []
    for label, cells in table.items():
        tds = "".join(
            f'<td class="value"><b>{_esc(c.value)}</b>{"".join(f"<small>{_esc(n)}</small>" for n in c.notes)}</td>'
            if c else '<td class="none">not measured</td>' for c in (cells[s] for s in runs))
        body.append(f'<tr><th scope="row">{_esc(label)}</th>{tds}</tr>')
    judged = "".join(
        f'<td class="value{" flagged" if verdicts[s].value not in ("normal", "not judged") else ""}">'
        f'<b>{_esc(verdicts[s].value)}</b>{"".join(f"<small>{_esc(n)}</small>" for n in verdicts[s].notes)}</td>'
        for s in runs)
    body.insert(0, f'<tr><th scope="row">is this normal?</th>{judged}</tr>')
    return (f'<div class="scroll"><table class="headline"><thead><tr><th></th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def caveats(frame: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """What a reader must know before trusting a difference: fixed points, then this data's own."""
    chosen = runs[runs["chosen"]]
    notes = [
        "Each column is a single run. Bands and spreads show that run's trials only, not how another "
        "run, another day or another machine of the same kind would differ. Treat differences of a "
        "few percent as noise.",
        "The machines may be shared or virtualised: other tenants' traffic, clocks and placement can "
        "lower a figure, and nothing here controls for them.",
        "Bandwidth cells are the median of eager launches at the largest size measured; a higher figure "
        "at a smaller size is noted as a peak. Latency cells are the median time per op at the smallest "
        "size, eager (the launch path) / on the device (held behind a latch; graph replays for runs "
        "without held points). Where a run measured several variants of a metric, the cell shows each, "
        "named, never the best of them: torch (torch.distributed, what a PyTorch job calls) beside nccl "
        "(NCCL called directly), ce (the copy engines) beside sm (a copy kernel on the SMs), NUMA placements.",
        f"Cache: an on-GPU copy whose source and destination fit in L2 measures the cache, not HBM; "
        f"{CACHE_RULE}, so graph-mode d2d (16 MiB at most) has no HBM figure.",
        "Link shares use theoretical peaks: PCIe from generation × width per direction, NVLink from "
        "the instance catalogue. GB/s means 1e9 bytes per second.",
        "Graph-mode points stop at timing.graph_max_size (16 MiB by default), so peaks use eager points.",
    ]
    for r in chosen.itertuples():
        if r.status not in COMPLETE:
            notes.append(f"{r.instance}/{r.run_id} is {r.status}: some points were never measured.")
    unpriced = sorted(set(frame.loc[pd.to_numeric(frame["usd_per_hour"], errors="coerce").isna(), "instance"]))
    if unpriced:
        notes.append(f"No public price for {', '.join(unpriced)}: no GB/s per dollar for them.")
    left = runs[~runs["chosen"]]
    if len(left):
        notes.append(f"{len(left)} other run(s) were found and left out (see Runs); name them with --runs "
                     "to show them.")
    return notes


def _figures_html(frame: pd.DataFrame, catalog: Catalog) -> str:
    captions: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        return _embedded(render(frame, tmp, catalog, ["png"], captions), captions)


def _scaling_html(frame: pd.DataFrame, catalog: Catalog) -> str:
    """Per run with families at several GPU counts: their figures and each step's efficiency."""
    parts = []
    for series, rows in with_series(frame).groupby(SERIES, sort=False):
        table = scaling_table(rows, catalog)
        if not table.empty:
            parts.append(f"<h3>{_esc(series)}</h3>{format_scaling(table).to_html(index=False, border=0)}")
    if not parts:
        return ('<p class="note">No run shown measured a family at two or more GPU counts: '
                "<code>xferbench suite=scaling</code> does, on a machine of two or more GPUs.</p>")
    return f'<p class="note">{_esc(SCALING_TITLE)}.</p>' + "".join(parts)


def _embedded(paths: list, captions: dict[str, str]) -> str:
    parts = []
    for path in paths:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f'<figure id="fig-{_esc(path.stem)}"><img alt="{_esc(path.stem)}" '
                     f'src="data:image/png;base64,{data}"><figcaption>{_esc(captions.get(path.stem, ""))}</figcaption></figure>')
    return "\n".join(parts)


def _fleet_html(fleets: list[FleetJudgement], catalog: Catalog) -> str:
    """Per machine class with three hosts or more: the fleet's verdict, its nodes not normal, and
    the heat map of every node's families against the fleet (xferbench-doctor --fleet)."""
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, fleet in enumerate(fleets):
            canvas = Canvas(Path(tmp), ["png"], {}, catalog)
            rows = "".join(
                f"<tr><td>{_esc(fleet.name(n))}</td><td>{_esc(n.state)}</td><td>{_esc('; '.join(n.where))}</td>"
                f"<td>{_esc(n.low[0].family + f': {n.low[0].ratio:.2f}x ' + n.low[0].against if n.low else '')}</td>"
                f"<td>{_esc('; '.join(n.causes))}</td></tr>" for n in fleet.ordered() if n.state != NORMAL)
            table = ("<table><thead><tr><th>node</th><th>state</th><th>where</th><th>worst family</th><th>cause</th>"
                     f"</tr></thead><tbody>{rows}</tbody></table>") if rows else ""
            parts.append(f"<h3>{_esc(fleet.machine)}</h3><p class=\"note\">{_esc(fleet.lines()[-1])}. "
                         f"{_esc(fleet.summary())}.</p>{table}"
                         f"{_embedded(heat_map(fleet, canvas, f'fleet-{k}'), canvas.captions)}")
    return "".join(parts)


def _machines_html(frame: pd.DataFrame) -> str:
    cards = []
    for series, run_dir in _series_runs(frame).items():
        meta = _meta(run_dir)
        facts = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in machine_facts(meta))
        topology = ANSI.sub("", meta.get("system", {}).get("topology") or "").strip()
        topo = f"<details><summary>nvidia-smi topo -m</summary><pre>{_esc(topology)}</pre></details>" if topology else ""
        cards.append(f'<div class="card"><h3>{_esc(series)}</h3><dl>{facts or "<dt>meta.json</dt><dd>unreadable</dd>"}'
                     f"</dl><p class=\"note\">{_esc(run_dir)}</p>{topo}</div>")
    return f'<div class="machines">{"".join(cards)}</div>'


def _runs_html(runs: pd.DataFrame) -> str:
    rows = "".join(
        f'<tr class="{"" if r.chosen else "left"}"><td>{_esc(r.instance)}</td><td>{_esc(r.run_id)}</td>'
        f"<td>{_esc(r.status or 'not recorded')}</td><td>{r.suites}</td><td>{r.ops}</td>"
        f"<td>{'shown: ' + _esc(r.why) if r.chosen else 'left out'}</td></tr>"
        for r in runs.sort_values(["instance", "run_id"]).itertuples())
    return ("<table><thead><tr><th>instance</th><th>run</th><th>status</th><th>suites</th><th>ops</th>"
            f"<th>in this report</th></tr></thead><tbody>{rows}</tbody></table>")


def build_report(frame: pd.DataFrame, runs: pd.DataFrame, catalog: Catalog, title: str = "xferbench report",
                 fleets: list[FleetJudgement] = ()) -> str:
    """The whole page for the chosen runs' rows (`frame`) and run_index() of every run found;
    `fleets`: the runs found judged as fleets (a section where there are any)."""
    colours = palette(frame)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    instances = sorted(frame["instance"].unique())
    rule = ("One run per instance: named runs, else the newest complete run among those covering the most "
            "suites and ops (the main sweep).")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_esc(title)}</title><style>{CSS}</style></head>
<body><main>
<header><h1>{_esc(title)}</h1>
<p class="sub">{len(instances)} instance(s): {_esc(', '.join(instances))} · generated {generated} by xferbench
{_esc(bench.__version__)}</p>
<nav><a href="#headline">Headline</a><a href="#caveats">Caveats</a><a href="#scaling">Scaling</a>
<a href="#figures">Figures</a>{'<a href="#fleet">Fleet</a>' if fleets else ""}
<a href="#machines">Machines</a><a href="#runs">Runs</a></nav></header>
<section id="headline"><h2>Headline</h2>{_headline_html(headline(frame, catalog), frame, colours, verdict_cells(frame, catalog))}
<p class="note">{_esc(rule)}</p></section>
<section id="caveats"><h2>Caveats</h2><ul class="caveats">
{"".join(f"<li>{_esc(c)}</li>" for c in caveats(frame, runs))}</ul></section>
<section id="scaling"><h2>Scaling</h2>{_scaling_html(frame, catalog)}</section>
<section id="figures"><h2>Figures</h2>{_figures_html(frame, catalog)}</section>
{f'<section id="fleet"><h2>Fleet</h2>{_fleet_html(list(fleets), catalog)}</section>' if fleets else ""}
<section id="machines"><h2>Machines</h2>{_machines_html(frame)}</section>
<section id="runs"><h2>Runs</h2>{_runs_html(runs)}</section>
</main></body></html>
"""
