"""Held collectives A/B: per point, each run's median us per op; new/old ratio; runs named NEW... and OLD...
Usage: python3 ab_held.py NEWDIR... -- OLDDIR..."""
import sys, statistics
import pandas as pd
args = sys.argv[1:]; cut = args.index("--"); new, old = args[:cut], args[cut + 1:]
def med(d):
    df = pd.read_parquet(d + "/samples.parquet")
    df = df[(df.launch == "held") & (df.status == "ok") & (df.part.isin(["total", ""]))]
    keys = ["op", "size_bytes", "api", "world_size", "dtype"]
    return df.groupby(keys).agg(us=("time_s", lambda s: s.median() * 1e6), iters=("iters", "max"))
N, O = [med(d) for d in new], [med(d) for d in old]
idx = N[0].index
rows, ratios, within = [], [], 0
for k in idx:
    n = [x.loc[k, "us"] for x in N if k in x.index]; o = [x.loc[k, "us"] for x in O if k in x.index]
    allv = n + o; m = statistics.median(allv); far = max(abs(v / m - 1) for v in allv)
    r = statistics.median(n) / statistics.median(o); ratios.append(r); within += far <= 0.05
    rows.append(f"| {k[0]} | {k[1]} | {k[3]} | " + " ".join(f"{v:.2f}" for v in n) + " | " + " ".join(f"{v:.2f}" for v in o)
                + f" | {r:.3f} | {far:.1%} | {int(max(x.loc[k,'iters'] for x in N))} / {int(max(x.loc[k,'iters'] for x in O))} |")
print("| op | size | ranks | new (us) | old (us) | new/old | farthest from median of all | max ops a trial new / old |")
print("|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
print(f"points {len(ratios)}; new/old median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}; "
      f"all runs within 5% of their median: {within} of {len(ratios)}")
