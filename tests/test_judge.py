"""Is this normal? bench.analysis.judge, its causes (bench.analysis.causes), the expectation table
(bench.analysis.expected) and the suites' link theory (Suite.expectation).

Each cause rule is checked on recorded facts built as data: meta.json's machine description,
telemetry made by bench.driver.telemetry.summarize() from samples (the format the run records),
NCCL's log lines (the real one-rank H200 log of tests/data/nccl, and two-rank lines built as
tests/test_ncclog.py builds them). The judge runs on committed GPU runs, some with their figures
or meta changed as a fault would change them.
"""
from __future__ import annotations

import copy
import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd

from bench.analysis import causes
from bench.analysis.compare import VARIANT_KEYS
from bench.analysis.expected import Expected, machine_class
from bench.analysis.judge import judge
from bench.analysis.verdicts import INCONSISTENT
from bench.cli.common import catalog
from bench.driver.telemetry import GpuInfo, Recording, Sample, summarize
from bench.importers.nvbandwidth import import_nvbandwidth
from bench.results import load, read_meta
from conftest import ROOT

REF = ROOT / "results" / "reference"
H100 = REF / "h100-x1" / "20261123-040857"
H200X1 = REF / "h200-x1" / "20261126-075737-default-1"
H200X2 = REF / "h200-x2" / "20261123-044635"
ONE_RANK = ROOT / "tests" / "data" / "nccl" / "h200-x1-one-rank.log"
SUITES = catalog()
GiB = 1 << 30


def _key(suite="copy", op="h2d", memory="pinned", mode="", backend="cuda", src="host", dst="cuda:0",
         world_size=1, launch="eager", numa="local") -> dict:
    key = dict(suite=suite, op=op, memory=memory, mode=mode, backend=backend, src=src, dst=dst,
               world_size=world_size, nnodes=1, dtype="uint8", launch=launch, api="", engine="ce", numa=numa,
               params="")
    assert set(key) == set(VARIANT_KEYS)
    return key


NCCL_KEY = _key("collectives", "all_reduce", "", "default", "nccl", "", "", 2)
PEER_KEY = _key("p2p", "uni", "device", "peer", "cuda", "cuda:0", "cuda:1", numa="")


def _meta(links="NV18", p2p=True, env=None, telemetry=None, topology="", **gpu) -> dict:
    gpus = [{"index": i, "name": "NVIDIA H200", "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_width_current": 16,
             "pcie_width_max": 16, "pcie_gen_gpu_max": 5, "nvlink_links": 18, **gpu} for i in range(2)]
    meta = {"system": {"gpus": gpus, "links": {"0,1": links, "1,0": links}, "env": env or {},
                       "p2p_access": [[True, p2p], [p2p, True]], "topology": topology}}
    if telemetry is not None:
        meta["telemetry"] = telemetry
    return meta


def _gpu(mig=(0, 0)) -> GpuInfo:
    return GpuInfo(index=0, name="NVIDIA H200", pcie_gen_max=5, pcie_width_max=16, pcie_gen_gpu_max=5, mig=mig)


def _sample(t, phase, util=0, procs=(), reasons=1, gen=5, width=16) -> Sample:
    return Sample(t=t, phase=phase, gpu=0, util_gpu=util, util_mem=0, procs=tuple(procs), reasons=reasons,
                  pcie_gen=gen, pcie_width=width)


def _telemetry(*samples: Sample, mig=(0, 0), names=None) -> dict:
    return summarize(Recording(gpus=[_gpu(mig)], samples=list(samples), names=names or {}))


def _explain(meta: dict, key: dict, notes=(), run_dir=None, gbps=math.nan, clocks=None) -> list[str]:
    facts = causes.facts(meta, run_dir, clocks)
    return causes.explain(facts, causes.subject(key, facts.links, catalog(), tuple(notes), gbps))


QUIET = _telemetry(_sample(0, "before"), _sample(0.5, "during", util=90, reasons=0), _sample(1, "after"))


