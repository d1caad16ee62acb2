"""The host's single-thread pace: np.full(64 KiB) calls a second, median of each 0.5 s over 6 s."""
import time, numpy as np
def rate(seconds):
    n, s = 0, time.perf_counter()
    while time.perf_counter() - s < seconds:
        for i in range(200):
            np.full(65536, i % 251, dtype=np.uint8)
        n += 200
    return n / (time.perf_counter() - s)
series = [rate(0.025) for _ in range(240)]
print("pace k calls/s per 0.5 s:", [round(float(np.median(series[i:i + 20])) / 1e3) for i in range(0, 240, 20)])
