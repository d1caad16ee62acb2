"""Triton kernels that move bytes with the SMs: a copy and a link-latency pointer chase.

`Tensor.copy_` hands transfers to the copy engines; whole-machine traffic also needs the SMs to
load and store across the links themselves, as nvbandwidth's *_sm tests do. A kernel reaches
three kinds of memory through plain addresses: pinned host memory (UVA maps cudaHostAlloc'd
pages into every GPU at the host address), a peer GPU's memory (once peer access is enabled
from the GPU running the kernel), and its own memory. Triton's launcher resolves each tensor
argument with cuPointerGetAttribute, so pinned and peer tensors are passed as they are.

Triton ships with CUDA builds of torch; it is imported on first use, so CPU-only installs can
still import this module (`available()` tells whether the kernels can run).
"""
from __future__ import annotations

import functools
import importlib.util
from types import SimpleNamespace

from bench import ConfigError, lazy

torch = lazy.module("torch")

# triton.language, bound by _kernels(): the kernels below look it up in this module's globals
# when Triton compiles (or interprets) them, after the lazy import.
tl = None

COPY_BLOCK = 2048  # int64 words per program per loop step: 16 KiB, eight 16-byte loads in flight per thread
COPY_WARPS = 4
PROGRAMS_PER_SM = 4  # a persistent grid: ~8 MiB in flight on an H100/H200, far above the links' bandwidth-delay product
TAIL = 128  # the word part is cut to a multiple of 128 bytes (16 words) so its mask keeps 16-byte vectors
LINE = 128  # bytes in a GPU cache line: ring slots at least this far apart share no line


def need(wanted: list[str]) -> None:
    """ConfigError in one line when settings in `wanted` (e.g. 'copy.engine=sm') need Triton and it is missing."""
    if wanted and importlib.util.find_spec("triton") is None:
        raise ConfigError(f"{' and '.join(wanted)} {'run' if len(wanted) > 1 else 'runs'} Triton kernels, and triton "
                          "is not installed (CUDA builds of torch ship it): pip install triton, or leave them out")


def ce_copy(dst, src) -> None:
    """The copy engines' copy (cudaMemcpyAsync on the current stream), as sm_copy is the SMs'."""
    dst.copy_(src, non_blocking=True)


def available() -> bool:
    """True when the kernels can run here: a CUDA GPU and Triton installed."""
    return torch.cuda.is_available() and importlib.util.find_spec("triton") is not None


