#!/usr/bin/env bash
# Session 4, call A: where the loop's consume goes; start-up before/after; cProfile; GPU tests.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); W=/tmp/w; mkdir -p $W/logs $W/results /tmp/old
pack() { tar -C /tmp -czf "$OUT/pack.tgz" w 2>/dev/null; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
tar -C /tmp/old -xzf .dev/old.tgz && cp scripts/bench_startup.py /tmp/old/scripts/ && ln -s $PWD/results /tmp/old/results
{ nvidia-smi; nvidia-smi topo -m; lscpu | head -25; free -g; } > $W/machine.txt 2>&1
LIMIT=${LIMIT:-570}
step() {  # step NAME TIMEOUT_S BUDGET_NEEDED_S COMMAND...
  local name=$1 limit=$2 need=$3; shift 3
  local now=$(( $(date +%s) - T0 ))
  if (( now + need > LIMIT )); then echo "=== $name skipped at ${now}s" | tee -a $W/logs/steps.txt; return; fi
  (( now + limit > LIMIT )) && limit=$(( LIMIT - now ))
  local start=$(date +%s%N)
  timeout -s INT -k 15 $limit "$@" 2>&1 | python3 .dev/tsl.py > $W/logs/$name.log; local rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc wall $(( ($(date +%s%N) - start) / 1000000 )) ms at ${now}s" | tee -a $W/logs/steps.txt
  tail -n 12 $W/logs/$name.log; pack
}
for name in "$@"; do
  case $name in
    probe) step probe 90 30 python3 .dev/consume_probe.py $W/probe.json ;;
    startup-new) step startup-new 120 60 python3 scripts/bench_startup.py --reps 3 ;;
    startup-old) step startup-old 120 60 bash -c "cd /tmp/old && PYTHONPATH=/tmp/site python3 scripts/bench_startup.py --reps 3" ;;
    profile) step profile 60 30 bash -c "python3 -m bench suite=copy sizes=quick out_dir=/tmp/r run_id=warm progress=false >/dev/null 2>&1; python3 -m cProfile -o $W/start.prof -m bench suite=copy sizes=quick out_dir=/tmp/r run_id=prof progress=false >/dev/null 2>&1; python3 -c \"import pstats; pstats.Stats('$W/start.prof').sort_stats('cumulative').print_stats(r'bench/(driver|cli|gpus|journal|results)', 30)\"" ;;
    check) step check 60 20 python3 .dev/check_probe.py $W/check.json ;;
    flags) step flags 30 5 bash .dev/pyflags.sh ;;
    startup-pyc) step startup-pyc 200 100 bash -c "export PYTHONPYCACHEPREFIX=/tmp/pyc; unset PYTHONDONTWRITEBYTECODE; python3 scripts/bench_startup.py --reps 3; cd /tmp/old && python3 scripts/bench_startup.py --reps 3" ;;
    gpupipe) step gpupipe 200 60 python3 -m pytest -q -x tests/gpu/test_overlap_pipeline_gpu.py -p no:cacheprovider ;;
    gputests) step gputests 240 60 python3 -m pytest -q -x tests/gpu -p no:cacheprovider ;;
  esac
done
echo "total $(( $(date +%s) - T0 )) s"; pack
