"""pytest-benchmark figures for CI gating on GPU runners. Gate them like any xferbench run:
`pytest tests/benchmarks --benchmark-enable --xferbench-run results/bench/RUN`, then
`xferbench-compare --baseline-dir STORE results/bench/RUN --add-on-pass` (each round
is one trial; the store holds earlier passing runs). GB/s also land in extra_info.
Without --benchmark-enable (the default here) each runs once, as a plain test."""
import pytest
import torch

from bench.results import Sample

SIZE = 64 << 20 if torch.cuda.is_available() else 4 << 20
KINDS = ["h2d", "d2h", "d2d"] if torch.cuda.is_available() else ["h2h"]
# The point keys xferbench's copy suite gives the same copy.
POINT = {"h2d": dict(memory="pinned", backend="cuda", src="host", dst="cuda:0"),
         "d2h": dict(memory="pinned", backend="cuda", src="cuda:0", dst="host"),
         "d2d": dict(memory="device", backend="cuda", src="cuda:0", dst="cuda:0"),
         "h2h": dict(memory="pageable", backend="cpu", src="host", dst="host")}


def _buffers(kind: str):
    if kind == "h2h":
        return torch.empty(SIZE, dtype=torch.uint8), torch.randint(0, 256, (SIZE,), dtype=torch.uint8)
    dev = torch.randint(0, 256, (SIZE,), dtype=torch.uint8, device="cuda")
    host = torch.empty(SIZE, dtype=torch.uint8, pin_memory=True)
    return {"h2d": (torch.empty_like(dev), host.copy_(dev.cpu())), "d2h": (host, dev),
            "d2d": (torch.empty_like(dev), dev)}[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_copy_bandwidth(benchmark, xferbench_samples, kind):
    dst, src = _buffers(kind)

    def copy():
        dst.copy_(src, non_blocking=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    benchmark.pedantic(copy, rounds=10, iterations=1, warmup_rounds=2)
    assert torch.equal(dst.cpu(), src.cpu())
    benchmark.extra_info["size_bytes"] = SIZE
    if benchmark.stats:  # absent when benchmarks are disabled
        benchmark.extra_info["gbps_median"] = SIZE / benchmark.stats.stats.median / 1e9
        xferbench_samples += [Sample(suite="copy", op=kind, size_bytes=SIZE, time_s=t, iters=1, trial=i,
                                     algbw_gbps=SIZE / t / 1e9, busbw_gbps=SIZE / t / 1e9, verified=True,
                                     **POINT[kind]) for i, t in enumerate(benchmark.stats.stats.data)]