def _copy_kernel(dst_w, src_w, n_words, dst_b, src_b, tail_start, n_bytes, BLOCK: tl.constexpr, TAIL: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    for block in range(pid, tl.cdiv(n_words, BLOCK), tl.num_programs(0)):
        start = tl.cast(block, tl.int64) * BLOCK  # 64-bit: word offsets pass 2**31 on large buffers
        mask = offs < n_words - start  # n_words and start are multiples of 16: the mask keeps 16-byte vectors
        tl.store(dst_w + start + offs, tl.load(src_w + start + offs, mask=mask), mask=mask)
    if pid == 0:
        tail = tail_start + tl.arange(0, TAIL)
        tail_mask = tail < n_bytes
        tl.store(dst_b + tail, tl.load(src_b + tail, mask=tail_mask), mask=tail_mask)


def _chase_kernel(ring, start, steps, out, sm):
    # One program per SM, and only program `sm` chases: nvbandwidth's way of choosing the SM,
    # whose distance to the link shows in its latency (802-865 ns to the peer on 2x H200).
    if tl.program_id(0) == sm:
        idx = tl.cast(start, tl.int64)
        for _ in range(steps):
            # volatile: no cache on the way may answer, so every load crosses the link
            idx = tl.load(ring + idx, volatile=True)
        tl.store(out, idx)  # the loop's result is used: the compiler keeps every load


@functools.cache
def _kernels() -> SimpleNamespace:
    global tl
    import triton   # optional, and slow to import: only an SM copy or the chase kernel needs it
    import triton.language

    tl = triton.language
    # Sizes and step counts change from call to call: specializing on them would compile again,
    # possibly inside a CUDA graph capture. n_words stays specialized (always a multiple of 16).
    return SimpleNamespace(
        copy=triton.jit(_copy_kernel, do_not_specialize=["tail_start", "n_bytes"]),
        chase=triton.jit(_chase_kernel, do_not_specialize=["start", "steps", "sm"]),
    )


def _check_bytes(dst: torch.Tensor, src: torch.Tensor) -> None:
    for name, t in (("dst", dst), ("src", src)):
        if t.dtype != torch.uint8 or not t.is_contiguous():
            raise ValueError(f"sm_copy: {name} must be a contiguous uint8 tensor, got {t.dtype}")
    if dst.numel() != src.numel():
        raise ValueError(f"sm_copy: dst has {dst.numel()} bytes, src {src.numel()}")


def _copy_worker(dst: torch.Tensor, src: torch.Tensor, device: int | None) -> int:
    if device is not None:
        return device
    for t in (src, dst):
        if t.device.type == "cuda":
            return t.device.index
    raise ValueError("sm_copy: both tensors are in host memory; name the GPU that copies with device=")


_peers_enabled: set[tuple[int, int]] = set()


def _reach(worker: int, t: torch.Tensor) -> None:
    """Make `t` addressable by kernels on GPU `worker`, or say why it cannot be."""
    capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    if t.device.type == "cpu":
        # Checked eagerly only: in a capture (after an eager call) Triton's launcher still refuses
        # memory CUDA does not know, and no query beyond the launcher's own runs mid-capture.
        if not capturing and not t.is_pinned():
            raise ValueError("host tensors must be pinned (pin_memory=True): kernels reach them through UVA")
        return
    peer = t.device.index
    if peer == worker or (worker, peer) in _peers_enabled:
        return
    if not torch.cuda.can_device_access_peer(worker, peer):
        raise RuntimeError(f"cuda:{worker} has no peer access to cuda:{peer}")
    if capturing:
        raise RuntimeError(f"peer access cuda:{worker} -> cuda:{peer} is enabled by an eager call, not in a capture")
    # torch enables peer access from a copy's source GPU to its destination GPU the first time it
    # copies between them (the way its own kernels need it, whatever the allocator); torch has no
    # other public call for it.
    torch.empty(1, dtype=torch.uint8, device=peer).copy_(torch.zeros(1, dtype=torch.uint8, device=worker))
    _peers_enabled.add((worker, peer))


def _launch_copy(dst: torch.Tensor, src: torch.Tensor, max_programs: int):
    """Enqueue the copy on the current device's current stream; returns Triton's compiled kernel."""
    k = _kernels()
    n = dst.numel()
    body = n - n % TAIL
    if dst.data_ptr() % 8 == 0 and src.data_ptr() % 8 == 0:
        dst_w, src_w, n_words = dst[:body].view(torch.int64), src[:body].view(torch.int64), body // 8
    else:  # misaligned buffers: byte words, correct but far from the links' speed
        dst_w, src_w, n_words = dst, src, body
    programs = max(1, min(-(-n_words // COPY_BLOCK), max_programs))
    return k.copy[(programs,)](dst_w, src_w, n_words, dst, src, body, n,
                               BLOCK=COPY_BLOCK, TAIL=TAIL, num_warps=COPY_WARPS)


def sm_copy(dst: torch.Tensor, src: torch.Tensor, device: int | None = None) -> None:
    """Copy src into dst with the SMs of GPU `device`, on its current stream; no host sync, so a
    CUDA graph can capture it (after one eager call, which compiles and enables peer access).

    dst and src are contiguous uint8 tensors of one size, each in pinned host memory, on `device`,
    or on a GPU that `device` has peer access to. `device` defaults to src's GPU (the GPU pushes:
    its loads are local, its stores cross the link, nvbandwidth's write direction), or dst's when
    src is in host memory (the GPU pulls). Data moves as 8-byte words, 16-byte vectors where both
    pointers are 16-byte aligned, with a byte tail; buffers not 8-byte aligned move byte by byte.
    """
    _check_bytes(dst, src)
    worker = _copy_worker(dst, src, device)
    for t in (dst, src):
        _reach(worker, t)
    if dst.numel() == 0:
        return
    sms = torch.cuda.get_device_properties(worker).multi_processor_count
    with torch.cuda.device(worker):
        _launch_copy(dst.view(-1), src.view(-1), PROGRAMS_PER_SM * sms)


def make_ring(nbytes: int, stride: int = LINE, device: str | torch.device = "cpu", pin: bool = False,
              seed: int = 0) -> torch.Tensor:
    """A pointer-chase ring in an int64 tensor of nbytes // 8 elements.

    Slots sit every `stride` bytes (a multiple of 8, at least one cache line by default); each
    holds the element index of the next slot, in a random order (seeded) so neither caches nor
    prefetchers guess the next address. Following it from index 0 visits every slot once before
    coming back to 0. The tensor is made on `device`, pinned when `pin` (host memory only).
    """
    if stride < 8 or stride % 8:
        raise ValueError(f"make_ring: stride={stride} must be a positive multiple of 8 bytes")
    slots = nbytes // stride
    if slots < 2:
        raise ValueError(f"make_ring: {nbytes} bytes hold {slots} slot(s) of {stride} bytes; a ring needs 2")
    order = torch.randperm(slots, generator=torch.Generator().manual_seed(seed)) * (stride // 8)
    ring = torch.zeros(nbytes // 8, dtype=torch.int64)
    ring[order] = order.roll(-1)
    if torch.device(device).type != "cpu":
        return ring.to(device)
    return ring.pin_memory() if pin else ring


def follow(ring: torch.Tensor, steps: int, start: int = 0) -> int:
    """The index a chase of `steps` loads from `start` ends on, computed on the host (the data check)."""
    nxt = ring.cpu().tolist()
    idx = start
    for _ in range(steps):
        idx = nxt[idx]
    return idx


def sm_count(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def pointer_chase(ring: torch.Tensor, steps: int, device: int | None = None, sm: int = 0) -> torch.Tensor:
    """Enqueue one thread on SM `sm` of GPU `device` (default: the current one) doing `steps`
    dependent 8-byte loads around `ring` from index 0, on that GPU's current stream; returns the
    one-element int64 tensor on that GPU where the kernel writes the index it ends on.

    `ring` (from make_ring) is in pinned host memory, on a peer GPU, or on `device` itself.
    """
    if ring.dtype != torch.int64 or not ring.is_contiguous():
        raise ValueError(f"pointer_chase: ring must be a contiguous int64 tensor, got {ring.dtype}")
    worker = torch.cuda.current_device() if device is None else device
    _reach(worker, ring)
    out = torch.empty(1, dtype=torch.int64, device=f"cuda:{worker}")
    with torch.cuda.device(worker):
        _kernels().chase[(sm_count(worker),)](ring, 0, steps, out, sm, num_warps=1)
    return out
