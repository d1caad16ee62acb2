import sys, time
t = time.time()
for line in sys.stdin:
    print(f"{time.time() - t:7.2f} {line}", end="", flush=True)
print(f"{time.time() - t:7.2f} EOF")
