# usage: bash .dev/callSG.sh TAG -- staged copies as one two-GPU graph against eager, both held (staged_graph_probe.py),
# in five slots (three quiet, one with every CPU busy, a fourth quiet); not yet run
. .dev/env.sh
TAG=$1; W=/tmp/w; mkdir -p $W
pack() { tar -C /tmp -czf $OUT/w.tgz w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
one() { s=$(date +%s); timeout 60 python3 .dev/staged_graph_probe.py $1 >> $W/staged-graph.txt 2>&1; echo "sg-$1 rc=$? $(( $(date +%s)-s )) s"; pack; }
one 1 || { tail -5 $W/staged-graph.txt; exit 1; }
for k in 2 3; do one $k; done
for i in $(seq $(nproc)); do ( timeout 70 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 2
one 4
sort -k2,2 -s $W/staged-graph.txt
