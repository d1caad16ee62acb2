"""bench.measure.kernels without a GPU: the ring's layout, the host-side data check, and (where Triton is
installed) the kernels' indexing under Triton's CPU interpreter."""
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from bench.measure import kernels
from conftest import ROOT


def walk_slots(ring: torch.Tensor) -> list[int]:
    """Indices visited from 0 until the walk comes back to 0 (or a slot repeats)."""
    nxt, seen, idx = ring.tolist(), [], 0
    while idx not in seen:
        seen.append(idx)
        idx = nxt[idx]
    return seen if idx == 0 else seen + [idx]


@pytest.mark.parametrize("nbytes,stride", [(2 << 20, 128), (4096, 256), (1000, 8), (256, 128)])
def test_ring_is_one_cycle_over_every_slot(nbytes, stride):
    ring = kernels.make_ring(nbytes, stride, seed=3)
    assert ring.dtype == torch.int64 and ring.numel() == nbytes // 8
    visited = walk_slots(ring)
    step = stride // 8
    assert sorted(visited) == list(range(0, (nbytes // stride) * step, step))  # every slot once, then back to 0
    assert all(abs(a - b) * 8 >= stride for a, b in zip(visited, visited[1:] + visited[:1]))


def test_ring_order_is_random_and_seeded():
    a, b = kernels.make_ring(1 << 16, seed=1), kernels.make_ring(1 << 16, seed=2)
    assert torch.equal(a, kernels.make_ring(1 << 16, seed=1)) and not torch.equal(a, b)
    hops = torch.tensor(walk_slots(a)).diff().abs()
    assert (hops == 16).float().mean() < 0.05  # not a walk to the neighbouring line, which prefetchers would follow


@pytest.mark.parametrize("nbytes,stride", [(4096, 12), (4096, 0), (128, 128)])
def test_ring_refuses_bad_layouts(nbytes, stride):
    with pytest.raises(ValueError):
        kernels.make_ring(nbytes, stride)


def test_follow_is_the_host_side_chase():
    ring = kernels.make_ring(1 << 14, seed=5)
    visited = walk_slots(ring)
    slots = len(visited)
    assert kernels.follow(ring, 0) == 0
    assert kernels.follow(ring, 5) == visited[5]
    assert kernels.follow(ring, slots) == 0 and kernels.follow(ring, 3 * slots + 7) == visited[7]


def test_not_available_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert kernels.available() is False


def test_import_leaves_triton_alone():
    code = ("import sys, torch; before = 'triton' in sys.modules; import bench.measure.kernels as k; "
            "k.make_ring(4096); print(before or 'triton' not in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"  # triton is imported when a kernel is first needed, not before


def test_sm_copy_checks_its_arguments():
    a, b = torch.zeros(16, dtype=torch.uint8), torch.zeros(8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="bytes"):
        kernels.sm_copy(a, b, device=0)
    with pytest.raises(ValueError, match="uint8"):
        kernels.sm_copy(a.float(), a, device=0)
    with pytest.raises(ValueError, match="host memory"):
        kernels.sm_copy(a, a.clone())
    with pytest.raises(ValueError, match="pinned"):
        kernels.sm_copy(a, a.clone(), device=0)


# The interpreter needs TRITON_INTERPRET=1 before the kernels are built: a fresh interpreter runs them.
INTERPRETED = textwrap.dedent("""
    import torch
    from bench.measure import kernels

    def check_copy(n, offset, programs):
        src_buf = torch.randint(0, 256, (n + 16,), dtype=torch.uint8)
        dst_buf = torch.zeros(n + 16, dtype=torch.uint8)
        src, dst = src_buf[offset:offset + n], dst_buf[offset:offset + n]
        kernels._launch_copy(dst, src, programs)
        assert torch.equal(dst, src), (n, offset)
        assert not dst_buf[:offset].any() and not dst_buf[offset + n:].any(), ("wrote outside dst", n, offset)

    for n in (1, 7, 127, 128, 129, 1000, 16384, 16384 + 77, 3 * 16384 + 5):
        check_copy(n, 0, 2)
    for n in (1, 130, 20000):
        check_copy(n, 3, 2)  # not 8-byte aligned: the byte path
    check_copy(100000, 8, 3)  # 8- but not 16-byte aligned, several blocks per program

    ring = kernels.make_ring(1 << 14, seed=7)
    out = torch.empty(1, dtype=torch.int64)
    for steps in (1, 5, 300):
        kernels._kernels().chase[(1,)](ring, 0, steps, out, num_warps=1)
        assert int(out) == kernels.follow(ring, steps), steps
    print("ok")
""")


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (for its CPU interpreter)")
def test_kernels_under_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", INTERPRETED], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=600)
    if "only 0-dimensional arrays can be converted" in proc.stderr:
        pytest.skip("this Triton's interpreter fails on numpy >= 2.4 (triton-lang/triton#9171)")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == "ok"
