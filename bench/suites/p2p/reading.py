"""The p2p suite's reading face: what its rows mean (noise, shares of link theory, headline rows)
and its tables: pair matrices of peak GB/s and every GPU with one GPU at once."""
from __future__ import annotations

import math

from bench import lazy
from bench.analysis.tables import CONCURRENT_COLUMNS, format_concurrent, latency_table, median_by
from bench.links import NVLINK_LINK_GBPS, nvlink_links, pcie_gbps
from bench.points import ALL, AT_ONCE_KEYS
from bench.results import params_text, usable_rows
from bench.suite_view import RERUN, Metric, SuiteView
from bench.suites.p2p.ops import OPS as DECLARED
from bench.suites.p2p.settings import CONCURRENT_OPS, HELD_STAGING, PAIR_OPS

np = lazy.module("numpy")
pd = lazy.module("pandas")


def peak_table(frame: pd.DataFrame, by: list[str] = ()) -> pd.DataFrame:
    """Per (by..., op, mode, src, dst): the peak over sizes of the per-size median GB/s of pair ops
    (uni, bidir); SM copies get matrices of their own, their mode named 'peer sm'."""
    ok = usable_rows(frame)
    ok = ok[(ok.suite == P2PView.name) & ok.algbw_gbps.notna() & ok.op.isin(PAIR_OPS)]
    ok = ok.assign(mode=ok["mode"].where(ok["engine"] != "sm", ok["mode"] + " sm"))
    keys = [*by, "op", "mode", "src", "dst"]
    medians = ok.groupby(keys + ["size_bytes"], sort=False).algbw_gbps.median()
    return medians.groupby(level=keys, sort=False).max().reset_index()


