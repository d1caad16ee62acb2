"""python run_patched.py ARGS...: xferbench with bench.measure.latch.HOLD_MARGIN_S from $XB_HOLD_MARGIN_S, and with
$XB_FAST_HELD=1 a held peer leg's run of copies issued from one stream context, its cudaMemcpyAsync bound once."""
import os, runpy, sys
import bench.measure.latch as latch
latch.HOLD_MARGIN_S = float(os.environ.get("XB_HOLD_MARGIN_S", latch.HOLD_MARGIN_S))
print("HOLD_MARGIN_S", latch.HOLD_MARGIN_S, "FAST_HELD", os.environ.get("XB_FAST_HELD", "0"), flush=True)
if os.environ.get("XB_FAST_HELD") == "1":
    import torch
    from bench.measure import cudart
    import bench.suites.p2p.measure as m

    def copier(dst, src):
        fn = cudart._memcpy_async()
        args = (dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size(), cudart.MEMCPY_DEFAULT,
                torch.cuda.current_stream().cuda_stream)
        def issue():
            code = fn(*args)
            if code != 0:
                raise RuntimeError(f"cudaMemcpyAsync failed: {code}")
        return issue

    def copies(leg, count):
        if leg.staging is None and leg.copy is cudart.copy:
            with torch.cuda.stream(leg.s_src):
                issue = copier(leg.dst, leg.src)
                for _ in range(count):
                    issue()
            return
        for _ in range(count):
            m._copy_once(leg)

    def enqueue(legs, n):
        cur = torch.cuda.current_stream()
        start = torch.cuda.Event(enable_timing=True)
        start.record(cur)
        parts = {}
        for name, leg in legs:
            leg.s_src.wait_event(start)
            begin = torch.cuda.Event(enable_timing=True)
            begin.record(leg.s_src)
            parts[name] = [begin]
        for count in (min(n, 1), n - 1):
            for _, leg in legs:
                copies(leg, count)
        for name, leg in legs:
            end = torch.cuda.Event(enable_timing=True)
            end.record(leg.s_src)
            parts[name] = (parts[name][0], end)
        for _, leg in legs:
            cur.wait_stream(leg.s_src)
        return parts if len(legs) > 1 else {}
    m._enqueue = enqueue
sys.argv = ["bench"] + sys.argv[1:]
runpy.run_module("bench", run_name="__main__")
