#!/usr/bin/env bash
# Four-GPU call 3 (issue 30): start-up timings, host-memory probe, a timestamped default sweep,
# nvbandwidth's bidirectional P2P beside it, then suite=training twice.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); W=/tmp/w3; mkdir -p $W/logs $W/results $W/anchors
pack() { tar -C /tmp -czf "$OUT/pack3.tgz" w3 2>/dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch,pandas; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), pandas.__version__)'
  lscpu | head -25; free -g; } > $W/machine.txt 2>&1
step() {  # step NAME TIMEOUT_S BUDGET_NEEDED_S COMMAND...
  local name=$1 limit=$2 need=$3; shift 3
  local now=$(( $(date +%s) - T0 ))
  if (( now + need > 580 )); then echo "=== $name skipped at ${now}s" | tee -a $W/logs/steps.txt; return; fi
  local start=$(date +%s%N)
  timeout $limit "$@" 2>&1 | python3 .dev/tsl.py > $W/logs/$name.log; local rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc wall $(( ($(date +%s%N) - start) / 1000000 )) ms at ${now}s" | tee -a $W/logs/steps.txt
  tail -n 4 $W/logs/$name.log; pack
}
stamp=$(date +%Y%m%d-%H%M%S)
step torch-init 60 10 python3 -c 'import time; t=time.time(); import torch; a=time.time(); torch.cuda.init(); [torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count())]; print(f"import torch {a-t:.2f} s, cuda init and a context per GPU {time.time()-a:.2f} s")'
step plan 60 10 python3 -m bench plan=true
step hostmem 90 45 python3 .dev/hostmem_probe.py $W/hostmem.json
step default-3 110 75 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-default-3
step nvbandwidth-bidir 60 20 bash -c ".anchors/nvbandwidth -j -t device_to_device_bidirectional_memcpy_write_ce > $W/anchors/nvbandwidth-bidir.json"
step training-1 240 150 python3 -m bench out_dir=$W/results progress=false suite=training run_id=$stamp-training-1
step training-2 240 150 python3 -m bench out_dir=$W/results progress=false suite=training run_id=$stamp-training-2
echo "total $(( $(date +%s) - T0 )) s"; pack
