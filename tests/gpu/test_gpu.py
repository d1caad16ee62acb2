"""GPU paths: run on the GPU machines (`pytest tests/gpu`); skipped cleanly without CUDA."""
import pytest
import torch

from bench.results import load

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
multigpu = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more GPUs")


def test_d2d_transpose_is_a_checked_copy_within_one_gpu(xferbench):
    proc, runs = xferbench("suite=copy", "copy.ops=[d2d_transpose,d2d]", "copy.gpus=[0]", "sizes.max=64MiB",
                           "timing.trials=2")
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all()
    t = df[df.op == "d2d_transpose"]
    assert len(t) and set(t.engine) == {"sm"} and set(t.src) == set(t.dst) == {"cuda:0"} and set(t.memory) == {"device"}
    assert t.note.str.startswith("cache-resident").any()   # small ones fit in L2, as d2d's do


def test_copy_suite_on_gpu(xferbench):
    proc, runs = xferbench("suite=copy", "sizes.max=4MiB", "timing.trials=3", "launch=all")
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all()
    assert set(df.op) == {"h2d", "d2h", "bidir", "d2d", "latency", "h2h"}   # h2h: the host's own memory
    assert set(df.launch) == {"eager", "held", "graph"}
    held = df[df.launch == "held"]
    assert set(held.memory) == {"pinned", "device"} and held.size_bytes.max() <= 64 << 10   # timing.held_max_size
    assert not held.note.str.contains("latch gave way").any()
    assert set(df[(df.op == "bidir") & (df.dst != "all")].part) == {"h2d", "d2h", "total"}   # 'all': a part a GPU
    big = df[(df.size_bytes == 4 << 20) & (df.part == "total")].groupby(["op", "memory"]).algbw_gbps.median()
    assert big["d2d", "device"] > big["h2d", "pinned"]  # HBM beats PCIe on any real GPU


def test_machine_description_has_links():
    from bench.driver.inventory import describe

    d = describe()
    assert len(d["gpus"]) == torch.cuda.device_count() and d["cuda"] and d["nccl"]
    assert "pcie_gen_max" in d["gpus"][0] and "nvlink_links" in d["gpus"][0]


