# usage: bash .dev/callX.sh TAG -- five slots (three quiet, one with every CPU busy, one quiet after):
# split_probe.py (NCCL INFO log per slot), held collectives 8 B-64 KiB (suite), nccl-tests broadcast/reduce
# in graphs; then two default sweeps (callQ.sh)
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W /tmp/anchors
for f in .anx/*.xz; do python3 -c "import lzma,sys; open(sys.argv[2],\"wb\").write(lzma.open(sys.argv[1]).read())" $f /tmp/anchors/$(basename $f .xz); done; cp .anx/with-torch-nccl.sh /tmp/anchors/; chmod +x /tmp/anchors/*
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -30; numactl -H 2>&1 | head; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
one() {  # $1: label
  s=$(date +%s); NCCL_DEBUG=INFO NCCL_DEBUG_FILE=$W/nccl-$1.%h.%p.log timeout 60 python3 .dev/split_probe.py $1 >> $W/probe.txt 2>&1; echo "probe-$1 rc=$? $(( $(date +%s)-s )) s"
  for op in broadcast reduce; do timeout 30 /tmp/anchors/with-torch-nccl.sh ${op}_perf -b 8 -e 4K -f 8 -g 2 -n 200 -w 50 -G 10 -c 1 >> $W/nccl-tests-$1.txt 2>&1; done
  s=$(date +%s); timeout 90 python3 -m bench out_dir=$R run_id=$TAG-coll-$1 progress=false suite=collectives sizes.max=64KiB > $W/log-coll-$1.txt 2>&1; echo "coll-$1 rc=$? $(( $(date +%s)-s )) s"
  pack
}
for k in 1 2 3; do one $k; done
for i in $(seq $(nproc)); do ( timeout 150 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 2
one 4
grep rank $W/probe.txt | sort
python3 scripts/launch_study.py $R/*/$TAG-coll-1 $R/*/$TAG-coll-2 $R/*/$TAG-coll-3 $R/*/$TAG-coll-busy $R/*/$TAG-coll-4 > $W/coll-study.md 2>&1
grep "held" $W/coll-study.md | grep -E "broadcast|reduce " | cut -c1-200
for f in $W/nccl-tests-*.txt; do echo "== $f"; grep -E "^ +(8|64|512|4096) " $f | awk '{print $1, $6, $10}' | tr '\n' ';'; echo; done
pack
bash .dev/callQ.sh $TAG 2 0
