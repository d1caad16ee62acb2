# usage: bash .dev/callHG.sh TAG -- collectives in CUDA graphs whose replays are held behind the ranks' shared start
# word (working-tree patch), one quick try bounded at 60 s, then five slots (three quiet, busy, quiet)
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -30; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
one() {  # $1: label
  s=$(date +%s); timeout $2 python3 -m bench out_dir=$R run_id=$TAG-hgraph-$1 progress=false suite=collectives sizes.max=64KiB launch=graph > $W/log-hgraph-$1.txt 2>&1; rc=$?; echo "hgraph-$1 rc=$rc $(( $(date +%s)-s )) s"
  pack; return $rc
}
one 1 60 || { tail -5 $W/log-hgraph-1.txt; exit 1; }
for k in 2 3; do one $k 60; done
for i in $(seq $(nproc)); do ( timeout 70 python3 -c 'while True: pass' & ); done; sleep 1
one busy 60; pkill -f 'while True: pass'; sleep 2
one 4 60
python3 - $R/*/$TAG-hgraph-1 $R/*/$TAG-hgraph-2 $R/*/$TAG-hgraph-3 $R/*/$TAG-hgraph-busy $R/*/$TAG-hgraph-4 <<'PY' | tee $W/hgraph-study.txt
import sys
import pandas as pd
from bench.results import load
pd.set_option("display.width", 200)
rows = load(sys.argv[1:])
k = rows[(rows.part == "total") & (rows.status == "ok") & (rows.launch == "graph") & (rows.size_bytes <= 65536)]
t = (k.groupby(["op", "api", "size_bytes", "run_id"])["time_s"].median() * 1e6).unstack("run_id")
far = (t.div(t.median(axis=1), axis=0) - 1).abs().max(axis=1)
print(t.assign(far=far).round(3).to_string())
print(f"held graph: {(far <= 0.05).sum()} of {len(far)} within ±5%, farthest {far.max():.1%}")
PY
pack