# ---- each cause rule --------------------------------------------------------------------------

def test_pcie_link_below_its_generation_and_width_while_busy():
    busy = _telemetry(_sample(0, "before", gen=1), _sample(0.5, "during", util=90, reasons=0, gen=4, width=8),
                      _sample(1, "after", gen=1))   # an idle link at Gen1 is power saving, not a fault
    named = ["GPU 0's PCIe link ran at Gen4 x8 while busy, below its Gen5 x16 (it carries 15.8 GB/s a direction)"]
    assert _explain(_meta(telemetry=busy), _key()) == named
    assert _explain(_meta(telemetry=busy), _key(), gbps=15.0) == named    # it explains a copy at 15 GB/s
    # ... but not one at 27.5 GB/s, which a Gen4 x8 link cannot carry: no false cause
    assert _explain(_meta(telemetry=busy), _key(), gbps=27.5)[0].startswith("no cause found among")
    found = _explain(_meta(telemetry=QUIET), _key())
    assert found == ["no cause found among: the PCIe link's generation and width, where host memory lives (NUMA), "
                     "other processes on the GPU, clock-event reasons, MIG"]


def test_pcie_without_telemetry_reads_the_start_and_the_slot():
    found = _explain(_meta(pcie_gen_current=3, pcie_gen_max=4), _key())
    assert found[0].startswith("GPU 0's PCIe link ran at Gen3 x16 when the run started (an idle link also steps")
    assert found[1] == ("GPU 0's PCIe link runs at Gen4, below the Gen5 the GPU supports: its slot allows at most Gen4 "
                        "(it carries 31.5 GB/s a direction)")
    assert len(found) == 2


def test_host_memory_on_a_remote_numa_node():
    topology = ("\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
                "GPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t32-63\t1\t\tN/A\n")
    meta = _meta(telemetry=QUIET, topology=topology)
    assert _explain(meta, _key(numa="remote")) == ["host memory on a remote NUMA node (numa=remote)"]
    placed = "host memory on NUMA node 1, copying thread on CPUs 32-63"
    assert _explain(meta, _key(numa="none"), [placed]) == ["host memory on NUMA node 1, GPU 0's is node 0"]
    assert _explain(meta, _key(numa="none", dst="cuda:1"), [placed])[0].startswith("no cause found")


def test_peer_access_off():
    found = _explain(_meta(p2p=False, telemetry=QUIET), PEER_KEY)
    assert found == ["peer access between GPU 0 and 1 is off: their traffic is staged through host memory"]
    staged = _explain(_meta(p2p=False, telemetry=QUIET), {**PEER_KEY, "mode": "staged"})
    assert "peer access" not in staged[0]   # staged copies go through the host by design


def test_nccl_variables_that_hold_it_back_named_with_their_values():
    env = {"NCCL_MAX_NCHANNELS": "1", "NCCL_PROTO": "Simple", "NCCL_P2P_DISABLE": "0", "NCCL_NVLS_ENABLE": "0"}
    assert _explain(_meta(env=env, telemetry=QUIET), NCCL_KEY) == [
        "NCCL_MAX_NCHANNELS=1: at most 1 channel(s)", "NCCL_PROTO=Simple: protocols limited to Simple"]
    socket = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket",
              "NCCL_BUFFSIZE": "65536"}
    found = _explain(_meta(env=socket, telemetry=QUIET), {**NCCL_KEY, "mode": "socket"})
    assert found[0] == "NCCL_BUFFSIZE=65536: buffers of 65536 bytes"
    assert found[1].startswith("collectives.transport=socket sets NCCL_P2P_DISABLE") and "on purpose" in found[1]
    assert len(found) == 2


def _info(pid: int, msg: str) -> str:
    return f"vm:{pid}:{pid + 40} [0] NCCL INFO {msg}"


