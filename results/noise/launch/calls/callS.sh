# usage: bash .dev/callS.sh -- the state probe, three processes each, one copies run with every CPU busy
. .dev/env.sh
W=/tmp/w; mkdir -p $W
pack() { tar -C /tmp -czf $OUT/w.tgz w 2>/dev/null; }
{ date -u; nvidia-smi; nproc; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
P=results/noise/launch/calls/state_probe.py
for k in 1 2 3; do
  echo "== process $k" >> $W/probe.txt
  timeout 60 python3 $P copies >> $W/probe.txt 2>&1
  timeout 60 python3 $P nccl >> $W/probe.txt 2>&1
  pack
done
echo "== busy" >> $W/probe.txt
for c in $(seq $(nproc)); do timeout 70 python3 -c 'while True: pass' & done
timeout 60 python3 $P copies >> $W/probe.txt 2>&1
timeout 60 python3 $P nccl >> $W/probe.txt 2>&1
pkill -f 'while True' ; wait 2>/dev/null
for k in 1 2; do timeout 60 python3 $P staged >> $W/probe.txt 2>&1; done
pack; cat $W/probe.txt | grep -v Warning
