"""Summary of stream_probe.py's lines: per (variant, kind, op), each process's default, ring median, and streams' range."""
import sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 5 or not p[3].startswith("default="):
        continue
    label, kind, op = p[0], p[1], p[2]
    variant = "cdmc1" if label.endswith("-cdmc1") else "plain"
    d = float(p[3].split("=")[1]); r = float(p[4].split("=")[1])
    st = [float(x) for x in p[5].split("=")[1].split(",")]
    hi = [float(x) for x in p[6].split("=")[1].split(",")]
    rows[variant, kind, op].append((label.replace("-cdmc1", ""), d, r, min(st), max(st), min(hi), max(hi)))
for key, procs in sorted(rows.items()):
    def far(vals):
        m = sorted(vals)[len(vals) // 2]
        return max(abs(v / m - 1) for v in vals)
    print(" ".join(key), f"default far {far([x[1] for x in procs]):.1%} ring far {far([x[2] for x in procs]):.1%} | "
          + " ".join(f"{x[0]}:{x[1]:.2f}/{x[2]:.2f}[{x[3]:.2f}-{x[4]:.2f}|h{x[5]:.2f}-{x[6]:.2f}]" for x in procs))
