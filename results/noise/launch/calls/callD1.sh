# usage: bash .dev/callD1.sh TAG LIMIT -- fresh machine: machine.txt (nvidia-smi, host_id), bytecode warm-up, plan,
# two default sweeps (phase-timed), doctor, gate both ways; then tests/gpu (the pipeline test last) until LIMIT s
. .dev/env.sh
TAG=$1; LIMIT=${2:-560}; R=/tmp/r; W=/tmp/w; mkdir -p $R $W/ph; T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -20; uptime; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt; uptime
s=$(date +%s%N); python3 -c "import torch, torch.distributed, pandas, pyarrow, hydra, triton, numpy, tqdm, pynvml; import bench.driver.app, bench.suites, bench.analysis.judge, bench.analysis.tables, bench.analysis.compare" > /dev/null 2>&1; echo "bytecode warm-up $(( ($(date +%s%N)-s)/1000000 )) ms"
python3 -m bench plan=true > $W/plan.txt 2>&1; grep -m1 total $W/plan.txt
for k in 1 2; do
  s=$(date +%s%N); XB_PHASES=$W/ph/s$k PYTHONPATH=$PWD/.dev/phases:$PYTHONPATH timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"
  python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$? $(grep -m1 judged $W/doctor-$k.txt | cut -c1-160)"; grep -E "^  (LOW|HIGH)" $W/doctor-$k.txt | cut -c1-220; pack
done
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate12.md 2>&1; echo "gate 1v2 rc=$? $(grep -m1 'regression(s)' $W/gate12.md | cut -c1-120)"
python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-1 > $W/gate21.md 2>&1; echo "gate 2v1 rc=$? $(grep -m1 'regression(s)' $W/gate21.md | cut -c1-120)"
grep -h -m1 "host was slow" $W/gate12.md $W/gate21.md | cut -c1-160; uptime; pack
left=$(( LIMIT - ($(date +%s)-T0) )); echo "tests/gpu with ${left} s"
s=$(date +%s); timeout $left python3 -m pytest -v -p no:cacheprovider -rA --tb=short --durations=30 --basetemp=/tmp/tg tests/gpu --deselect tests/gpu/test_overlap_pipeline_gpu.py::test_pipeline_loops_stages_and_their_bottlenecks > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
grep -E "FAILED|ERROR" $W/tests-gpu.txt | head; tail -1 $W/tests-gpu.txt; pack
echo "call $(( $(date +%s)-T0 )) s"