def _two_ranks(tmp_path, via: str):
    """NCCL 2.28's lines of two ranks on GPUs 0 and 1 (test_ncclog.py's format), in RUN/ranks/."""
    ranks = tmp_path / "ranks"
    ranks.mkdir(parents=True)
    for rank, pid in enumerate((1001, 1002)):
        lines = [_info(pid, "NCCL version 2.28.9+cuda13.0"),
                 _info(pid, f"ncclCommInitRankConfig comm 0x{pid}aa rank {rank} nranks 2 cudaDev {rank} nvmlDev "
                            f"{rank} busId {rank + 6}0 commId 0x5ae77eb5ea4ec1ee - Init START")]
        lines += [_info(pid, f"Channel {ch:02d}/0 : {rank}[{rank}] -> {1 - rank}[{1 - rank}] via {via}") for ch in (0, 1)]
        (ranks / f"rank-{rank}.log").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_the_transport_nccl_used_from_its_log(tmp_path):
    shm = _two_ranks(tmp_path / "shm", "SHM/direct/direct")
    assert _explain(_meta(telemetry=QUIET), NCCL_KEY, run_dir=shm) == ["NCCL went through SHM between GPU 0 and 1"]
    p2p = _two_ranks(tmp_path / "p2p", "P2P/CUMEM/read")
    assert _explain(_meta(telemetry=QUIET), NCCL_KEY, run_dir=p2p)[0].startswith("no cause found among: peer access, "
                                                                                 "NCCL's environment, the transport")
    # No peer to connect to: the real one-rank log names no transport.
    one = tmp_path / "one"
    (one / "ranks").mkdir(parents=True)
    shutil.copy(ONE_RANK, one / "ranks" / "rank-0.log")
    found = _explain(_meta(telemetry=QUIET), {**NCCL_KEY, "world_size": 1}, run_dir=one)
    assert found[0].startswith("no cause found among: NCCL's environment, other processes")
    assert found == _explain(_meta(telemetry=QUIET), {**NCCL_KEY, "world_size": 1})
    # Without a log, the rule says the run did not record it.
    assert "not recorded in this run: the transport NCCL used" in _explain(_meta(telemetry=QUIET), NCCL_KEY)[0]


def test_the_pairs_topology_class():
    assert _explain(_meta(links="PHB", telemetry=QUIET), PEER_KEY)[0] == \
        "GPU 0 and 1 cross the PCIe host bridge (PHB), not NVLink"
    assert _explain(_meta(links="SYS", telemetry=QUIET), NCCL_KEY)[0] == \
        "GPU 0 and 1 cross the link between CPU sockets (SYS), not NVLink"


def test_another_process_on_the_gpu_with_utilization_before_and_after():
    stranger = (4242, 2 * GiB, False)
    seen = _telemetry(_sample(0, "before", util=85, procs=[stranger]),
                      _sample(0.5, "during", util=99, reasons=0, procs=[(7, GiB, True), stranger]),
                      _sample(1.0, "after", util=3), names={4242: "python3"})
    assert _explain(_meta(telemetry=seen), _key()) == [
        "another process on GPU 0: pid 4242 (python3), seen 0-0.5 s into the run, up to 2GiB; GPU utilization "
        "85% before the run, 3% after"]


def test_clock_event_reasons_count_only_above_what_healthy_runs_show():
    d2d = _key(op="d2d", memory="device", src="cuda:0", numa="")
    held = _telemetry(_sample(0, "before"), _sample(0.5, "during", util=90, reasons=0x4),
                      _sample(1, "during", util=90, reasons=0x4 | 0x40), _sample(1.1, "during", util=90, reasons=0x4),
                      _sample(1.5, "after"))   # sw power cap in every busy sample, hw thermal in a third
    # healthy H200 hosts show sw power cap in up to 38% of samples: 100% is more, hw thermal never
    healthy = {"sw power cap": 0.38}
    assert _explain(_meta(telemetry=held), d2d, clocks=healthy) == [
        "GPU 0's clocks were held down during the run: sw power cap in 100% of samples (healthy runs of this class: "
        "up to 38%), hw thermal in 33% of samples (healthy runs of this class: up to 0%)"]
    # as often as healthy runs show it: no cause
    usual = {"sw power cap": 1.0, "hw thermal": 0.3}
    assert _explain(_meta(telemetry=held), d2d, clocks=usual)[0].startswith("no cause found among")
    # a class with no healthy run to say: only a reason in more than half the samples
    assert _explain(_meta(telemetry=held), d2d) == [
        "GPU 0's clocks were held down during the run: sw power cap in 100% of samples"]
    assert set(causes.healthy_clocks("h200 pcie5x16 nvlink0 x1")) >= {"sw power cap"}   # clocks.csv, shipped


