# usage: bash .dev/callL2.sh TAG -- the launch study in five slots (three quiet processes, one with every CPU busy,
# a fourth quiet one after it): one small sweep each, nccl-tests (broadcast, reduce, all_reduce in graphs, one
# process driving every GPU) in the same slot; then two default sweeps (callQ.sh)
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W /tmp/anchors; G=$(nvidia-smi -L | wc -l)
for f in .anx/*.xz; do python3 -c "import lzma,sys; open(sys.argv[2],\"wb\").write(lzma.open(sys.argv[1]).read())" $f /tmp/anchors/$(basename $f .xz); done; cp .anx/with-torch-nccl.sh /tmp/anchors/; chmod +x /tmp/anchors/*
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -30; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
SMALL="sizes.max=64KiB copy.gpus=[each] copy.ops=[h2d,d2h,bidir,d2d] copy.memory=[pinned] p2p.ops=[uni,bidir] copy.engine=[ce] p2p.engine=[ce]"
one() {  # $1: label
  for op in broadcast reduce all_reduce; do timeout 40 /tmp/anchors/with-torch-nccl.sh ${op}_perf -b 8 -e 64K -f 8 -g $G -n 200 -w 50 -G 10 -c 1 >> $W/nccl-tests-$1.txt 2>&1; done
  s=$(date +%s); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-small-$1 progress=false $SMALL > $W/log-small-$1.txt 2>&1; echo "small-$1 rc=$? $(( $(date +%s)-s )) s"
  pack
}
for k in 1 2 3; do one $k; done
for i in $(seq $(nproc)); do ( timeout 200 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 2
one 4
python3 scripts/launch_study.py $R/*/$TAG-small-1 $R/*/$TAG-small-2 $R/*/$TAG-small-3 $R/*/$TAG-small-busy $R/*/$TAG-small-4 > $W/launch-study.md 2>&1
grep -E "^held|^eager" $W/launch-study.md
for f in $W/nccl-tests-*.txt; do echo "== $f"; grep -E "^ +(8|64|512|4096|32768|65536) " $f | awk '{print $1, $6, $10}' | tr '\n' ';'; echo; done
pack
bash .dev/callQ.sh $TAG 2 0
