# usage: bash .dev/callL.sh TAG -- the launch study: one small sweep three times, then once with every CPU busy
. .dev/env.sh
TAG=$1
R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt; git log --oneline -1 2>/dev/null; pack
SMALL="sizes.max=64KiB copy.gpus=[each] copy.ops=[h2d,d2h,bidir,d2d] copy.memory=[pinned] p2p.ops=[uni,bidir] copy.engine=[ce] p2p.engine=[ce]"
for k in 1 2 3; do
  s=$(date +%s); timeout 110 python3 -m bench out_dir=$R run_id=$TAG-small-$k progress=false $SMALL > $W/log-small-$k.txt 2>&1; echo "small-$k rc=$? $(( $(date +%s)-s )) s"; pack
done
for i in $(seq $(nproc)); do ( timeout 130 python3 -c 'while True: pass' & ); done; sleep 1
s=$(date +%s); timeout 125 python3 -m bench out_dir=$R run_id=$TAG-small-busy progress=false $SMALL > $W/log-busy.txt 2>&1; echo "busy rc=$? $(( $(date +%s)-s )) s"
pkill -f 'while True: pass'; pack
python3 scripts/launch_study.py $R/*/$TAG-small-1 $R/*/$TAG-small-2 $R/*/$TAG-small-3 $R/*/$TAG-small-busy > $W/launch-study.md 2>&1; echo "study rc=$?"; tail -2 $W/launch-study.md
pack
