# usage: bash .dev/callH1.sh TAG -- a held-out host: two default sweeps, then staged_state_probe.py (v2) in four quiet slots
. .dev/env.sh
T0=$(date +%s); W=/tmp/w
timeout 200 bash .dev/callQ.sh $1 2 0
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
one() { s=$(date +%s); timeout 40 python3 .dev/staged_state_probe.py $1 >> $W/staged-state.txt 2>&1; echo "ss-$1 rc=$? $(( $(date +%s)-s )) s"; pack; }
one 1 || tail -5 $W/staged-state.txt
one 2; one 3; one 4
sort -k2,3 -s $W/staged-state.txt | cut -c1-62
echo "callH1 $(( $(date +%s)-T0 )) s"
