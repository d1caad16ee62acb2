# usage: bash .dev/callP7.sh TAG -- 2 GPUs: the p2p suite's small sweep (4-64 KiB, uni and bidir, ce) in five slots
# (three quiet, every CPU busy, a fourth quiet) and launch_study.py
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W; T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
grep -q host_id $W/machine.txt 2>/dev/null || { nvidia-smi > $W/machine-p7.txt 2>&1; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])' >> $W/machine-p7.txt; }
grep -h host_id $W/machine*.txt
SMALL="suite=p2p sizes.max=64KiB p2p.ops=[uni,bidir] p2p.engine=[ce]"
one() { s=$(date +%s); timeout 40 python3 -m bench out_dir=$R run_id=$TAG-p2p-$1 progress=false $SMALL > $W/log-p2p-$1.txt 2>&1; echo "p2p-$1 rc=$? $(( $(date +%s)-s )) s"; pack; }
for k in 1 2 3; do one $k; done
for i in $(seq $(nproc)); do ( timeout 40 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 1
one 4
python3 scripts/launch_study.py $R/*/$TAG-p2p-1 $R/*/$TAG-p2p-2 $R/*/$TAG-p2p-3 $R/*/$TAG-p2p-busy $R/*/$TAG-p2p-4 > $W/p2p-launch-study.md 2>&1
grep -E "^held" $W/p2p-launch-study.md; grep "staged held" $W/p2p-launch-study.md
pack; echo "callP7 $(( $(date +%s)-T0 )) s"
