# usage: bash .dev/callY.sh TAG -- the flag probe in four slots (three quiet, one with every CPU busy), then two
# default sweeps (callQ.sh)
. .dev/env.sh
TAG=$1; W=/tmp/w; mkdir -p $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
for k in 1 2 3; do s=$(date +%s); timeout 60 python3 .dev/flag_probe.py $k >> $W/flag-probe.txt 2>&1; echo "flag-$k rc=$? $(( $(date +%s)-s )) s"; done
for i in $(seq $(nproc)); do ( timeout 80 python3 -c 'while True: pass' & ); done; sleep 1
timeout 60 python3 .dev/flag_probe.py busy >> $W/flag-probe.txt 2>&1; pkill -f 'while True: pass'; sleep 2
grep round-trip $W/flag-probe.txt | cut -c1-400; pack
bash .dev/callQ.sh $TAG 2 0
