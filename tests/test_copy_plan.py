"""Whole-machine traffic without GPUs: which GPUs, sizes, engines and NUMA placements the copy and
p2p suites plan (fake topologies as data), the timing pieces that need no device, and the summary
and figure of concurrent traffic."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from bench import ConfigError, suites
from bench.analysis.tables import format_summary, latency_table, summarize
from bench.cli.common import catalog
from bench.driver.schema import to_config
from bench.measure import kernels, lanes, numa
from bench.measure.timing import TimingConfig, Trial
from bench.results import Sample, point_key
from bench.sizes import machine_sizes, sweep
from bench.suites.copy import points as copy_sweep, reading as copy_reading
from bench.suites.p2p import points as p2p_sweep, reading as p2p_reading
from bench.contract import Context

MiB, GiB = 1 << 20, 1 << 30
SIZES = sweep("4KiB", "1GiB", 2)
ONE_NODE = numa.Topology({0: numa.Node(0, frozenset(range(8)), {0: 10})})
TWO_SOCKETS = numa.Topology({0: numa.Node(0, frozenset(range(0, 8)), {0: 10, 1: 21}),
                             1: numa.Node(1, frozenset(range(8, 16)), {0: 21, 1: 10})})


def config(**overrides):
    """The typed config, as a run gets it, with `copy.gpus=[0]`-style dotted overrides."""
    return to_config(OmegaConf.from_dotlist([f"{k}={v}" for k, v in overrides.items()]))


COPY, P2P = suites.get("copy"), suites.get("p2p")


def copy_points(cfg, ctx: Context) -> list:
    return COPY.points(cfg.copy, ctx)


def p2p_points(cfg, ctx: Context) -> list:
    return P2P.points(cfg.p2p, ctx)


def context(gpus: int, topo=ONE_NODE, nodes=None, sizes=SIZES) -> Context:
    """A machine of `gpus` GPUs on NUMA nodes `nodes` of `topo` (the copy suite places host
    buffers for the modes its settings name)."""
    return Context("cuda", TimingConfig(), sizes, gpu_count=gpus, launches=("eager", "graph"),
                   graph_max_bytes=16 * MiB, numa=topo, gpu_nodes=tuple(nodes if nodes is not None else [0] * gpus))


# ---------------------------------------------------------------- settings


@pytest.mark.parametrize("value, message", [
    ("[each,sideways]", "copy.gpus: 'sideways' is not each, all or a GPU index"),
    ("[-1]", "copy.gpus: '-1' is not each, all or a GPU index"),
    ("[]", "copy.gpus is empty")])
def test_bad_gpus_are_one_line(value, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        config(**{"copy.gpus": value})


def test_gpu_selection():
    assert copy_sweep.select_gpus(["each", "all"], 4) == copy_sweep.Selection((0, 1, 2, 3), (4,))
    assert copy_sweep.select_gpus(["each", "all"], 1) == copy_sweep.Selection((0,), ())  # nothing to run at once
    assert copy_sweep.select_gpus(["2", "0", "each"], 3) == copy_sweep.Selection((2, 0, 1), ())  # listed order, once each
    assert copy_sweep.select_gpus(["all"], 2) == copy_sweep.Selection((), (2,))
    # copy.together: the first N GPUs at once, capped at the machine's count, each count once
    assert copy_sweep.select_gpus(["0", "all"], 4, [2, 4, 8]) == copy_sweep.Selection((0,), (2, 4))
    assert copy_sweep.select_gpus(["0"], 4, [2, 4]) == copy_sweep.Selection((0,), ())   # no 'all': nothing at once
    with pytest.raises(ConfigError, match=r"copy.gpus: GPU 2 does not exist; this machine has 2 \(0..1\)"):
        copy_sweep.select_gpus(["2"], 2)


def test_triton_is_asked_for_in_one_line(monkeypatch):
    find_spec = kernels.importlib.util.find_spec   # triton missing, whatever is installed here
    monkeypatch.setattr(kernels.importlib.util, "find_spec", lambda name, *a: None if name == "triton" else
                        find_spec(name, *a))
    with pytest.raises(ConfigError, match="^copy.engine=sm and copy.ops=latency run Triton kernels, and triton is not "
                                          "installed .*: pip install triton, or leave them out$"):
        COPY.check(config().copy, context(1))
    with pytest.raises(ConfigError, match="^p2p.ops=latency runs Triton kernels"):
        P2P.check(config(**{"p2p.engine": "[ce]"}).p2p, context(2))
    kernels.need([])   # nothing asked: no Triton needed


# ---------------------------------------------------------------- sizes and NUMA placement


@pytest.mark.parametrize("low, high, expected", [("4KiB", "1GiB", [MiB, 16 * MiB, 256 * MiB]),
                                                 ("4KiB", "128MiB", [8 * MiB, 128 * MiB]),
                                                 ("512MiB", "1GiB", [512 * MiB]),   # none up to 256 MiB: the smallest
                                                 ("4KiB", "512KiB", [512 * 1024])])  # below 1 MiB: the largest only
def test_machine_sizes(low, high, expected):
    assert machine_sizes(sweep(low, high, 2)) == expected


def test_two_sockets_place_each_gpu_near_and_far():
    plan = copy_sweep.host_plan(TWO_SOCKETS, [0, 1], ["local", "remote", "none"])
    assert plan.places[0, "local"].node == 0 and plan.places[0, "local"].cpus == frozenset(range(8))
    assert plan.places[1, "local"].node == 1 and plan.places[1, "remote"].node == 0
    assert plan.places[0, "remote"].cpus == frozenset(range(8, 16))
    assert plan.places[1, "none"] == numa.Placement("none", None, frozenset())
    assert plan.lines == ("2 NUMA nodes; cuda:0 node 0, cuda:1 node 1",)


def test_one_node_says_so_once_and_skips_remote():
    plan = copy_sweep.host_plan(ONE_NODE, [None, None], ["local", "remote"])
    assert {key for key in plan.places} == {(0, "local"), (1, "local")}
    assert plan.lines == ("one NUMA node: host memory is local to every GPU",
                          "copy.numa=remote skipped: one NUMA node: all host memory is local")


def test_unknown_gpu_node_skips_that_gpu_only():
    plan = copy_sweep.host_plan(TWO_SOCKETS, [0, None], ["local"])
    assert (0, "local") in plan.places and (1, "local") not in plan.places
    assert plan.lines[0] == "2 NUMA nodes; cuda:0 node 0, cuda:1 node unknown"
    assert plan.lines[1].startswith("copy.numa=local skipped for cuda:1: the GPU's NUMA node is unknown")
    # every GPU at once needs every GPU placed
    pts = copy_points(config(), context(2, TWO_SOCKETS, [0, None]))
    assert not [p for p in pts if "all" in (p.src, p.dst)]
    assert {p.dst for p in pts if p.op == "h2d"} == {"cuda:0"}


# ---------------------------------------------------------------- the copy suite's points


def test_default_points_on_two_gpus():
    pts = copy_points(config(), context(2))
    assert len({point_key(p) for p in pts}) == len(pts), "a point planned twice"
    machine = machine_sizes(SIZES)
    first = [p for p in pts if "cuda:0" in (p.src, p.dst) and p.op != "d2d"]
    second = [p for p in pts if "cuda:1" in (p.src, p.dst)]
    together = [p for p in pts if "all" in (p.src, p.dst)]
    # the first GPU: the full sweep, as before (every size, both memories, graph up to 16 MiB)
    assert {p.size_bytes for p in first if p.engine == "ce"} == set(SIZES)
    assert {p.memory for p in first} == {"pinned", "pageable"} and {p.launch for p in first} == {"eager", "graph"}
    # the other GPU alone: pinned copies at the whole-machine sizes, eager
    assert {(p.op, p.memory, p.launch) for p in second if p.op != "latency"} == {
        (op, "pinned", "eager") for op in ("h2d", "d2h", "bidir")}
    assert {p.size_bytes for p in second if p.op != "latency"} == set(machine)
    # every GPU at once: named as nvbandwidth's host_to_all rows are imported
    assert {(p.op, p.src, p.dst) for p in together} == {("h2d", "host", "all"), ("d2h", "all", "host"),
                                                        ("bidir", "host", "all")}
    assert {p.world_size for p in together} == {2} and {p.size_bytes for p in together} == set(machine)
    assert Counter(p.engine for p in together) == {"ce": 9, "sm": 9}
    # SM copies: pinned memory, whole-machine sizes only; graph only on the first GPU
    sm = [p for p in pts if p.engine == "sm" and p.op != "latency"]
    assert {p.memory for p in sm} == {"pinned"} and {p.size_bytes for p in sm} == set(machine)
    assert {p.src if p.dst == "host" else p.dst for p in sm if p.launch == "graph"} == {"cuda:0"}
    # latency: one point a GPU, over pinned host memory, in ns per access (size = the ring)
    assert [(p.dst, p.size_bytes, p.engine) for p in pts if p.op == "latency"] == [
        ("cuda:0", 2 * MiB, "sm"), ("cuda:1", 2 * MiB, "sm")]
    assert {p.numa for p in pts if p.memory != "device"} == {"local"}
    assert {(p.src, p.numa, p.engine) for p in pts if p.op == "d2d"} == {("cuda:0", "", "ce")}


def test_one_gpu_adds_only_sm_and_latency_to_the_old_sweep():
    pts = copy_points(config(), context(1))
    old = [p for p in pts if p.engine == "ce"]
    assert len(old) == 149   # the sweep before whole-machine traffic: 4 KiB..1 GiB, both memories, eager+graph
    assert max(p.size_bytes for p in old if p.memory == "pageable") == 256 << 20   # copy.pageable_max_size
    every = copy_points(config(**{"copy.pageable_max_size": "null"}), context(1))
    assert len([p for p in every if p.engine == "ce"]) == 153   # pageable to 1 GiB too
    # whole-machine sizes 1, 16 and 256 MiB, eager; graph at the two up to 16 MiB (not bidir)
    assert Counter(p.op for p in pts if p.engine == "sm") == {"h2d": 5, "d2h": 5, "bidir": 3, "latency": 1}


def test_selected_gpus_and_numa_modes():
    only = copy_points(config(**{"copy.gpus": "[1]"}), context(2))
    assert {p.dst for p in only if p.op == "h2d"} == {"cuda:1"} and {p.src for p in only if p.op == "d2d"} == {"cuda:1"}
    assert len({p.size_bytes for p in only if p.op == "h2d"}) == len(SIZES)   # the one listed gets the full sweep
    at_once = copy_points(config(**{"copy.gpus": "[all]"}), context(2))
    assert at_once and all("all" in (p.src, p.dst) for p in at_once if p.op != "h2h")
    # the host's own memory beside them, in the first GPU's buffers: a copy on 1 thread and on all, a read, a write
    assert [(p.mode, p.params.gpu) for p in at_once if p.op == "h2h"] == [
        ("copy 1 thread", 0), ("copy all threads", 0), ("read all threads", 0), ("write all threads", 0)]
    # all threads at the sweep's largest size; one thread, far slower, at no more than a quarter GiB
    host_sizes = {p.mode: p.size_bytes for p in at_once if p.op == "h2h"}
    assert host_sizes.pop("copy 1 thread") == copy_sweep.ONE_THREAD_MAX_BYTES < max(SIZES)
    assert set(host_sizes.values()) == {max(SIZES)}
    assert {p.params.gpu for p in only if p.op == "h2h"} == {1}
    ctx = context(2, TWO_SOCKETS, [0, 1])
    both = copy_points(config(**{"copy.numa": "[local,remote]"}), ctx)
    assert Counter(p.numa for p in both if p.op == "latency") == {"local": 2, "remote": 2}
    # grouped by mode, so a mode's host buffers can go when the next one starts
    modes = [p.numa for p in both if p.numa]
    assert modes == sorted(modes, key=["local", "remote"].index)
    assert not copy_points(config(**{"copy.numa": "[remote]", "copy.ops": "[h2d]"}),
                           context(2))   # one node: nothing remote to measure


def test_cpu_points_are_unchanged():
    ctx = Context("cpu", TimingConfig(), [4096, 8192])
    assert [(p.op, p.memory, p.backend, p.engine, p.numa) for p in copy_points(config(), ctx)] == [
        ("h2h", "pageable", "cpu", "", "")] * 2


# ---------------------------------------------------------------- the p2p suite's points


def test_p2p_points_on_three_gpus():
    pts = p2p_points(config(**{"p2p.pairs": "all"}), context(3))  # every pair at every size
    assert len({point_key(p) for p in pts}) == len(pts)
    machine = machine_sizes(SIZES)
    concurrent = [p for p in pts if p.op in ("all_to_one", "one_to_all")]
    assert {(p.op, p.src, p.dst) for p in concurrent} == (
        {("all_to_one", "all", f"cuda:{j}") for j in range(3)} | {("one_to_all", f"cuda:{j}", "all") for j in range(3)})
    assert {p.world_size for p in concurrent} == {3} and {p.mode for p in concurrent} == {"peer"}
    assert {p.size_bytes for p in concurrent} == set(machine) and {p.engine for p in concurrent} == {"ce", "sm"}
    sm_pairs = [p for p in pts if p.op in ("uni", "bidir") and p.engine == "sm"]
    assert {p.mode for p in sm_pairs} == {"peer"} and {p.size_bytes for p in sm_pairs} == set(machine)
    assert len([p for p in pts if p.op == "uni" and p.engine == "ce"]) == 6 * 2 * len(SIZES)   # pairs x modes x sizes
    assert {(p.src, p.dst) for p in pts if p.op == "latency"} == {(f"cuda:{i}", f"cuda:{j}")
                                                                 for i in range(3) for j in range(3) if i != j}
    staged = p2p_points(config(**{"p2p.modes": "[staged]", "p2p.pairs": "all"}), context(3))
    assert {(p.op, p.engine) for p in staged} == {("uni", "ce"), ("bidir", "ce"), ("latency", "sm")}


def test_p2p_auto_points_on_an_nvswitch_box_of_eight():
    """CE matrices of all 56 pairs at two sizes; the curve, SM copies and latency on one pair (one
    link class); concurrent traffic into and out of each GPU at the largest whole-machine size."""
    ctx = replace(context(8), links={f"{i},{j}": "NV18" for i in range(8) for j in range(8) if i != j})
    pts = p2p_points(config(), ctx)
    ce_uni = Counter(p.size_bytes for p in pts if p.op == "uni" and p.engine == "ce" and p.mode == "peer")
    assert ce_uni[4096] == ce_uni[256 * MiB] == 56 and ce_uni[GiB] == ce_uni[MiB] == 1
    assert {(p.src, p.dst) for p in pts if p.engine == "sm" and p.op != "all_to_one"
            and p.op != "one_to_all"} == {("cuda:0", "cuda:1")}
    concurrent = [p for p in pts if p.op in ("all_to_one", "one_to_all")]
    assert len(concurrent) == 2 * 8 * 2 and {p.size_bytes for p in concurrent} == {256 * MiB}


# ---------------------------------------------------------------- timing pieces that need no GPU


class FakeEvent:
    def __init__(self, t_ms: float) -> None:
        self.t_ms, self.synced = t_ms, False

    def synchronize(self) -> None:
        self.synced = True

    def elapsed_time(self, other: "FakeEvent") -> float:
        return other.t_ms - self.t_ms


def test_span_clock_times_each_part_from_its_begin_to_its_last_end():
    ends = [FakeEvent(9.0), FakeEvent(12.0)]
    total, parts = lanes.SpanClock().stop({"cuda:0": (FakeEvent(2.0), ends),
                                          "cuda:1": (FakeEvent(100.0), [FakeEvent(108.0)])})
    assert parts == pytest.approx({"cuda:0": 0.010, "cuda:1": 0.008}) and total == pytest.approx(0.010)
    assert all(e.synced for e in ends)


def test_latch_note_counts_only_calls_at_the_trials_count():
    together = object.__new__(lanes.Together)   # its calls only: no streams, no GPU
    call = lambda n, enqueue_s, slept_ms: lanes._Call(n, enqueue_s, {0: (FakeEvent(0), FakeEvent(slept_ms)),
                                                                  1: (FakeEvent(0), FakeEvent(99.0))})
    together.calls = [call(3, 0.5, 1.0), call(64, 0.002, 3.0), call(64, 0.004, 3.0), call(64, 0.001, 3.0)]
    trials = [Trial(64, 0.01)]
    assert together.note(trials) == ("start latch ran out before every copy was enqueued in 1 of 3 calls of 64 "
                                     "copies: the GPUs may not have started together")
    together.calls = together.calls[:2]
    assert together.note(trials) == ""


# ---------------------------------------------------------------- summary and figure


def _rows(op, src, dst, parts: dict[str, float], size=GiB, world=1, engine="ce", suite="copy", memory="pinned",
          mode="", numa="local") -> list[Sample]:
    """Three trials of a point, each part at its GB/s times 1, 1.01 and 1.02 (median: x1.01)."""
    return [Sample(suite, op, size, time_s=size / (bw * 1e9), trial=t, part=part, src=src, dst=dst, world_size=world,
                   engine=engine, memory=memory, mode=mode, numa=numa, backend="cuda",
                   algbw_gbps=bw * (1 + 0.01 * t), verified=True)
            for t in range(3) for part, bw in parts.items()]


def whole_machine_frame() -> pd.DataFrame:
    rows = (_rows("h2d", "host", "cuda:0", {"total": 54.0}) + _rows("h2d", "host", "cuda:1", {"total": 55.0})
            + _rows("h2d", "host", "cuda:0", {"total": 30.0}, size=4 * MiB)
            + _rows("h2d", "host", "all", {"cuda:0": 48.0, "cuda:1": 49.0, "total": 96.0}, world=2)
            + _rows("h2d", "host", "all", {"cuda:0": 20.0, "cuda:1": 20.0, "total": 39.0}, world=2, size=4 * MiB)
            + _rows("all_to_one", "all", "cuda:0", {"cuda:1": 370.0, "total": 370.0}, world=2, suite="p2p",
                    memory="device", mode="peer", numa="")
            + _rows("uni", "cuda:0", "cuda:1", {"total": 390.0}, suite="p2p", memory="device", mode="peer", numa="")
            + _rows("uni", "cuda:0", "cuda:1", {"total": 360.0}, suite="p2p", memory="device", mode="peer", numa="",
                    engine="sm"))
    latency = [Sample("copy", "latency", 2 * MiB, time_s=1.2e-6 + t * 1e-9, trial=t, src="host", dst="cuda:0",
                      memory="pinned", backend="cuda", engine="sm", numa="local", verified=True) for t in range(3)]
    latency += [Sample("p2p", "latency", 2 * MiB, time_s=0.83e-6, trial=t, src="cuda:1", dst="cuda:0", mode="peer",
                       memory="device", backend="cuda", engine="sm", verified=True) for t in range(3)]
    return pd.DataFrame([r.__dict__ for r in rows + latency])


def test_concurrent_table_per_gpu_beside_alone():
    frame = whole_machine_frame()
    table = pd.concat([copy_reading.concurrent_table(frame), p2p_reading.concurrent_table(frame)], ignore_index=True)
    copy_rows = table[table.suite == "copy"].set_index(["when", "gpu"]).gbps
    assert copy_rows["at once", "cuda:0"] == pytest.approx(48.48)
    assert copy_rows["at once", "total"] == pytest.approx(96.96)
    assert copy_rows["alone", "cuda:1"] == pytest.approx(55.55)
    assert copy_rows["alone", "total"] == pytest.approx(54.54 + 55.55)   # the GPUs alone, summed
    assert set(table[table.suite == "copy"].size_bytes) == {GiB}          # the largest size only
    peer = table[table.suite == "p2p"]
    assert list(zip(peer.gpu, peer.gbps.round(1))) == [("cuda:0", 373.7)]  # into the one GPU: the point's total


def test_imported_all_to_one_names_the_gpu_in_part():
    rows = [Sample("p2p", "all_to_one", 512 * MiB, part=part, src="all", dst="all", world_size=2, mode="write",
                   memory="device", engine="ce", backend="cuda", algbw_gbps=bw, trial=0)
            for part, bw in (("cuda:0", 360.0), ("cuda:1", 365.0), ("total", 725.0))]
    table = p2p_reading.concurrent_table(pd.DataFrame([r.__dict__ for r in rows]))
    assert dict(zip(table.gpu, table.gbps)) == {"cuda:0": 360.0, "cuda:1": 365.0}


def test_summary_keeps_latency_and_engines_apart():
    frame = whole_machine_frame()
    table = summarize(frame, catalog())
    assert "latency" not in set(table.op)
    h2d = table[(table.suite == "copy") & (table.op == "h2d")].set_index("world_size")["gbps@max"]
    assert h2d[1] == pytest.approx(55.0, abs=1.0) and h2d[2] == pytest.approx(96.96)   # alone and at once apart
    peaks = p2p_reading.peak_table(frame)
    assert set(zip(peaks["op"], peaks["mode"])) == {("uni", "peer"), ("uni", "peer sm")}   # no all_to_one cells
    lat = latency_table(frame, ["latency"]).set_index(["src", "dst"]).ns_per_access
    assert lat["host", "cuda:0"] == pytest.approx(1201.0) and lat["cuda:1", "cuda:0"] == pytest.approx(830.0)
    text = format_summary(frame, catalog())
    assert "every GPU at once: GB/s per GPU at the largest size" in text and "ns per dependent 8-byte load" in text
    assert "p2p uni peer sm: peak GB/s" in text


def test_concurrent_figure(tmp_path):
    from bench.analysis.figures.style import Canvas
    from bench.analysis.runs import palette, with_series

    frame = with_series(whole_machine_frame().assign(instance="h200-x2", run_id="r1", run_dir="/r1"))
    canvas = Canvas(tmp_path, ["png"], palette(frame), catalog())
    paths = COPY.figures(frame, canvas)
    assert [p.name for p in paths] == ["concurrent_copy.png"] and paths[0].stat().st_size > 10_000
    paths = [p for p in P2P.figures(frame, canvas) if p.name.startswith("concurrent")]
    assert [p.name for p in paths] == ["concurrent_p2p.png"] and paths[0].stat().st_size > 10_000
    uni = frame[frame.op == "uni"]
    none = Canvas(tmp_path / "none", ["png"], palette(uni), catalog())
    assert COPY.figures(uni, none) == [] and not [p for p in P2P.figures(uni, none) if p.name.startswith("concurrent")]


def test_p2p_concurrent_ends():
    assert p2p_sweep._ends("all_to_one", "cuda:2") == {"src": "all", "dst": "cuda:2"}
    assert p2p_sweep._ends("one_to_all", "cuda:2") == {"src": "cuda:2", "dst": "all"}


def test_no_gpu_note_names_only_what_the_user_set(capsys):
    cfg = config(**{"copy.memory": "[pinned,pageable]", "copy.gpus": "[0,each]", "copy.numa": "[none]"})
    assert copy_sweep.cpu_dropped(cfg.copy, frozenset()) == ""   # defaults and unset keys: nothing to say
    assert copy_sweep.cpu_dropped(cfg.copy, frozenset({"copy.memory", "copy.gpus", "copy.numa"})) == (
        "no GPU: copy.memory=[pinned], copy.gpus=[0] measured as pageable host-to-host copies")
    ctx = Context("cpu", TimingConfig(), [4096], explicit=frozenset({"copy.engine"}))
    assert COPY.check(config(**{"copy.engine": "[sm]"}).copy, ctx) is None
    assert capsys.readouterr().err == \
        "xferbench: copy: no GPU: copy.engine=[sm] measured as pageable host-to-host copies\n"
    settings = config().copy
    row = COPY.measure(copy_points(config(), ctx)[0], settings, ctx, COPY.start(settings, ctx))[0]
    assert row.note.startswith("no GPU: copy.engine=[sm]") and row.verified


def test_no_gpu_no_triton_needed():
    ctx = Context("cpu", TimingConfig(), [4096])
    assert COPY.check(config().copy, ctx) is None   # engine sm and latency mean nothing without a GPU


def test_settings_defaults_are_documented_in_the_config_file():
    conf = OmegaConf.load(Path(__file__).resolve().parent.parent / "conf" / "config.yaml")
    cfg = config()
    assert list(conf["copy"].gpus) == list(cfg.copy.gpus)
    assert list(conf["copy"].engine) == [str(e) for e in cfg.copy.engine]
    assert list(conf["copy"].ops) == [str(o) for o in cfg.copy.ops] and list(conf["copy"].numa) == ["local"]
    assert list(conf.p2p.ops) == [str(o) for o in cfg.p2p.ops] and list(conf.p2p.engine) == ["ce", "sm"]


def test_together_counts_give_every_gpu_count_at_once():
    """copy.together and p2p.together (suite=scaling): the first N GPUs at once, N capped at the
    machine's count; copies' lanes and P2P's peers follow N."""
    pts = copy_points(config(**{"copy.gpus": "[0,all]", "copy.together": "[2,4,8]"}), context(4))
    together = [p for p in pts if "all" in (p.src, p.dst)]
    assert {p.world_size for p in together} == {2, 4}
    assert Counter(p.world_size for p in together)[2] == Counter(p.world_size for p in together)[4]
    assert not [p for p in copy_points(config(**{"copy.together": "[3]"}), context(2))
                if "all" in (p.src, p.dst) and p.world_size != 2]
    p2p = p2p_points(config(**{"p2p.together": "[2,4]", "p2p.ops": "[all_to_one]"}), context(4))
    # every GPU as the one among the first N: 2 + 4 points per engine
    assert Counter(p.world_size for p in p2p) == {2: 2 * 2, 4: 4 * 2}
    assert {p.dst for p in p2p if p.world_size == 2} == {"cuda:0", "cuda:1"}
    with pytest.raises(ConfigError, match="copy.together=1: a count of GPUs at once must be >= 2"):
        config(**{"copy.together": "[1]"})


def test_d2d_transpose_is_measured_by_name_only_as_a_copy_within_the_first_gpu():
    assert "d2d_transpose" not in [str(o) for o in config().copy.ops]     # not in the default sweep
    ctx = context(2, sizes=[4096, 6 * MiB, 4097])
    named = [p for p in copy_points(config(**{"copy.ops": "[d2d_transpose]"}), ctx)]
    assert {(p.op, p.src, p.dst, p.memory, p.engine) for p in named} == {("d2d_transpose", "cuda:0", "cuda:0", "device", "sm")}
    assert sorted({p.size_bytes for p in named}) == [4096, 6 * MiB]        # whole 4-byte elements only
    assert COPY.op("d2d_transpose").on_one_gpu and COPY.op("d2d").on_one_gpu


def test_a_transposed_view_is_a_checked_strided_copy():
    import torch

    from bench.suites.copy.ops import transposed

    for n in (4096, 3 * 4096):
        src, dst = torch.arange(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32)
        to, view = transposed(dst, src)
        to.copy_(view)
        assert not view.is_contiguous() and to.shape == view.shape and torch.equal(to, view)
        assert not torch.equal(dst, src)   # a transpose, not a flat copy
