# usage: bash .dev/callR5.sh TAG -- a new host's two default sweeps (callQ.sh TAG 2 0, phase-timed), then
# staged_ring_probe.py (v2: per-slot waits) in five slots: three quiet, every CPU busy, quiet
. .dev/env.sh
T0=$(date +%s); W=/tmp/w
timeout 220 bash .dev/callQ.sh $1 2 0
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
one() { s=$(date +%s); timeout 60 python3 .dev/staged_ring_probe.py $1 >> $W/staged-ring.txt 2>&1; echo "ring-$1 rc=$? $(( $(date +%s)-s )) s"; pack; }
one 1 || tail -5 $W/staged-ring.txt
one 2; one 3
for i in $(seq $(nproc)); do ( timeout 70 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 1
one 4
sort -k2,4 -s $W/staged-ring.txt | cut -c1-100
echo "callR5 $(( $(date +%s)-T0 )) s"
