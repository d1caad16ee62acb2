"""bench.measure.kernels on GPUs (`pytest tests/gpu -s` prints the speeds): SM copies between every kind of
memory, in CUDA graphs too, and the pointer chase's data check. Speeds get sanity bounds only."""
import re

import pytest
import torch

from bench.measure import kernels, timing
from bench.measure.chase import Chase

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
multigpu = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more GPUs")

SIZES = [1, 7, 127, 128, 129, 4096 + 3, (1 << 20) + 1, 64 << 20]
WHERE = {"h2d": ("host", "cuda:0"), "d2h": ("cuda:0", "host"), "d2d": ("cuda:0", "cuda:0")}


def region(where: str, n: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A zeroed buffer in `where` ('host' is pinned) and its n bytes from `offset`, with a guard band after."""
    if where == "host":
        buf = torch.zeros(n + offset + 64, dtype=torch.uint8, pin_memory=True)
    else:
        buf = torch.zeros(n + offset + 64, dtype=torch.uint8, device=where)
    return buf, buf[offset:offset + n]


def sync_all() -> None:
    for i in range(torch.cuda.device_count()):
        torch.cuda.synchronize(i)


def check_copy(src_where: str, dst_where: str, n: int, offset: int = 0, device: int | None = None) -> None:
    _, src = region(src_where, n, offset)
    src.copy_(torch.randint(0, 256, (n,), dtype=torch.uint8))
    dst_buf, dst = region(dst_where, n, offset)
    kernels.sm_copy(dst, src, device)
    sync_all()
    assert torch.equal(dst.cpu(), src.cpu()), f"{src_where} -> {dst_where}, {n} bytes at +{offset}"
    outside = torch.cat([dst_buf[:offset], dst_buf[offset + n:]])
    assert not outside.any(), "the kernel wrote outside dst"


def test_available():
    assert kernels.available(), "CUDA builds of torch ship triton"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", sorted(WHERE))
def test_sm_copy(op, n):
    check_copy(*WHERE[op], n)


@pytest.mark.parametrize("offset", [1, 8])  # bytes only; 8- but not 16-byte aligned words
@pytest.mark.parametrize("op", ["h2d", "d2h"])
def test_sm_copy_misaligned(op, offset):
    for n in (5, 4096 + 3, (1 << 20) + 5):
        check_copy(*WHERE[op], n, offset)


@multigpu
@pytest.mark.parametrize("n", [129, (1 << 20) + 1, 64 << 20])
@pytest.mark.parametrize("src,dst,worker", [(0, 1, None), (1, 0, None), (0, 1, 1), (1, 0, 0)])  # push, then pull
def test_sm_copy_peer(src, dst, worker, n):
    check_copy(f"cuda:{src}", f"cuda:{dst}", n, device=worker)


def test_sm_copy_refuses_pageable_memory():
    with pytest.raises(ValueError, match="pinned"):
        kernels.sm_copy(torch.zeros(64, dtype=torch.uint8, device="cuda:0"), torch.zeros(64, dtype=torch.uint8))


def test_sm_copy_moves_16_byte_vectors():
    _, src = region("host", 1 << 20)
    _, dst = region("cuda:0", 1 << 20)
    with torch.cuda.device(0):
        ptx = kernels._launch_copy(dst, src, 8).asm["ptx"]
    assert re.search(r"ld\.global\S*\.v2\.b64|ld\.global\S*\.v4\.b32", ptx), "no 16-byte loads in the copy kernel"


@pytest.mark.parametrize("op", ["h2d", "d2h"])
def test_sm_copy_replays_in_a_cuda_graph(op):
    n = (4 << 20) + 3
    _, src = region(WHERE[op][0], n)
    _, dst = region(WHERE[op][1], n)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kernels.sm_copy(dst, src)  # compiles outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels.sm_copy(dst, src)
    for seed in (1, 2):  # new source bytes each time: the replay copies, it does not replay old data
        src.copy_(torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)))
        dst.zero_()
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(dst.cpu(), src.cpu())


def test_sm_copy_under_the_timing_core():
    n = 8 << 20
    _, src = region("host", n)
    src.copy_(torch.randint(0, 256, (n,), dtype=torch.uint8))
    _, dst = region("cuda:0", n)

    def enqueue(k: int) -> None:
        for _ in range(k):
            kernels.sm_copy(dst, src)

    cfg = timing.TimingConfig(warmup=2, trials=2, min_trial_s=0.01)
    for timer in (timing.measure, timing.measure_graph):
        dst.zero_()
        trials = timer(enqueue, timing.EventClock(), cfg)
        torch.cuda.synchronize()
        assert torch.equal(dst.cpu(), src)
        print(f"{timer.__name__}: h2d {n / min(t.per_op_s for t in trials) / 1e9:.1f} GB/s")


def bandwidth(dst: torch.Tensor, src: torch.Tensor, worker: int, copies: int = 5) -> float:
    """GB/s of `copies` back-to-back SM copies on `worker`, after one to warm up."""
    kernels.sm_copy(dst, src, worker)
    with torch.cuda.device(worker):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(copies):
            kernels.sm_copy(dst, src, worker)
        end.record()
        end.synchronize()
    return copies * dst.numel() / (start.elapsed_time(end) / 1e3) / 1e9


@pytest.mark.parametrize("op", sorted(WHERE))
def test_sm_copy_bandwidth_is_sane(op):
    n = 256 << 20
    _, src = region(WHERE[op][0], n)
    _, dst = region(WHERE[op][1], n)
    gbps = bandwidth(dst, src, 0)
    print(f"sm_copy {op}: {gbps:.1f} GB/s")
    assert gbps > 1


@multigpu
@pytest.mark.parametrize("worker", [0, 1])  # push (GPU 0 writes), pull (GPU 1 reads)
def test_sm_copy_peer_bandwidth_is_sane(worker):
    n = 256 << 20
    _, src = region("cuda:0", n)
    _, dst = region("cuda:1", n)
    gbps = bandwidth(dst, src, worker)
    print(f"sm_copy cuda:0 -> cuda:1 by cuda:{worker}: {gbps:.1f} GB/s")
    assert gbps > 1


def chase_ns(ring: torch.Tensor, device: int) -> float:
    """ns per access through the suites' Chase and the timing core; its end index checked."""
    chase = Chase(ring, device)
    with torch.cuda.device(device):
        trials = timing.measure(chase, timing.EventClock(), timing.TimingConfig(trials=3, min_trial_s=0.005))
    ns = sorted(t.per_op_s for t in trials)[1] * 1e9
    print(f"chase cuda:{device} -> {ring.device}: {ns:.0f} ns/access over SMs up to {chase.next_sm}")
    assert chase.verified()
    return ns


def test_pointer_chase_to_host_memory():
    assert 100 < chase_ns(kernels.make_ring(2 << 20, pin=True), 0) < 20_000


def test_pointer_chase_to_own_memory():
    assert 20 < chase_ns(kernels.make_ring(2 << 20, device="cuda:0"), 0) < 20_000


@multigpu
def test_pointer_chase_to_peer_memory():
    assert 100 < chase_ns(kernels.make_ring(2 << 20, device="cuda:1"), 0) < 20_000


def test_pointer_chase_on_a_chosen_sm_ends_where_the_host_does():
    ring = kernels.make_ring(1 << 16, pin=True, seed=3)
    last = kernels.sm_count(0) - 1
    assert int(kernels.pointer_chase(ring, 500, 0, sm=last).item()) == kernels.follow(ring, 500)


def test_pointer_chase_end_index():
    ring = kernels.make_ring(1 << 16, pin=True, seed=11)
    for steps in (1, 2, 777):
        out = kernels.pointer_chase(ring, steps, 0)
        assert int(out.item()) == kernels.follow(ring, steps)


def test_pointer_chase_refuses_pageable_ring():
    with pytest.raises(ValueError, match="pinned"):
        kernels.pointer_chase(kernels.make_ring(4096), 10, 0)