def test_mig_on():
    on = _telemetry(_sample(0, "before"), _sample(0.5, "during", util=90, reasons=0), mig=(1, 1))
    assert _explain(_meta(telemetry=on), _key()) == ["MIG is on for GPU 0: the run had a slice of it"]


def test_no_cause_says_what_the_run_did_not_record():
    assert _explain(_meta(), _key()) == [
        "no cause found among: the PCIe link's generation and width, where host memory lives (NUMA) (not recorded "
        "in this run: other processes on the GPU, clock-event reasons, MIG)"]


# ---- the judge --------------------------------------------------------------------------------

def _slowed(rows: pd.DataFrame, factor: float, from_size: int = 1 << 20, **where) -> pd.DataFrame:
    """The rows with the matching points `factor` times slower from `from_size` on."""
    rows = rows.copy()
    hit = rows["size_bytes"] >= from_size
    for column, value in where.items():
        hit &= rows[column] == value
    rows.loc[hit, "time_s"] *= factor
    rows.loc[hit, ["algbw_gbps", "busbw_gbps"]] /= factor
    return rows


H2D = dict(op="h2d", memory="pinned", engine="ce", launch="eager", dst="cuda:0")


def test_a_second_process_copying_halves_h2d_and_is_named():
    meta = read_meta(H200X1)
    meta["telemetry"] = _telemetry(_sample(0, "before", util=40, procs=[(4242, GiB, False)]),
                                   _sample(0.5, "during", util=99, reasons=0, procs=[(4242, GiB, False)]),
                                   _sample(1, "after", util=0), names={4242: "copier"})
    got = judge(_slowed(load(H200X1), 2.0, **H2D), meta, SUITES, run_dir=H200X1)
    (low,) = got.low
    assert low.family == "copy h2d pinned eager ce numa=local host->cuda:0 (bandwidth-bound)"
    assert 0.45 < low.ratio < 0.55 and low.unit == "GB/s"
    assert low.source == "reference h200-x1, 6 healthy runs"   # from three hosts: no fewer said
    assert low.causes[0].startswith("another process on GPU 0: pid 4242 (copier)")
    line = got.lines()[0]
    assert line.startswith(f"LOW  {low.family}: 0.5") and "another process on GPU 0" in line
    data = json.loads(json.dumps(got.to_json(), default=str))
    assert data["verdict"] == "not normal" and data["exit_code"] == 1 and data["wrong"] == ["1 low"]


def test_a_slowdown_at_the_plateau_alone_is_low():
    """As a second process copying showed on nvidia-h200: h2d at 4 MiB slipped through at 50 GB/s
    while 1 GiB fell to 27; the smaller bandwidth-bound sizes must not outvote the plateau."""
    got = judge(_slowed(load(H200X1), 2.0, from_size=64 << 20, **H2D), read_meta(H200X1), SUITES, run_dir=H200X1)
    (low,) = got.low   # the plateau (sizes within 90% of the peak rate) has the slowed half: its median is low
    assert low.family == "copy h2d pinned eager ce numa=local host->cuda:0 (bandwidth-bound)" and low.ratio < 0.75


