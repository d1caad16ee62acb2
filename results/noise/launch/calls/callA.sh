# usage: bash .dev/callA.sh TAG -- two default sweeps (new host), doctor, gate both orders; tests/gpu whole; a profiled collectives run
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W
T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
python3 -m bench plan=true > $W/plan.txt 2>&1; grep -m1 total $W/plan.txt
for k in 1 2; do
  ( while sleep 0.1; do f=$(ls $R/*/$TAG-default-$k/samples.csv 2>/dev/null); [ -n "$f" ] && echo "$(date +%s.%N) $(wc -l < $f)"; done ) > $W/poll-$k.txt &
  P=$!
  s=$(date +%s%N); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; kill $P
  grep -m1 "^result" $W/log-default-$k.txt; pack
done
for k in 1 2; do python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$? $(grep -m1 judged $W/doctor-$k.txt | cut -c1-160)"; done
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate12.md 2>&1; echo "gate 1v2 rc=$? $(grep -m1 'regression(s)' $W/gate12.md | cut -c1-120)"
python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-1 > $W/gate21.md 2>&1; echo "gate 2v1 rc=$? $(grep -m1 'regression(s)' $W/gate21.md | cut -c1-120)"
pack
left=$(( 560 - ($(date +%s)-T0) - 45 )); echo "tests budget $left s"
s=$(date +%s); timeout $left python3 -m pytest -v -p no:cacheprovider --durations=25 tests/gpu > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"; grep -E "passed|failed|FAILED|Error" $W/tests-gpu.txt | tail -8; pack
left=$(( 575 - ($(date +%s)-T0) )); echo "profile budget $left s"
if [ $left -gt 25 ]; then
  mkdir -p $W/prof; s=$(date +%s%N)
  XB_PROFILE=$W/prof/coll PYTHONPATH=$PWD/.dev/prof:$PYTHONPATH timeout $left python3 -m bench suite=collectives out_dir=$R run_id=$TAG-prof progress=false > $W/log-prof.txt 2>&1
  echo "prof rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; ls $W/prof | head; pack
fi
