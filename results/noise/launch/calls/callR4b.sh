. .dev/env.sh
W=/tmp/w; rm -f $W/staged-state.txt
pack() { tar -C /tmp -czf $OUT/w.tgz w 2>/dev/null; }
one() { s=$(date +%s); timeout 60 python3 .dev/staged_state_probe.py $1 >> $W/staged-state.txt 2>&1; echo "ss-$1 rc=$? $(( $(date +%s)-s )) s"; pack; }
one 1 || tail -5 $W/staged-state.txt
one 2; one 3
for i in $(seq $(nproc)); do ( timeout 65 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'
sort -k2,3 -s $W/staged-state.txt | cut -c1-70
