# usage: bash .dev/callU.sh TAG TESTS_S -- machine.txt, one default sweep under the sampling profiler, one plain, then tests/gpu
. .dev/env.sh
TAG=$1; TESTS=${2:-0}; R=/tmp/r; W=/tmp/w; mkdir -p $R $W/ph $W/sm
T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -20; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
python3 -c "import torch, torch.distributed, pandas, pyarrow, hydra, triton, numpy, tqdm, pynvml; import bench.driver.app, bench.suites, bench.analysis.judge, bench.analysis.tables" > /dev/null 2>&1
python3 -m bench plan=true > $W/plan.txt 2>&1; grep -m1 total $W/plan.txt
s=$(date +%s%N); XB_SAMPLE=$W/sm/s XB_PHASES=$W/ph/p PYTHONPATH=$PWD/.dev/phases:$PYTHONPATH timeout 150 python3 -m bench out_dir=$R run_id=$TAG-profiled progress=false > $W/log-profiled.txt 2>&1; echo "profiled rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; pack
s=$(date +%s%N); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-1 progress=false > $W/log-default-1.txt 2>&1; echo "default-1 rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; grep -m1 "^result" $W/log-default-1.txt; pack
python3 -m bench.cli.doctor $R/*/$TAG-default-1 > $W/doctor-1.txt 2>&1; echo "doctor-1 rc=$? $(grep -m1 judged $W/doctor-1.txt | cut -c1-200)"
echo "sweeps done $(( $(date +%s)-T0 )) s"
if [ $TESTS -gt 0 ]; then
  s=$(date +%s); timeout $TESTS python3 -m pytest -v -p no:cacheprovider --durations=40 tests/gpu > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
  grep -E "FAILED|ERROR" $W/tests-gpu.txt | head; tail -50 $W/tests-gpu.txt | grep -E "passed|failed" | tail -2; pack
fi
echo "call $(( $(date +%s)-T0 )) s"
