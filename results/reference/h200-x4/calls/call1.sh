#!/usr/bin/env bash
# Four-GPU call 1 (issue 30): reference tools beside two default sweeps, suite=scaling, transport
# faults on two ranks, real NCCL logs of 2 and 4 ranks. Everything lands in /tmp/w, packed into
# $OUT/pack.tgz after every step, so a call cut short still returns what finished.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); W=/tmp/w; mkdir -p $W/logs $W/results $W/anchors
pack() { tar -C /tmp -czf "$OUT/pack.tgz" w 2>/dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi; nvidia-smi topo -m; nvidia-smi -q | grep -E "Product Name|Link Gen|Link Width|Current|Max" | sort | uniq -c
  python3 -c 'import torch,pandas; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), pandas.__version__)'
  lscpu | head -25; free -g; cat /sys/devices/system/node/online; } > $W/machine.txt 2>&1
step() {  # step NAME TIMEOUT_S BUDGET_NEEDED_S COMMAND...
  local name=$1 limit=$2 need=$3; shift 3
  local now=$(( $(date +%s) - T0 ))
  if (( now + need > 575 )); then echo "=== $name skipped at ${now}s" | tee -a $W/logs/steps.txt; return; fi
  local start=$(date +%s%N)
  timeout $limit "$@" > $W/logs/$name.log 2>&1; local rc=$?
  echo "=== $name exit $rc wall $(( ($(date +%s%N) - start) / 1000000 )) ms at ${now}s" | tee -a $W/logs/steps.txt
  tail -n 6 $W/logs/$name.log; pack
}
xb() { python3 -m bench out_dir=$W/results progress=false "$@"; }
stamp=$(date +%Y%m%d-%H%M%S)
A=.anchors/with-torch-nccl.sh
step default-1 110 70 xb run_id=$stamp-default-1
step nvbandwidth 150 60 .anchors/nvbandwidth -j -t host_to_device_memcpy_ce device_to_host_memcpy_ce \
  host_to_device_bidirectional_memcpy_ce host_to_all_memcpy_ce all_to_host_memcpy_ce host_to_all_bidirectional_memcpy_ce \
  device_to_device_memcpy_write_ce device_to_device_bidirectional_memcpy_write_ce \
  device_to_device_bidirectional_memcpy_read_ce device_local_copy all_to_one_write_ce one_to_all_read_ce
cp $W/logs/nvbandwidth.log $W/anchors/nvbandwidth.json
nccl() { for g in 4 2; do $A all_reduce_perf -b 8 -e 1G -f 8 -g $g -c 1; done
         $A all_reduce_perf -b 8 -e 16M -f 8 -g 4 -G 10 -c 1
         for op in all_gather reduce_scatter broadcast alltoall; do $A ${op}_perf -b 8 -e 1G -f 8 -g 4 -c 1; done
         $A sendrecv_perf -b 8 -e 1G -f 8 -g 4 -c 1; }
step nccl-tests 150 60 nccl
cp $W/logs/nccl-tests.log $W/anchors/nccl-tests.txt
step scaling 150 70 xb suite=scaling run_id=$stamp-scaling
step default-2 110 70 xb run_id=$stamp-default-2
step fault-p2p-off 90 35 env NCCL_P2P_DISABLE=1 python3 -m bench out_dir=$W/faults progress=false suite=collectives \
  collectives.nproc=[2] run_id=$stamp-p2p-off
step fault-p2p-shm-off 120 50 env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 python3 -m bench out_dir=$W/faults progress=false \
  suite=collectives collectives.nproc=[2] run_id=$stamp-p2p-shm-off
step nccl-logs 120 40 python3 scripts/capture_nccl_logs.py --out $W/nccl --ranks 2 4
for run in $W/results/*/* $W/faults/*/*; do
  step doctor-$(basename $run) 60 5 python3 -m bench.cli.doctor $run
done
echo "total $(( $(date +%s) - T0 )) s"; pack