def matrices(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """'op mode' -> src x dst table of peak GB/s (max over sizes of the per-size median)."""
    peaks = peak_table(frame)
    return {f"{op} {mode}": group.pivot(index="src", columns="dst", values="algbw_gbps").round(1)
            for (op, mode), group in peaks.groupby(["op", "mode"], sort=False)}


def concurrent_table(frame: pd.DataFrame, by: list[str] = ()) -> pd.DataFrame:
    """all_to_one / one_to_all, long form: the traffic into or out of each GPU at the largest size.
    xferbench names the one GPU in dst (all_to_one) or src (one_to_all), part total; nvbandwidth's
    import names it in part, src and dst being 'all'."""

    by = list(by)
    ok = frame[(frame.status == "ok") & frame.algbw_gbps.notna()]
    peer = ok[(ok.suite == P2PView.name) & ok.op.isin(CONCURRENT_OPS)]
    imported = ((peer.src == ALL) & (peer.dst == ALL)).to_numpy()
    part_total, part_gpu = (peer.part == "total").to_numpy(), peer.part.str.startswith("cuda:").to_numpy()
    peer = peer[(~imported & part_total) | (imported & part_gpu)]
    rows = []
    for keys, group in peer.groupby(by + AT_ONCE_KEYS, sort=False):
        size = group.size_bytes.max()
        at = group[group.size_bytes == size]
        one = np.where((at.src == ALL) & (at.dst == ALL), at.part, np.where(at.op == "all_to_one", at.dst, at.src))
        base = {**dict(zip(by + AT_ONCE_KEYS, keys)), "size_bytes": size, "when": "at once"}
        rows += [{**base, "gpu": gpu, "gbps": v} for gpu, v in median_by(at, one).items()]
    return pd.DataFrame(rows, columns=[*by, *CONCURRENT_COLUMNS])


RINGED = params_text(HELD_STAGING)   # the params of a held staged copy's point
DIRECT = (("mode", ("peer", "read", "write")), ("world_size", ("1",)))   # nvbandwidth's peer copies: read or write
PLATEAU = 256 << 20   # where the reference curves level off (within 2% of their 1 GiB figure)


class P2PView(SuiteView):
    name = "p2p"
    # Between-run sigma of log time (scripts/noise_study.py): 3 identical runs on nvidia-h200-x2
    # (results/noise/h200-x2); latency-bound, the trials read at the host's usual pace moved 0.02
    # to 0.06 between four identical runs of one 4x H200 host (results/noise/h200-x4/identical).
    # The launch path (eager at latency-bound sizes; analysis/noise.py): as the copy suite's, which
    # covers the 2x its eager 4 KiB copies move between runs of one 4x H200 host (docs/plots-and-gate.md).
    # Between two runs (the gate) wider: the two runs of 4x H200 host f822432dca49 (results/heldout),
    # at its usual pace, moved three 4 KiB launch paths 2.8-3.0x, the most of 1,661 same-host pairs of
    # p2p launch paths. The fleet keeps 0.16: at 0.19 a halved launch path would pass it.
    # Staged and held, method held-1's hand-off between the GPUs (torch's events) ran at one of two
    # paces, trial by trial (docs/method.md): between-run sigma 0.19 over the held staged 16 and
    # 64 KiB points of its default sweeps of nvidia-h200-x2 and -x4 (the two paces 1.7x apart).
    # held-2's flag in host memory holds its pace, and no class's table holds held-1's staged figures
    # any more; the declared sigma stays while held-out runs of held-1 are judged (docs/judging.md).
    # Round a ring of slots (HELD_STAGING) a held staged copy holds from process to process as the
    # other held copies do (docs/method.md): their sigma, and the staged copies' at larger sizes.
    # Staged, a copy goes through the host's memory, whose traffic moves between identical runs of
    # one host by up to 15% as the copy suite's every-GPU traffic does: 0.88x and 1.01x of a 4x H200
    # fleet's median in two runs of one host (results/noise/h200-x4/identical, bidir at 256 MiB).
    noise = {("gpu", "latency"): 0.07, ("gpu", "bandwidth"): 0.009, ("gpu", "launch"): 0.16,
             ("gpu", "launch", RERUN): 0.19, ("gpu", "bandwidth", "staged"): 0.05,
             ("gpu", "bandwidth", "staged", "held"): 0.19, ("gpu", "latency", "staged", "held"): 0.19,
             ("gpu", "latency", "staged", "held", RINGED): 0.07, ("gpu", "bandwidth", "staged", "held", RINGED): 0.05}
    ops = DECLARED
    headline = (
        Metric("P2P one way, peer", "p2p", "uni", DIRECT),
        Metric("P2P both ways, peer (sum)", "p2p", "bidir", DIRECT),
    )

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
        out = [(f"p2p {name}: peak GB/s, rows src, columns dst", matrix.fillna("-"))
               for name, matrix in matrices(frame).items()]
        concurrent = concurrent_table(frame)
        if not concurrent.empty:
            out.append(("every GPU with one GPU at once: GB/s into or out of the one GPU", format_concurrent(concurrent)))
        latency = latency_table(frame[frame.suite == self.name], [o.name for o in self.ops if not o.bandwidth])
        if not latency.empty:
            out.append(("peer link latency: ns per dependent 8-byte load by dst's SMs of memory on src", latency))
        return out

    def figures(self, frame: pd.DataFrame, canvas) -> list:
        # figures load matplotlib: imported when one is drawn, not by a measuring run
        from bench.analysis.figures import bars, matrix

        paths = matrix.heatmaps(peak_table(frame, [canvas.SERIES]), canvas, "p2p_heatmap",
                                "P2P peak bandwidth, {series}\nGB/s, the highest per-size median over sizes")
        return paths + bars.concurrent(concurrent_table(frame, [canvas.SERIES]), canvas, "concurrent_p2p",
                                       "Every GPU with one GPU at once: GB/s into or out of it")

    def link_limit(self, row) -> tuple[float, str]:
        both = 2 if row["op"] == "bidir" else 1
        if row["mode"] == "staged":
            return pcie_gbps(row["pcie_gen"], row["pcie_width"]) * both, "PCIe"
        return pd.to_numeric(row["nvlink_gbps_per_gpu"], errors="coerce") * both, "NVLink"

    def expectation(self, row) -> tuple[float, float, str] | None:
        if row["op"] == "latency":
            return None
        both = 2 if row["op"] == "bidir" else 1
        mode = "staged" if row["mode"] == "staged" else "peer"   # imported: nvbandwidth's read and write
        share = self.op(row["op"]).share(mode, row["engine"])
        share = share if int(row["size_bytes"]) >= PLATEAU else math.nan
        pcie = pcie_gbps(row["pcie_gen"], row["pcie_width"]) * both
        pcie_name = f"PCIe Gen{int(row['pcie_gen'])} x{int(row['pcie_width'])}" if pcie > 0 else ""
        if mode == "staged":
            return (pcie, share, f"{pcie_name}, staged through host memory") if pcie > 0 else None
        pair = str(row.get("link_class") or "")
        links = nvlink_links(pair)
        if links:
            return links * NVLINK_LINK_GBPS * both, share, f"NVLink ({pair})"
        if pair:   # two GPUs joined by PCIe (PIX, PXB, PHB, NODE, SYS): no measured share
            return (pcie, math.nan, f"{pcie_name} ({pair})") if pcie > 0 else None
        gbps, _ = self.link_limit(row)   # every GPU with one GPU, or a pair not recorded: its NVLink
        return (float(gbps), share, "NVLink") if gbps > 0 else None
