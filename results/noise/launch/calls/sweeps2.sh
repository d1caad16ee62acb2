# usage: bash .dev/sweeps2.sh TAG -- machine record, two default sweeps (journal polled for per-point wall), gate both orders, doctor
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
for k in 1 2; do
  ( while sleep 0.1; do f=$(ls $R/*/$TAG-default-$k/samples.csv 2>/dev/null); [ -n "$f" ] && echo "$(date +%s.%N) $(wc -l < $f)"; done ) > $W/poll-$k.txt &
  P=$!
  s=$(date +%s); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? $(( $(date +%s)-s )) s"; kill $P
  grep -m3 "points\|estimate\|^result" $W/log-default-$k.txt; pack
done
for k in 1 2; do python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$? $(grep -m1 judged $W/doctor-$k.txt)"; done
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate12.txt 2>&1; echo "gate 1v2 rc=$?"; tail -3 $W/gate12.txt
python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-1 > $W/gate21.txt 2>&1; echo "gate 2v1 rc=$?"; tail -3 $W/gate21.txt
pack
