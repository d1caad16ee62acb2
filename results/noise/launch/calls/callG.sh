# usage: bash .dev/callG.sh TAG -- collectives in CUDA graphs (suite=collectives launch=graph, 8 B-64 KiB) in five slots
# (three quiet, one with every CPU busy, a fourth quiet), nccl-tests broadcast/reduce/all_reduce in graphs beside
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W /tmp/anchors; G=$(nvidia-smi -L | wc -l)
for f in .anx/*.xz; do python3 -c "import lzma,sys; open(sys.argv[2],\"wb\").write(lzma.open(sys.argv[1]).read())" $f /tmp/anchors/$(basename $f .xz); done; cp .anx/with-torch-nccl.sh /tmp/anchors/; chmod +x /tmp/anchors/*
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -30; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
one() {  # $1: label
  for op in broadcast reduce all_reduce; do timeout 30 /tmp/anchors/with-torch-nccl.sh ${op}_perf -b 8 -e 64K -f 8 -g $G -n 200 -w 50 -G 10 -c 1 >> $W/nccl-tests-$1.txt 2>&1; done
  s=$(date +%s); timeout 60 python3 -m bench out_dir=$R run_id=$TAG-graph-$1 progress=false suite=collectives sizes.max=64KiB launch=graph > $W/log-graph-$1.txt 2>&1; echo "graph-$1 rc=$? $(( $(date +%s)-s )) s"
  pack
}
for k in 1 2 3; do one $k; done
for i in $(seq $(nproc)); do ( timeout 100 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 2
one 4
python3 - $R/*/$TAG-graph-1 $R/*/$TAG-graph-2 $R/*/$TAG-graph-3 $R/*/$TAG-graph-busy $R/*/$TAG-graph-4 <<'PY' | tee $W/graph-study.txt
import sys
import pandas as pd
from bench.results import load
pd.set_option("display.width", 200)
rows = load(sys.argv[1:])
k = rows[(rows.part == "total") & (rows.status == "ok") & (rows.launch == "graph") & (rows.size_bytes <= 65536)]
t = (k.groupby(["op", "api", "size_bytes", "run_id"])["time_s"].median() * 1e6).unstack("run_id")
far = (t.div(t.median(axis=1), axis=0) - 1).abs().max(axis=1)
print(t.assign(far=far).round(3).to_string())
print(f"graph: {(far <= 0.05).sum()} of {len(far)} within ±5%, farthest {far.max():.1%}")
PY
for f in $W/nccl-tests-*.txt; do echo "== $f"; grep -E "^ +(8|4096|65536) " $f | awk '{print $1, $6, $10}' | tr '\n' ';'; echo; done
pack
