#!/usr/bin/env bash
# One H200 (call 5): a clean default sweep and the same beside a second process copying h2d,
# each judged by the doctor; nvbandwidth beside; start-up timings; the GPU tests.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); W=/tmp/w5; mkdir -p $W/logs $W/results $W/faults
pack() { tar -C /tmp -czf "$OUT/pack5.tgz" w5 2>/dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch,pandas; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), pandas.__version__)'
  lscpu | head -25; free -g; } > $W/machine.txt 2>&1
step() {  # step NAME TIMEOUT_S BUDGET_NEEDED_S COMMAND...
  local name=$1 limit=$2 need=$3; shift 3
  local now=$(( $(date +%s) - T0 ))
  if (( now + need > 560 )); then echo "=== $name skipped at ${now}s" | tee -a $W/logs/steps.txt; return; fi
  local start=$(date +%s%N)
  timeout $limit "$@" 2>&1 | python3 .dev/tsl.py > $W/logs/$name.log; local rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc wall $(( ($(date +%s%N) - start) / 1000000 )) ms at ${now}s" | tee -a $W/logs/steps.txt
  tail -n 3 $W/logs/$name.log; pack
}
stamp=$(date +%Y%m%d-%H%M%S)
step torch-init 60 10 python3 -c 'import time; t=time.time(); import torch; a=time.time(); torch.cuda.init(); [torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count())]; print(f"import torch {a-t:.2f} s, cuda init and a context per GPU {time.time()-a:.2f} s")'
step plan 60 10 python3 -m bench plan=true
step nvbandwidth 60 15 bash -c ".anchors/nvbandwidth -j -t host_to_device_memcpy_ce device_to_host_memcpy_ce device_local_copy > $W/nvbandwidth.json"
step clean 90 40 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-clean
step doctor-clean 60 5 python3 -m bench.cli.doctor $W/results/*/$stamp-clean
python3 scripts/h2d_load.py > $W/logs/load.log 2>&1 & LOAD=$!; sleep 3
step loaded 90 40 python3 -m bench out_dir=$W/faults progress=false run_id=$stamp-h2d-load
kill -TERM $LOAD; wait $LOAD
step doctor-loaded 60 5 python3 -m bench.cli.doctor $W/faults/*/$stamp-h2d-load
step gpu-tests 300 60 python3 -m pytest -q -x -p no:cacheprovider tests/gpu
echo "total $(( $(date +%s) - T0 )) s"; pack
