# The plan-time pace readings' spread: 500 readings of timing.host_pace(), their percentiles (µs)
import statistics, time
from bench.measure import timing
t = time.perf_counter()
r = sorted(timing.host_pace() for _ in range(500))
q = lambda p: round(r[int(p * (len(r) - 1))] * 1e6)
print(f"pace probe: p10 {q(.1)} p25 {q(.25)} p50 {q(.5)} p75 {q(.75)} p90 {q(.9)} µs over {time.perf_counter() - t:.2f} s")