def test_a_healthy_run_in_its_own_table_has_nothing_wrong():
    run = ROOT / "results" / "reference" / "h200-x4" / "x4l-default-1"
    got = judge(load(run), read_meta(run), SUITES, run_dir=run, planned=set())
    assert not got.wrong() and not got.high and got.judged_share >= 0.9 and got.exit_code() == 0
    # what is left unjudged says why: held staged copies (their hand-off's two paces), pageable copies
    noisy = got.state("too noisy")   # and SM peer copies, which the class's hosts move apart
    assert all("staged held" in v.family or "pageable" in v.family or "eager sm" in v.family for v in noisy)
    assert all(v.limit < 0.55 for v in noisy)
    # before pace readings too: launch paths judged against the spread between hosts, moods and all
    old = judge(load(H200X2), read_meta(H200X2), SUITES, run_dir=H200X2, planned=set())
    assert not old.wrong() and old.exit_code() == 0
    paths = [v for v in old.verdicts if v.family.endswith("(launch path)")]
    assert len(paths) >= 20 and all(v.noise.startswith("launch paths between") for v in paths)
    assert got.lines()[-2].startswith(f"verdict: {len(got.verdicts)} families: {len(got.judged)} normal; judged "
                                      f"{len(got.judged)} of {len(got.measured)} measured")
    data = got.to_json()
    assert data["verdict"] in ("normal", "not enough judged") and len(data["families"]) == len(got.verdicts)
    assert data["machine"] == "h200 pcie5x16 nvlink18 x4" and data["missing"] == []
    assert all(re.match(r"measured between|launch paths between|between \d+ hosts|its role's GPUs or pairs", v.noise)
               for v in got.verdicts if v.verdict != "not judged" and "host's own" not in v.reason)


def test_an_unknown_gpu_is_judged_by_its_own_links_and_what_the_other_classes_reach():
    meta = read_meta(H200X1)
    meta["system"]["gpus"][0]["name"] = "NVIDIA H300"   # no reference for this class
    got = judge(load(H200X1), meta, SUITES, run_dir=H200X1)
    judged = {v.family: v for v in got.judged}
    h2d = judged["copy h2d pinned eager ce numa=local host->cuda:0 (bandwidth-bound)"]
    assert h2d.verdict == "normal" and h2d.source.startswith("theory: PCIe Gen5 x16 = 63 GB/s x 0.8")
    assert "(5 other classes: h100 pcie5x16 nvlink0 x1, h100 pcie5x16 nvlink18 x2, h200 pcie5x16 nvlink0 x1" in h2d.source
    # a latency by the time the other classes take; its noise how far they differ, never measured here
    latency = [v for v in got.verdicts if v.size_class == "latency"]
    assert latency and all(v.source.startswith("the time 5 other classes") or v.verdict == "too noisy"
                           for v in latency)
    assert all(v.noise.startswith("launch paths between hosts" if v.family.endswith("(launch path)") else
                                  "never measured on this class") for v in got.verdicts if v.noise)
    slow = judge(_slowed(load(H200X1), 1.5, **H2D), meta, SUITES, run_dir=H200X1)
    assert [v.family for v in slow.low] == [h2d.family]


def test_a_pair_below_its_siblings_is_an_outlier_without_a_reference(tmp_path):
    run = import_nvbandwidth([ROOT / "tests" / "data" / "nvbandwidth_h200x4.json"], tmp_path / "nvb", 512 << 20)
    meta = read_meta(run)
    assert not machine_class(meta).complete   # no PCIe or NVLink recorded: no reference, no theory
    got = judge(load(run), meta, SUITES, run_dir=run)
    (low,) = got.low
    assert low.family == "p2p uni device write eager ce cuda:1->cuda:3 (bandwidth-bound)"
    assert low.source == "siblings: median of 11 pairs" and 0.55 < low.ratio < 0.7