def test_held_copies_time_the_device_not_the_launches():
    """Copies queued behind the latch run back to back: no slower than launched one by one, and
    never slower however slowly they were launched (a sleep between launches, as a busy host)."""
    import time

    from bench.measure import timing

    dev, host = torch.empty(4096, dtype=torch.uint8, device="cuda"), torch.empty(4096, dtype=torch.uint8).pin_memory()

    def copies(n, pause=0.0):
        for _ in range(n):
            dev.copy_(host, non_blocking=True)
            time.sleep(pause)

    cfg = timing.TimingConfig(trials=5)
    per_op = lambda trials: sorted(t.per_op_s for t in trials)[len(trials) // 2]   # noqa: E731
    eager = per_op(timing.measure(copies, timing.EventClock(), cfg, read_pace=False))
    held = timing.measure(copies, timing.HeldClock(), cfg)
    slow = timing.measure(lambda n: copies(n, 20e-6), timing.HeldClock(), cfg)
    assert per_op(held) <= eager * 1.02 and not any(t.caveat for t in held + slow)
    assert per_op(slow) == pytest.approx(per_op(held), rel=0.1)


@multigpu
def test_p2p_matrix(xferbench):
    proc, runs = xferbench("suite=p2p", "sizes.max=1MiB", "timing.trials=2", "p2p.pairs=ring")
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert df.verified.all() and set(df["mode"]) == {"peer", "staged"}
    # Held staged copies hand off through the driver's flags in host memory (bench/measure/flags.py).
    staged = df[df["mode"] == "staged"]
    assert set(staged.launch) == {"eager", "held"} and (staged.status == "ok").all(), staged.note.unique()
    # Held, they go round a ring of slots in host memory: one hand-off a copy, not an eager round trip.
    assert set(staged[staged.launch == "held"].params) == {'{"slots": 4}'} and set(staged[staged.launch == "eager"].params) == {""}
    small_staged = staged[(staged.size_bytes == 4096) & (staged.part == "total")].groupby(["op", "launch"]).time_s.median()
    assert (small_staged.xs("held", level="launch") < small_staged.xs("eager", level="launch")).all()
    assert "rows src, columns dst" in proc.stdout
    # Held peer copies are one cudaMemcpyAsync each, without torch's joins of both GPUs' streams.
    small = df[(df.size_bytes == 4096) & (df.op == "uni") & (df["mode"] == "peer") & (df.part == "total")]
    times = small.groupby("launch").time_s.median()
    assert times["held"] < times["eager"]


@multigpu
@pytest.mark.parametrize("transport", ["default", "socket"])
def test_nccl_collectives(xferbench, transport):
    proc, runs = xferbench("suite=collectives", "collectives.nproc=2", "sizes.max=64KiB", "sizes.factor=8",
                           "timing.trials=2", f"collectives.transport={transport}",
                           "collectives.dtypes=[float32,bfloat16]")
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all(), df[~df.verified].note.unique()
    assert set(df.backend) == {"nccl"} and set(df.launch) == {"eager", "held"}


def test_size_that_does_not_fit_is_refused_before_work(xferbench):
    proc, runs = xferbench("suite=copy", "sizes.max=4TiB", timeout=120)
    assert proc.returncode == 2
    assert "sizes.max: the copy suite (2 x sizes.max) needs" in proc.stderr and "Traceback" not in proc.stderr
    assert not runs


@multigpu
def test_more_ranks_than_gpus_are_capped_with_a_note(xferbench):
    n = torch.cuda.device_count()
    proc, runs = xferbench("suite=collectives", f"collectives.nproc=[{n},{n + 1}]", "collectives.ops=[all_reduce]",
                           "sizes.max=64B", "timing.trials=1", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"capped at the {n} GPU(s) present" in proc.stderr and set(load(runs).world_size) == {n}


@multigpu
def test_all_to_allv_through_both_apis_eager_held_and_graph(xferbench):
    """Uneven blocks between each pair (every GPU: 3 or more make them uneven), through
    torch.distributed and NCCL's grouped sends and receives, checked against the exact answer."""
    n = torch.cuda.device_count()
    proc, runs = xferbench("suite=collectives", f"collectives.nproc={n}", "collectives.ops=[all_to_allv,all_to_all]",
                           "sizes.max=16MiB", "sizes.factor=16", "sizes.collectives.ladder=[]", "timing.trials=2",
                           "launch=all", "collectives.nccl_launch=[eager,held,graph]", timeout=300)
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all(), df[~df.verified].note.unique()
    v = df[df.op == "all_to_allv"]
    assert set(zip(v.api, v.launch)) == {(api, launch) for api in ("torch", "nccl") for launch in ("eager", "held", "graph")}
    assert (v.busbw_gbps / v.algbw_gbps).round(6).eq(round((n - 1) / n, 6)).all()


@multigpu
@pytest.mark.parametrize("mixing", ["0", "1"])
def test_both_apis_pass_their_checks_with_and_without_graph_mixing_support(tmp_path, mixing):
    """NCCL_GRAPH_MIXING_SUPPORT: 0 is xferbench's default; a user's 1 must still give a correct run."""
    import json
    import subprocess

    from conftest import env, xferbench_cmd

    cmd = xferbench_cmd(tmp_path / "results", "suite=collectives", "collectives.nproc=2", "sizes.max=1MiB",
                        "sizes.collectives.ladder=[]", "sizes.factor=16", "timing.trials=2", "launch=all",
                        "collectives.nccl_launch=[eager,held,graph]")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**env(), "NCCL_GRAPH_MIXING_SUPPORT": mixing})
    assert proc.returncode == 0, proc.stderr
    runs = sorted(p.parent for p in (tmp_path / "results").rglob("meta.json"))
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all()
    assert set(zip(df.api, df.launch)) == {(api, launch) for api in ("torch", "nccl") for launch in ("eager", "held", "graph")}
    assert json.loads((runs[0] / "meta.json").read_text())["system"]["env"]["NCCL_GRAPH_MIXING_SUPPORT"] == mixing
