# usage: bash .dev/callP6.sh TAG -- 2 GPUs: machine.txt, bytecode warm-up, the staging-allocation probe in 5 processes
# (the 4th with every CPU busy), then tests/gpu whole
. .dev/env.sh
TAG=$1; W=/tmp/w; mkdir -p $W; T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w.tgz w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -20; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
s=$(date +%s%N); python3 -c "import torch, torch.distributed, pandas, pyarrow, hydra, triton, numpy, tqdm, pynvml; import bench.driver.app, bench.suites, bench.analysis.judge, bench.analysis.tables, bench.suites.p2p.measure" > /dev/null 2>&1; echo "bytecode warm-up $(( ($(date +%s%N)-s)/1000000 )) ms"
for k in 1 2 3 busy 4; do
  if [ $k = busy ]; then for i in $(seq $(nproc)); do ( timeout 60 python3 -c 'while True: pass' & ); done; sleep 1; fi
  s=$(date +%s); timeout 60 python3 .dev/staging_alloc_probe.py $TAG-$k > $W/probe-$k.txt 2>&1; echo "probe-$k rc=$? $(( $(date +%s)-s )) s: $(tail -1 $W/probe-$k.txt)"
  if [ $k = busy ]; then pkill -f 'while True: pass'; sleep 2; fi
  pack
done
s=$(date +%s); timeout 300 python3 -m pytest -v -p no:cacheprovider -rA --tb=short --durations=30 --basetemp=/tmp/tg tests/gpu > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
grep -E "FAILED|ERROR" $W/tests-gpu.txt | head; tail -1 $W/tests-gpu.txt
grep -rl "watchdog raised" /tmp/tg > $W/watchdog-files.txt 2>/dev/null; echo "watchdog logs: $(wc -l < $W/watchdog-files.txt)"; pack
echo "call $(( $(date +%s)-T0 )) s"
