# usage: bash .dev/callR.sh TAG -- two default sweeps (callQ.sh), then the held bidirectional peer probe idle, busy, idle
bash .dev/callQ.sh $1 2 0
. .dev/env.sh
W=/tmp/w; pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
timeout 60 python3 .dev/bidir_probe.py idle1 >> $W/bidir.txt 2>&1
for i in $(seq $(nproc)); do ( timeout 70 python3 -c 'while True: pass' & ); done; sleep 1
timeout 60 python3 .dev/bidir_probe.py busy >> $W/bidir.txt 2>&1; pkill -f 'while True: pass'
timeout 60 python3 .dev/bidir_probe.py idle2 >> $W/bidir.txt 2>&1
cat $W/bidir.txt; pack
