# usage: bash .dev/callH.sh -- staged hand-off probe: three processes, one with every CPU busy, 8 B and 4 KiB
. .dev/env.sh
W=/tmp/w; mkdir -p $W
pack() { tar -C /tmp -czf $OUT/w.tgz w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
P=results/noise/launch/calls/staged_handoff.py
for k in 1 2 3; do
  for s in 8 4096; do echo "== process $k size $s" >> $W/probe.txt; timeout 60 python3 $P $s >> $W/probe.txt 2>&1; done
  pack
done
for c in $(seq $(nproc)); do timeout 50 python3 -c 'while True: pass' & done
for s in 8 4096; do echo "== busy size $s" >> $W/probe.txt; timeout 45 python3 $P $s >> $W/probe.txt 2>&1; done
pkill -f 'while True' ; wait 2>/dev/null
pack; grep -v Warning $W/probe.txt
