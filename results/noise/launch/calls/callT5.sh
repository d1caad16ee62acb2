# usage: bash .dev/callT5.sh TAG -- 4 GPUs, after held graph replays were bounded (timing.held_config):
# machine.txt, plan, a default sweep (phase-timed), doctor; held collectives A/B against main 9f7482e
# (.dev/old), new-old-new-old; tests/gpu whole; then the socket collectives test until the call's time is spent
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W/ph; T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -20; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
s=$(date +%s%N); python3 -c "import torch, torch.distributed, pandas, pyarrow, hydra, triton, numpy, tqdm, pynvml; import bench.driver.app, bench.suites, bench.analysis.judge, bench.analysis.tables" > /dev/null 2>&1; echo "bytecode warm-up $(( ($(date +%s%N)-s)/1000000 )) ms"
python3 -m bench plan=true > $W/plan.txt 2>&1; grep -m1 total $W/plan.txt
s=$(date +%s%N); XB_PHASES=$W/ph/s1 PYTHONPATH=$PWD/.dev/phases:$PYTHONPATH timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-1 progress=false > $W/log-default-1.txt 2>&1; echo "default-1 rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"
grep -m1 "^result" $W/log-default-1.txt
python3 -m bench.cli.doctor $R/*/$TAG-default-1 > $W/doctor-1.txt 2>&1; echo "doctor-1 rc=$? $(grep -m1 judged $W/doctor-1.txt | cut -c1-200)"; pack
HELD="suite=collectives launch=held progress=false"
for k in 1 2; do
  s=$(date +%s); timeout 90 python3 -m bench out_dir=$R/ab run_id=new-$k $HELD > $W/log-held-new-$k.txt 2>&1; echo "held new-$k rc=$? $(( $(date +%s)-s )) s"
  s=$(date +%s); PYTHONPATH=/tmp/site:$PWD/.dev/old timeout 90 python3 -m bench out_dir=$R/ab run_id=old-$k $HELD > $W/log-held-old-$k.txt 2>&1; echo "held old-$k rc=$? $(( $(date +%s)-s )) s"
  pack
done
python3 .dev/ab_held.py $R/ab/*/new-1 $R/ab/*/new-2 -- $R/ab/*/old-1 $R/ab/*/old-2 > $W/ab-held.md 2>&1; tail -1 $W/ab-held.md; pack
s=$(date +%s); timeout 330 python3 -m pytest -v -p no:cacheprovider -rA --tb=short --durations=30 --basetemp=/tmp/tg tests/gpu > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
grep -E "FAILED|ERROR" $W/tests-gpu.txt | head; tail -1 $W/tests-gpu.txt
grep -rl "watchdog raised" /tmp/tg > $W/watchdog-files.txt 2>/dev/null; for f in $(cat $W/watchdog-files.txt); do echo "== $f"; grep -A40 "watchdog raised" $f | head -60; done > $W/watchdog.txt; echo "watchdog logs: $(wc -l < $W/watchdog-files.txt)"; pack
k=0; while [ $(( $(date +%s)-T0 )) -lt 500 ]; do k=$((k+1))
  s=$(date +%s); timeout 50 python3 -m pytest -x -q -p no:cacheprovider --basetemp=/tmp/sock$k "tests/gpu/test_gpu.py::test_nccl_collectives[socket]" > $W/socket-$k.txt 2>&1; rc=$?
  n=$(grep -rl "watchdog raised" /tmp/sock$k | wc -l); echo "socket-$k rc=$rc $(( $(date +%s)-s )) s watchdog-logs=$n"
  for f in $(grep -rl "watchdog raised" /tmp/sock$k); do echo "== $f"; grep -A40 "watchdog raised" $f | head -60; done >> $W/watchdog.txt; pack
done
echo "call $(( $(date +%s)-T0 )) s"