def test_above_what_the_recorded_link_carries_is_inconsistent():
    meta = read_meta(H100)
    meta["system"]["gpus"][0]["memory_bus_width"] = 5120   # 3352 GB/s of HBM: 1676 GB/s copied
    got = judge(load(H100), meta, SUITES, run_dir=H100)
    # the graph-mode d2d copies (up to 16 MiB: 2164 GB/s) are the L2's, rightly above HBM
    assert not got.state("inconsistent") and not got.low
    meta["system"]["gpus"][0]["memory_bus_width"] = 2560   # a recorded HBM of 838 GB/s copied
    got = judge(load(H100), meta, SUITES, run_dir=H100)
    (odd,) = got.state("inconsistent")
    assert odd.family == "copy d2d device eager ce cuda:0->cuda:0 (bandwidth-bound)" and odd.at_size >= 256 << 20
    assert odd.causes == ["1500 GB/s is more than HBM, read and write carries (838 GB/s): the record or the figure "
                          "is wrong"]
    assert got.lines()[0].startswith("INCONSISTENT copy d2d") and got.exit_code() == 1


def test_verdicts_of_a_run_with_nothing_measured():
    got = judge(load(H200X1).iloc[:0], read_meta(H200X1), SUITES, planned=set())
    assert got.lines() == ["verdict: nothing measured to judge",
                           "result: not normal (xferbench-doctor exits 1): nothing measured"]
    assert got.to_json()["verdict"] == "not normal" and got.exit_code() == 1


# ---- the suites' link theory and the table -------------------------------------------------

def _row(**values) -> dict:
    base = {**_key(), "size_bytes": GiB, "pcie_gen": 5, "pcie_width": 16, "nvlink_gbps_per_gpu": 450.0,
            "link_class": "", "hbm_gbps": math.nan}
    return {**base, **values}


def test_link_theory_per_suite():
    copy_, p2p, coll = SUITES["copy"], SUITES["p2p"], SUITES["collectives"]
    gbps, share, link = copy_.expectation(_row())
    assert (round(gbps, 1), share, link) == (63.0, 0.87, "PCIe Gen5 x16")
    assert math.isnan(copy_.expectation(_row(size_bytes=4096))[1])            # below the plateau
    assert math.isnan(copy_.expectation(_row(memory="pageable"))[1])          # the host's memcpy
    assert math.isnan(copy_.expectation(_row(dst="all", world_size=8))[1])    # every GPU at once
    assert round(copy_.expectation(_row(dst="all", world_size=8))[0]) == 504
    assert copy_.expectation(_row(op="d2d", memory="device", src="cuda:0")) is None   # HBM not recorded
    assert copy_.expectation(_row(op="d2d", memory="device", src="cuda:0", hbm_gbps=4917.0))[:2] == (2458.5, 0.85)
    peer = _row(**PEER_KEY, link_class="NV18")
    assert p2p.expectation(peer) == (450.0, 0.86, "NVLink (NV18)")
    assert p2p.expectation({**peer, "link_class": "NV4"})[0] == 100.0
    phb = p2p.expectation({**peer, "link_class": "PHB"})
    assert round(phb[0]) == 63 and math.isnan(phb[1])
    assert p2p.expectation({**peer, "mode": "staged", "link_class": ""})[1] == 0.43
    assert coll.expectation(_row(**NCCL_KEY)) == (450.0, 0.74, "NVLink")
    assert math.isnan(coll.expectation(_row(**NCCL_KEY, size_bytes=16 << 20))[1])
    assert coll.expectation(_row(**{**NCCL_KEY, "world_size": 1})) is None
    assert SUITES["pipeline"].expectation(_row(suite="pipeline")) is None


