#!/usr/bin/env bash
# One H200 call for issues 33 and 34: a default sweep with the code before issue 34 (b38d5c8) and
# after, the gate and the doctor on them; two pipeline runs and their agreement; the JPEG example;
# the start-up benchmark of both trees.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); W=/tmp/w; mkdir -p $W/logs $W/results /tmp/old
pack() { tar -C /tmp -czf "$OUT/pack.tgz" w 2>/dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
tar -C /tmp/old -xzf .dev/old.tgz && cp scripts/bench_startup.py /tmp/old/scripts/
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch,pandas,PIL; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), pandas.__version__, PIL.__version__)'
  lscpu | head -25; free -g; } > $W/machine.txt 2>&1
LIMIT=${LIMIT:-570}
step() {  # step NAME TIMEOUT_S BUDGET_NEEDED_S COMMAND...
  local name=$1 limit=$2 need=$3; shift 3
  local now=$(( $(date +%s) - T0 ))
  if (( now + need > LIMIT )); then echo "=== $name skipped at ${now}s" | tee -a $W/logs/steps.txt; return; fi
  (( now + limit > LIMIT )) && limit=$(( LIMIT - now ))
  local start=$(date +%s%N)
  timeout -s INT -k 15 $limit "$@" 2>&1 | python3 .dev/tsl.py > $W/logs/$name.log; local rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc wall $(( ($(date +%s%N) - start) / 1000000 )) ms at ${now}s" | tee -a $W/logs/steps.txt
  tail -n 3 $W/logs/$name.log; pack
}
s=$(date +%Y%m%d-%H%M%S)
step before 80 40 bash -c "cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old python3 -m bench out_dir=$W/results progress=false run_id=$s-before"
step after 80 40 python3 -m bench out_dir=$W/results progress=false run_id=$s-after
step compare 30 5 bash -c "python3 -m bench.cli.compare $W/results/*/$s-before $W/results/*/$s-after"
step doctor-after 30 5 bash -c "python3 -m bench.cli.doctor $W/results/*/$s-after"
step doctor-before 30 5 bash -c "python3 -m bench.cli.doctor $W/results/*/$s-before"
PIPE="suite=pipeline pipeline.min_size=${PIPE_MIN:-256KiB} pipeline.max_size=4MiB"
step pipe-1 150 90 python3 -m bench out_dir=$W/results progress=false run_id=$s-pipe-1 $PIPE
step pipe-2 150 90 python3 -m bench out_dir=$W/results progress=false run_id=$s-pipe-2 $PIPE
step agree 30 3 bash -c "python3 scripts/agree.py $W/results/*/$s-pipe-1 $W/results/*/$s-pipe-2"
step jpeg 90 40 python3 -m bench out_dir=$W/results progress=false run_id=$s-jpeg suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset pipeline.max_size=1MiB pipeline.rounds=3
step startup-new 80 50 python3 scripts/bench_startup.py --reps 2
step startup-old 80 50 bash -c "cd /tmp/old && PYTHONPATH=/tmp/site python3 scripts/bench_startup.py --reps 2"
echo "total $(( $(date +%s) - T0 )) s"; pack
