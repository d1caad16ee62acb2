"""pytest-benchmark figures for CI gating on GPU runners:
`pytest tests/benchmarks --benchmark-enable --benchmark-autosave` then
`--benchmark-compare --benchmark-compare-fail=median:5%`. GB/s land in extra_info.
Without --benchmark-enable (the default here) each runs once, as a plain test."""
import pytest
import torch

SIZE = 64 << 20 if torch.cuda.is_available() else 4 << 20


def _buffers(kind: str):
    if kind == "h2h":
        return torch.empty(SIZE, dtype=torch.uint8), torch.randint(0, 256, (SIZE,), dtype=torch.uint8)
    dev = torch.randint(0, 256, (SIZE,), dtype=torch.uint8, device="cuda")
    host = torch.empty(SIZE, dtype=torch.uint8, pin_memory=True)
    return {"h2d": (torch.empty_like(dev), host.copy_(dev.cpu())), "d2h": (host, dev),
            "d2d": (torch.empty_like(dev), dev)}[kind]


KINDS = ["h2d", "d2h", "d2d"] if torch.cuda.is_available() else ["h2h"]


@pytest.mark.parametrize("kind", KINDS)
def test_copy_bandwidth(benchmark, kind):
    dst, src = _buffers(kind)

    def copy():
        dst.copy_(src, non_blocking=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    benchmark.pedantic(copy, rounds=10, iterations=1, warmup_rounds=2)
    assert torch.equal(dst.cpu(), src.cpu())
    if benchmark.stats:  # absent when benchmarks are disabled
        benchmark.extra_info["gbps_median"] = SIZE / benchmark.stats.stats.median / 1e9
    benchmark.extra_info["size_bytes"] = SIZE
