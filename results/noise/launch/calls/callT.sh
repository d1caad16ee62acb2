# usage: bash .dev/callT.sh TAG [QUICK] -- five slots (three quiet, one with every CPU busy, one quiet after): the stream
# probe (held collectives on the default stream and on each of eight streams), held collectives 8 B-64 KiB
# (suite, each held trial on the next of a ring of eight streams), nccl-tests broadcast/reduce in graphs
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W /tmp/anchors; G=$(nvidia-smi -L | wc -l)
for f in .anx/*.xz; do python3 -c "import lzma,sys; open(sys.argv[2],\"wb\").write(lzma.open(sys.argv[1]).read())" $f /tmp/anchors/$(basename $f .xz); done; cp .anx/with-torch-nccl.sh /tmp/anchors/; chmod +x /tmp/anchors/*
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -30; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt; python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'
one() {  # $1: label
  s=$(date +%s); timeout 60 python3 .dev/stream_probe.py $1 >> $W/probe.txt 2>&1; echo "probe-$1 rc=$? $(( $(date +%s)-s )) s"
  s=$(date +%s); CUDA_DEVICE_MAX_CONNECTIONS=1 timeout 60 python3 .dev/stream_probe.py $1-cdmc1 >> $W/probe.txt 2>&1; echo "probe1-$1 rc=$? $(( $(date +%s)-s )) s"
  for op in broadcast reduce; do timeout 30 /tmp/anchors/with-torch-nccl.sh ${op}_perf -b 8 -e 4K -f 8 -g $G -n 200 -w 50 -G 10 -c 1 >> $W/nccl-tests-$1.txt 2>&1; done
  s=$(date +%s); timeout 90 python3 -m bench out_dir=$R run_id=$TAG-coll-$1 progress=false suite=collectives sizes.max=64KiB launch=all > $W/log-coll-$1.txt 2>&1; echo "coll-$1 rc=$? $(( $(date +%s)-s )) s"
  pack
}
for k in 1 2 3; do one $k; done
for i in $(seq $(nproc)); do ( timeout 150 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 2
one 4
python3 .dev/probe_sum.py $W/probe.txt; grep -i "fail\|error" $W/probe.txt | head -5
python3 scripts/launch_study.py $R/*/$TAG-coll-1 $R/*/$TAG-coll-2 $R/*/$TAG-coll-3 $R/*/$TAG-coll-busy $R/*/$TAG-coll-4 > $W/coll-study.md 2>&1
grep "^held" $W/coll-study.md; grep "held" $W/coll-study.md | grep -E "broadcast|reduce " | cut -c1-200
for f in $W/nccl-tests-*.txt; do echo "== $f"; grep -E "^ +(8|64|512|4096) " $f | awk '{print $1, $6, $10}' | tr '\n' ';'; echo; done
pack
python3 - $R/*/$TAG-coll-1 $R/*/$TAG-coll-2 $R/*/$TAG-coll-3 $R/*/$TAG-coll-busy $R/*/$TAG-coll-4 <<'PY'
import sys
from bench.results import load
rows = load(sys.argv[1:])
k = rows[(rows.part == "total") & (rows.status == "ok") & (rows.launch == "graph") & (rows.size_bytes <= 65536)]
t = (k.groupby(["op", "api", "size_bytes", "run_id"])["time_s"].median() * 1e6).unstack("run_id")
far = (t.div(t.median(axis=1), axis=0) - 1).abs().max(axis=1)
print(f"graph: {(far <= 0.05).sum()} of {len(far)} within ±5%, farthest {far.max():.1%}")
print(t[far > 0.05].round(2).to_string())
PY
