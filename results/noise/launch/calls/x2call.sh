# usage: bash .dev/x2call.sh TAG -- staged probe, profiled collectives and copy+p2p, two default sweeps, gate both orders, doctor
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
G=$(nvidia-smi -L | wc -l)
{ for p in "0 1" "1 0"; do timeout 40 python3 .dev/staged_probe.py $p; done; [ $G -ge 4 ] && timeout 40 python3 .dev/staged_probe.py 1 2; } > $W/staged.txt 2>&1; cat $W/staged.txt | cut -c1-100; pack
s=$(date +%s); XB_PROFILE=$W/coll PYTHONPATH=$PWD/.dev/prof:$PYTHONPATH timeout 90 python3 -m bench suite=collectives out_dir=$R run_id=$TAG-prof-coll progress=false > $W/log-prof-coll.txt 2>&1; echo "prof coll rc=$? $(( $(date +%s)-s )) s"
s=$(date +%s); XB_PROFILE=$W/cp PYTHONPATH=$PWD/.dev/prof:$PYTHONPATH timeout 90 python3 -m bench suite=[copy,p2p] out_dir=$R run_id=$TAG-prof-cp progress=false > $W/log-prof-cp.txt 2>&1; echo "prof copy,p2p rc=$? $(( $(date +%s)-s )) s"; pack
for k in 1 2; do
  ( while sleep 0.05; do f=$(ls $R/*/$TAG-default-$k/samples.csv 2>/dev/null); [ -n "$f" ] && echo "$(date +%s.%N) $(wc -l < $f)"; done ) > $W/poll-$k.txt &
  P=$!
  s=$(date +%s); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? $(( $(date +%s)-s )) s"; kill $P
  grep -m3 "points\|^result" $W/log-default-$k.txt; pack
done
for k in 1 2; do python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$? $(grep -m1 judged $W/doctor-$k.txt)"; done
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate12.txt 2>&1; echo "gate 1v2 rc=$?"; grep -m3 "comparison\|regression(s)\|not gated" $W/gate12.txt
python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-1 > $W/gate21.txt 2>&1; echo "gate 2v1 rc=$?"; grep -m3 "comparison\|regression(s)\|not gated" $W/gate21.txt
pack
