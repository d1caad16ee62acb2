# usage: bash .dev/callT2.sh TAG -- a new host: two default sweeps (callQ.sh TAG 2 0), the p2p suite's small sweep
# (4-64 KiB, uni and bidir, ce, peer and staged) in five slots (three quiet, every CPU busy, a fourth quiet) and
# launch_study.py, with nvbandwidth's latency tests beside the first and last slot
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; T0=$(date +%s); mkdir -p /tmp/anchors
python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" .anx/nvbandwidth.xz /tmp/anchors/nvbandwidth; chmod +x /tmp/anchors/nvbandwidth
timeout 220 bash .dev/callQ.sh $TAG 2 0
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
nvb() { for t in host_device_latency_sm device_to_device_latency_sm; do timeout 30 /tmp/anchors/nvbandwidth -t $t >> $W/nvbandwidth-$1.txt 2>&1; done; echo "nvb-$1 rc=$?"; }
SMALL="suite=p2p sizes.max=64KiB p2p.ops=[uni,bidir] p2p.engine=[ce]"
one() { s=$(date +%s); timeout 60 python3 -m bench out_dir=$R run_id=$TAG-p2p-$1 progress=false $SMALL > $W/log-p2p-$1.txt 2>&1; echo "p2p-$1 rc=$? $(( $(date +%s)-s )) s"; pack; }
nvb 1; one 1; one 2; one 3
for i in $(seq $(nproc)); do ( timeout 70 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 2
one 4; nvb 4
python3 scripts/launch_study.py $R/*/$TAG-p2p-1 $R/*/$TAG-p2p-2 $R/*/$TAG-p2p-3 $R/*/$TAG-p2p-busy $R/*/$TAG-p2p-4 > $W/p2p-launch-study.md 2>&1
grep -E "^held" $W/p2p-launch-study.md; grep -i "staged" $W/p2p-launch-study.md | grep -i held | cut -c1-200
pack; echo "callT2 $(( $(date +%s)-T0 )) s"
