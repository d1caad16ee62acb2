#!/usr/bin/env bash
# Four-GPU call 4 (issue 30, item 7): the plan, then two default sweeps timed line by line,
# nvbandwidth's bidirectional P2P and the host-memory probe beside them.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); W=/tmp/w4; mkdir -p $W/logs $W/results $W/anchors
pack() { tar -C /tmp -czf "$OUT/pack4.tgz" w4 2>/dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch,pandas; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), pandas.__version__)'
  lscpu | head -25; free -g; } > $W/machine.txt 2>&1
step() {  # step NAME TIMEOUT_S BUDGET_NEEDED_S COMMAND...
  local name=$1 limit=$2 need=$3; shift 3
  local now=$(( $(date +%s) - T0 ))
  if (( now + need > 280 )); then echo "=== $name skipped at ${now}s" | tee -a $W/logs/steps.txt; return; fi
  local start=$(date +%s%N)
  timeout $limit "$@" 2>&1 | python3 .dev/tsl.py > $W/logs/$name.log; local rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc wall $(( ($(date +%s%N) - start) / 1000000 )) ms at ${now}s" | tee -a $W/logs/steps.txt
  tail -n 3 $W/logs/$name.log; pack
}
stamp=$(date +%Y%m%d-%H%M%S)
step plan 60 10 python3 -m bench plan=true
step default-4 100 70 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-default-4
step default-5 100 70 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-default-5
step nvbandwidth-bidir 60 10 bash -c ".anchors/nvbandwidth -j -t device_to_device_bidirectional_memcpy_write_ce host_to_all_memcpy_ce > $W/anchors/nvbandwidth.json"
step hostmem 60 25 python3 .dev/hostmem_probe.py $W/hostmem.json
echo "total $(( $(date +%s) - T0 )) s"; pack