def test_the_shipped_table_is_what_the_script_makes(tmp_path):
    import subprocess
    import sys

    from conftest import env

    out = tmp_path / "expected.csv"
    made = ["--out", str(out), "--clocks", str(tmp_path / "clocks.csv"), "--paces", str(tmp_path / "paces.csv")]
    proc = subprocess.run([sys.executable, "scripts/make_expected.py", *made], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("expected.csv", "clocks.csv", "paces.csv"):
        shipped = ROOT / "bench" / "analysis" / name
        assert (tmp_path / name).read_text() == shipped.read_text(), f"{shipped} is stale: run scripts/make_expected.py"
    used = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("used ")]
    newest = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("used ") and " for " not in line]
    newest_parts = {line[len("used "):] for line in proc.stdout.splitlines()
                    if line.startswith("used ") and " for " not in line}
    assert "results/reference/h200-x4/x4l-default-1" in newest and "results/reference/h200-x1/x1c-default-2" in newest
    # one method's runs pool across commits (results/reference/methods.json); another method's are left out
    assert {"results/reference/h200-x2/x2p-default-1", "results/reference/h200-x2/x2q-default-1"} <= set(newest)
    # held-3 and held-4 changed held collectives alone: held-2's runs count for copy, p2p and the
    # eager and graph collectives, not for held ones, and older versions give the roles the newest lacks
    x2i = "results/reference/h200-x2/x2i-default-1"
    assert {f"{x2i} (copy)", f"{x2i} (p2p)", f"{x2i} (collectives eager+graph)"} <= newest_parts
    assert f"{x2i} (collectives held)" not in newest_parts
    assert "results/reference/h200-x2/x2a-default-1" in set(used) - set(newest)
    assert "results/reference/h200-x4/x4a-default-1" not in used
    # an older version's runs, for the roles the newest does not measure (graph launches)
    assert "results/reference/h200-x4/20261126-083243-default-5" in set(used) - set(newest)
    assert "results/reference/h200-x1/20261122-212837" not in used   # schema 1
    assert not any("/noise/" in run or "/faults/" in run for run in used)   # held out, and the faults
    table = Expected.read()
    assert set(table.origins) == {"h100 pcie5x16 nvlink0 x1", "h200 pcie5x16 nvlink0 x1", "h200 pcie5x16 nvlink18 x2",
                                  "h200 pcie5x16 nvlink18 x4", "h100 pcie5x16 nvlink18 x2"}
    runs = table.classes().set_index("machine")   # each class says what it stands on
    assert runs.loc["h200 pcie5x16 nvlink18 x4", "runs"] == 19 and runs.loc["h100 pcie5x16 nvlink0 x1", "runs"] == 1
    # two runs of one host are one host, with no spread between hosts; three hosts have one
    assert tuple(runs.loc["h200 pcie5x16 nvlink18 x4", ["runs", "hosts"]]) == (19, 11)
    assert tuple(runs.loc["h100 pcie5x16 nvlink18 x2", ["runs", "hosts"]]) == (6, 3)
    assert tuple(runs.loc["h200 pcie5x16 nvlink0 x1", ["runs", "hosts"]]) == (6, 3)
    assert runs.loc["h100 pcie5x16 nvlink0 x1", "hosts"] == 1
    by_class = table.frame.groupby("machine")["host_spread"]
    assert by_class.count()["h100 pcie5x16 nvlink0 x1"] == 0 and by_class.count()["h200 pcie5x16 nvlink18 x4"] > 100
    # held-4 split the collectives: its runs make a table of their own generation, on three hosts,
    # and held-3's stays, with the roles older versions gave it; copies of held-4 runs pool with held-2's
    x2ad = "results/reference/h200-x2/x2ad-default-1"
    assert {f"{x2ad} (collectives held)", f"{x2ad} (copy)"} <= newest_parts and f"{x2i} (copy)" in newest_parts
    roles = table.roles()
    for machine, stands_on, eager in (("h200 pcie5x16 nvlink18 x2", [13, 6], [27, 13]),
                                      ("h200 pcie5x16 nvlink18 x4", [11, 7], [19, 11])):
        held = roles[(roles["machine"] == machine) & (roles["suite"] == "collectives")]
        assert set(held["generation"]) == {"", "held-4"}
        assert held[held["generation"] == "held-4"][["runs", "hosts"]].min().tolist() == stands_on
        # their eager collectives pool with every earlier method's since held-2 (changed_launches)
        assert held[held["generation"] == ""][["runs", "hosts"]].max().tolist() == eager


