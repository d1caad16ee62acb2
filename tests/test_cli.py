"""The real command, end to end on the CPU path: files written, bad input refused before work."""
import json

import pandas as pd
import pytest

from bench.results import COLUMNS, load


def test_copy_run_writes_verified_tidy_results(xferbench):
    proc, runs = xferbench("suite=copy", "sizes.max=64KiB", "timing.trials=3")
    assert proc.returncode == 0, proc.stderr
    assert len(runs) == 1 and runs[0].parent.name == "cpu"
    df = pd.read_parquet(runs[0] / "samples.parquet")
    assert list(df.columns) == COLUMNS
    assert sorted(df.size_bytes.unique()) == [4096, 16384, 65536]   # the copy ladder: x4 below 64 KiB
    # 3 trials a point, or 3x3 where an op is under 100 µs (timing.SMALL_OP_SPLIT)
    assert df.groupby("size_bytes").trial.nunique().isin([3, 9]).all()
    assert df.verified.all() and (df.status == "ok").all()
    assert (df.algbw_gbps > 0).all() and (df.iters >= 1).all()
    meta = json.loads((runs[0] / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["device"] == "cpu" and meta["end_time"]
    assert meta["config"]["timing"]["trials"] == 3 and meta["system"]["torch"]
    assert "h2h" in proc.stdout and "peak_gbps" in proc.stdout  # the summary table
    assert "no GPU" not in proc.stderr and not df.note.str.contains("no GPU").any()   # defaults: no note
    assert "mismatch" not in meta["instance"]


def test_skipped_suite_says_why_and_run_goes_on(xferbench):
    proc, runs = xferbench("suite=links", "sizes.max=4KiB", "collectives.ops=[all_reduce]", "timing.trials=1")
    assert proc.returncode == 0, proc.stderr
    assert "p2p: skipped, needs 2 or more GPUs" in proc.stderr
    df = load(runs)
    assert set(df.suite) == {"copy", "collectives"} and df.verified.all()


@pytest.mark.parametrize("args, message", [
    (["suite=foo"], "suite='foo' is unknown; choose from: all, collectives, copy, links, overlap, p2p, pipeline, pipeline-full, scaling, training"),
    (["sizes.max=abc"], "sizes.max='abc': not a size"),
    (["sizes.min=1MiB", "sizes.max=4KiB"], "sizes.min=1MiB is larger than sizes.max=4KiB"),
    (["timing.trials=-1"], "timing.trials=-1: must be >= 1"),
    (["suite=copy", "copy.ops=[h2d,sideways]"], "copy.ops: 'sideways' is not allowed; choose from: h2d, d2h, bidir, d2d"),
    (["suite=collectives", "collectives.dtypes=[complex7]"], "collectives.dtypes: 'complex7' is not allowed"),
    (["suite=collectives", "collectives.nproc=0"], "collectives.nproc=0: must be >= 1"),
    (["device=cuda"], "device=cuda but no CUDA GPU is visible"),
    (["device=tpu"], "device: 'tpu' is not allowed; choose from: auto, cuda, cpu"),
    (["resume=/nonexistent/run"], "resume=/nonexistent/run: not an xferbench run folder"),
    (["launch=sometimes"], "launch='sometimes' is unknown; choose from: all, both, default, eager, graph, held"),
    (["suite=p2p"], "nothing to run here: p2p: skipped, needs 2 or more GPUs, found 0"),
    (["timing.min_trial_s=inf"], "timing.min_trial_s=inf: must be a positive, finite number"),
    (["collectives.timeout_s=inf"], "collectives.timeout_s=inf: must be a positive, finite number"),
    (["instance.gpu=Größe"], "instance.gpu=Größe: cannot be read (token recognition error at: 'ö'); quote the value "
                             "inside the argument, e.g. \"instance.gpu='Größe'\" (in a list, each item)"),
    (["instance.gpu=NVIDIA H100 (SXM)"], "e.g. \"instance.gpu='NVIDIA H100 (SXM)'\""),
    (["suite=copy,p2p"], "suite=copy,p2p: several values of a config group need -m (a multirun), "
                         "or use suites=[copy,p2p]"),
    (["sizes.max=4KiB,8KiB"], "sizes.max=4KiB,8KiB: several values need -m (a multirun, one run each)"),
    (["timing.trials=${oc.env:XFB_NEVER_SET}"],
     "timing.trials=${oc.env:XFB_NEVER_SET}: cannot be resolved: environment variable XFB_NEVER_SET is not set"),
    (["timing.trials=${nowhere}"], "timing.trials=${nowhere}: cannot be resolved: Interpolation key 'nowhere' not found"),
])
def test_bad_input_is_one_line_exit_2(xferbench_in_process, args, message):
    code, stderr, runs = xferbench_in_process(*args)
    assert code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [f"xferbench: error: {message}"] or (len(lines) == 1 and message in lines[0]), stderr
    assert not runs


def test_interpolation_that_resolves_to_a_bad_value_names_both(xferbench_in_process, monkeypatch):
    monkeypatch.setenv("XFB_MEMORY", "pinnd")
    code, stderr, runs = xferbench_in_process("copy.memory=[${oc.env:XFB_MEMORY}]")
    assert code == 2 and not runs
    assert stderr.strip() == ("xferbench: error: copy.memory: ${oc.env:XFB_MEMORY} gives 'pinnd', which is not "
                              "allowed; choose from: pinned, pageable")


def test_cpu_run_says_which_settings_it_drops_and_that_the_instance_is_another_machine(xferbench):
    proc, runs = xferbench("suite=copy", "sizes.max=4KiB", "timing.trials=1", "copy.ops=[h2d,latency]",
                           "copy.memory=[pinned,pageable]", "copy.gpus=[each,all]", "copy.numa=[local,remote,none]",
                           "copy.engine=[ce,sm]", "instance=p5.48xlarge")
    assert proc.returncode == 0, proc.stderr
    note = ("no GPU: copy.ops=[h2d,latency], copy.memory=[pinned], copy.gpus=[all], copy.engine=[sm], "
            "copy.numa=[local,remote] measured as pageable host-to-host copies")
    lines = proc.stderr.splitlines()
    assert lines.count(f"xferbench: copy: {note}") == 1
    mismatch = ("instance=p5.48xlarge is 8x NVIDIA H100 80GB HBM3, but this run has no GPU; its results are "
                "labelled p5.48xlarge with that entry's links and price all the same")
    assert lines.count(f"xferbench: warning: {mismatch}") == 1
    assert runs[0].parent.name == "p5.48xlarge"
    assert json.loads((runs[0] / "meta.json").read_text())["instance"]["mismatch"] == mismatch
    assert (load(runs).note.str.split("; ").str[0] == note).all()


def test_instance_mismatch_compares_gpu_count_and_model():
    from bench.config.settings import InstanceSettings
    from bench.driver.machine import instance_mismatch

    p5 = InstanceSettings(name="p5.48xlarge", gpu="NVIDIA H100 80GB HBM3", gpu_count=8)
    assert instance_mismatch(p5, ["NVIDIA H100 80GB HBM3"] * 8) == ""
    assert instance_mismatch(p5, ["NVIDIA H100 PCIe"] * 8).startswith(
        "instance=p5.48xlarge is 8x NVIDIA H100 80GB HBM3, but this run has 8x NVIDIA H100 PCIe;")
    assert "but this run has 2x NVIDIA H100 80GB HBM3" in instance_mismatch(p5, ["NVIDIA H100 80GB HBM3"] * 2)
    h200 = InstanceSettings(name="h200-x2", gpu="NVIDIA H200", gpu_count=2)
    assert instance_mismatch(h200, ["NVIDIA H200"] * 2) == ""
    assert instance_mismatch(InstanceSettings(), []) == ""                    # local: detected, nothing claimed
    assert instance_mismatch(InstanceSettings(name="mine"), []) == ""         # a label only


def test_unknown_key_is_exit_2(xferbench):
    proc, _ = xferbench("no_such_key=1", timeout=60)
    assert proc.returncode == 2 and "no_such_key" in proc.stderr and "Traceback" not in proc.stderr


def test_help_lists_suites_and_examples(xferbench):
    proc, _ = xferbench("--help", timeout=60)
    assert proc.returncode == 0
    assert "suite: all, collectives, copy, links, overlap, p2p, pipeline, pipeline-full, scaling, training" in proc.stdout
    assert "xferbench suite=copy" in proc.stdout and "sizes.max" in proc.stdout


def test_multirun_makes_one_run_per_job(xferbench):
    proc, runs = xferbench("-m", "suite=copy", "sizes.max=4KiB,8KiB", "timing.trials=1", "sizes.min=4KiB")
    assert proc.returncode == 0, proc.stderr
    assert len(runs) == 2
    assert sorted(load(runs).groupby("run_dir").size_bytes.max()) == [4096, 8192]
