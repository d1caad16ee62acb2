# usage: bash .dev/final.sh TAG -- the last 4-GPU call: a default sweep of the code before the op
# declarations (.old, main at 0f71534) and one of main, on one host; plans; gate both orders; doctor;
# tests/gpu; nccl-tests beside the held collectives; the pipeline's quick default. Packed into $OUT/w.tgz.
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
sweep() {  # $1: label, $2: source tree
  (cd $2 && PYTHONPATH=/tmp/site:$PWD python3 -m bench plan=true) > $W/plan-$1.txt 2>&1
  ( while sleep 0.1; do f=$(ls $R/*/$TAG-$1/samples.csv 2>/dev/null); [ -n "$f" ] && echo "$(date +%s.%N) $(wc -l < $f)"; done ) > $W/poll-$1.txt &
  P=$!; s=$(date +%s%N)
  (cd $2 && PYTHONPATH=/tmp/site:$PWD timeout 150 python3 -m bench out_dir=$R run_id=$TAG-$1 progress=false) > $W/log-$1.txt 2>&1
  echo "$1 rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms; plan: $(grep -m1 total $W/plan-$1.txt)"; kill $P; grep -m1 "^result" $W/log-$1.txt; pack
}
sweep before .old
sweep after .
python3 -m bench.cli.doctor $R/*/$TAG-after > $W/doctor-after.txt 2>&1; echo "doctor after rc=$? $(grep -m1 verdict $W/doctor-after.txt | cut -c1-200)"
python3 -m bench.cli.doctor $R/*/$TAG-before > $W/doctor-before.txt 2>&1; echo "doctor before rc=$?"
python3 -m bench.cli.compare $R/*/$TAG-before $R/*/$TAG-after > $W/gate-before-after.md 2>&1; echo "gate before->after rc=$? $(grep -m1 'regression(s)' $W/gate-before-after.md | cut -c1-120)"
python3 -m bench.cli.compare $R/*/$TAG-after $R/*/$TAG-before > $W/gate-after-before.md 2>&1; echo "gate after->before rc=$? $(grep -m1 'regression(s)' $W/gate-after-before.md | cut -c1-120)"
pack
s=$(date +%s); timeout 170 python3 -m pytest -q -p no:cacheprovider --durations=15 tests/gpu/test_gpu.py tests/gpu/test_nccl_gpu.py tests/gpu/test_cache_gpu.py > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"; grep -E "passed|failed|FAILED|Error" $W/tests-gpu.txt | tail -6; pack
{ for g in "" "-G 10"; do timeout 20 .anchors/with-torch-nccl.sh all_reduce_perf -b 8 -e 64K -f 8 -g 4 -c 1 -n 200 $g; done; timeout 20 .anchors/with-torch-nccl.sh alltoallv_perf -b 1M -e 64M -f 8 -g 4 -c 1; } > $W/anchors.txt 2>&1; echo "anchors rc=$?"; grep -E "^ +(8|4096|65536) " $W/anchors.txt | head -6; pack
if [ -n "$PIPE" ]; then s=$(date +%s%N); timeout 80 python3 -m bench suite=pipeline out_dir=$R run_id=$TAG-pipeline progress=false > $W/log-pipeline.txt 2>&1; echo "pipeline rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; python3 -m bench plan=true suite=pipeline | grep -m1 pipeline; pack; fi
