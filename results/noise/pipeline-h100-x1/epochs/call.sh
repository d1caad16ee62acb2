#!/usr/bin/env bash
# Issue 33: the JPEG example with persistent workers and both sharing strategies measured beside.
nvidia-smi -L
export LIMIT=${LIMIT:-260} JPEG_S=240 JPEG_MAX=1MiB JPEG_ARGS="pipeline.rounds=2 pipeline.sharing=[file_system,file_descriptor] pipeline.persistent_workers=[False,True]"
bash .dev/call_pipe.sh jpeg
#!/usr/bin/env bash
# Issue 33 call: two default pipeline runs back to back, their agreement within spreads, the JPEG
# example (JPEG=1), the doctor on each. Names: pipe-N (default), jpeg, agree, doctor, gputests.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); W=/tmp/w; mkdir -p $W/logs $W/results
pack() { tar -C /tmp -czf "$OUT/pack.tgz" w 2>/dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
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
stamp=$(date +%Y%m%d-%H%M%S)
runs=()
for name in "$@"; do
  case $name in
    pipe-*) step $name ${PIPE_S:-260} 120 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-$name suite=pipeline ${PIPE_ARGS:-}
            runs+=("$(ls -d $W/results/*/$stamp-$name 2>/dev/null)") ;;
    kept-*) step $name ${PIPE_S:-260} 120 env MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-$name suite=pipeline ${PIPE_ARGS:-}
            runs+=("$(ls -d $W/results/*/$stamp-$name 2>/dev/null)") ;;
    jfs-*) step $name ${JPEG_S:-150} 60 python3 .dev/with.py file_system -- out_dir=$W/results progress=false run_id=$stamp-$name suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset pipeline.max_size=${JPEG_MAX:-4MiB} ${JPEG_ARGS:-} ;;
    jsw-*) step $name ${JPEG_S:-150} 60 python3 .dev/with.py switch=0.0005 -- out_dir=$W/results progress=false run_id=$stamp-$name suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset pipeline.max_size=${JPEG_MAX:-4MiB} ${JPEG_ARGS:-} ;;
    jw-*) step $name ${JPEG_S:-150} 40 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-$name suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset ${JW_ARGS:-} ;;
    jpeg*) step $name ${JPEG_S:-150} 60 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-$name suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset pipeline.max_size=${JPEG_MAX:-4MiB} ${JPEG_ARGS:-} ;;
    agree) step agree 30 5 python3 scripts/agree.py "${runs[0]}" "${runs[1]}" ;;
    doctor) for r in "${runs[@]}"; do step doctor-$(basename $r) 30 5 python3 -m bench.cli.doctor "$r"; done ;;
    gputests) step gputests 300 120 python3 -m pytest -q tests/gpu -p no:cacheprovider ;;
    gpupipe) step gpupipe 200 60 python3 -m pytest -q -x tests/gpu/test_overlap_pipeline_gpu.py -p no:cacheprovider ;;
    *) step $name 110 65 python3 -m bench out_dir=$W/results progress=false run_id=$stamp-$name ;;
  esac
done
echo "total $(( $(date +%s) - T0 )) s"; pack
