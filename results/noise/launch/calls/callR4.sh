# usage: bash .dev/callR4.sh TAG -- a new host's two default sweeps (callQ.sh TAG 2 0), then staged_state_probe.py
# in four slots (three quiet, then every CPU busy)
. .dev/env.sh
T0=$(date +%s); W=/tmp/w
timeout 200 bash .dev/callQ.sh $1 2 0
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
one() { s=$(date +%s); timeout 40 python3 .dev/staged_state_probe.py $1 >> $W/staged-state.txt 2>&1; echo "ss-$1 rc=$? $(( $(date +%s)-s )) s"; pack; }
one 1 || tail -5 $W/staged-state.txt
one 2; one 3
for i in $(seq $(nproc)); do ( timeout 45 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'
sort -k2,3 -s $W/staged-state.txt | grep -E "suite|small" | cut -c1-60
echo "callR4 $(( $(date +%s)-T0 )) s"