def _relabelled(run: Path, method: str, tmp_path: Path) -> Path:
    copied = tmp_path / run.name
    shutil.copytree(run, copied)
    meta = json.loads((copied / "meta.json").read_text())
    meta["tool"]["method"] = method
    (copied / "meta.json").write_text(json.dumps(meta))
    return copied


def test_a_run_is_judged_by_the_table_of_its_own_generation(tmp_path):
    # held-4's held collectives read up to 1.46x held-3's: judged by held-3's table they would be
    # inconsistent, and held-3's runs judged by held-4's low
    held4 = ROOT / "results" / "reference" / "h200-x2" / "x2ad-default-1"
    held3 = ROOT / "results" / "heldout" / "h200-x2" / "0deb3bf538b8" / "x2u-default-1"
    for run, method in ((held4, "held-4"), (held3, "held-3")):
        assert json.loads((run / "meta.json").read_text())["tool"]["method"] == method
        got = judge(load(run), read_meta(run), SUITES, None, run)
        assert not got.low and not got.state(INCONSISTENT), [v.family for v in got.low + got.state(INCONSISTENT)]
    as_older = _relabelled(held4, "held-3", tmp_path)
    older = judge(load(as_older), read_meta(as_older), SUITES, None, as_older)
    wrong = {v.key["op"] for v in older.state(INCONSISTENT) if v.key["suite"] == "collectives" and v.key["launch"] == "held"}
    assert len(wrong) >= 5 and "sendrecv" not in wrong
    as_newer = _relabelled(held3, "held-4", tmp_path)
    newer = judge(load(as_newer), read_meta(as_newer), SUITES, None, as_newer)
    assert any(v.key["suite"] == "collectives" and v.key["launch"] == "held" for v in newer.low)
    # the copies' generation is one: the relabelling moves none of them
    assert not [v for v in older.low + older.state(INCONSISTENT) + newer.low + newer.state(INCONSISTENT) if v.key["suite"] != "collectives"]


def test_a_baseline_table_takes_precedence_for_its_class():
    shipped = Expected.read()
    mine = Expected(shipped.frame[shipped.frame["machine"] == "h100 pcie5x16 nvlink0 x1"].assign(
        time_s=lambda f: f["time_s"] * 0.5), origin="baseline mine")
    merged = mine.over(shipped)
    assert merged.origins["h100 pcie5x16 nvlink0 x1"] == "baseline mine"
    assert merged.origins["h200 pcie5x16 nvlink18 x2"] == "reference"
    got = judge(load(H100), read_meta(H100), SUITES, merged, H100)
    assert got.low and all(v.source.startswith("baseline mine h100-x1") for v in got.low)
    copy.deepcopy(got.to_json())



def test_a_methods_split_parts_the_launches_it_names_from_the_runs_before_it():
    from bench.methods import generation, method_of
    splits = SUITES["collectives"].splits
    assert [generation(m, splits, "held") for m in ("held-2", "held-3", "held-4", None, "0eb39c7")] == \
        ["", "", "held-4", "", ""]
    assert generation("held-4", splits, "eager") == "" and generation("held-4", SUITES["copy"].splits, "held") == ""
    # a method that changed the collectives alone leaves a copy of its run at the method before
    assert method_of("held-4", SUITES["copy"].methods) == "held-2"
    assert method_of("held-4", SUITES["collectives"].methods) == "held-4"
    assert method_of("held-3", SUITES["collectives"].methods) == "held-3"
    # held-3 and held-4 changed held collectives alone: the eager and graph figures of their runs
    # pool with held-2's
    from bench.methods import launch_groups
    collectives = SUITES["collectives"]
    groups = launch_groups(collectives.changed_launches, ("eager", "held", "graph"))
    assert groups == [("held",), ("eager", "graph")] and launch_groups({}, ("eager", "held")) == [None]
    assert [method_of(m, collectives.methods, collectives.changed_launches, group)
            for m in ("held-3", "held-4") for group in groups] == ["held-3", "held-2", "held-4", "held-2"]
