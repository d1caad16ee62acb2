#!/usr/bin/env bash
# Run xferbench on a lent GPU machine (see README, "Running on the GPU machines"): installs the
# carried wheels, records the machine, runs the given xferbench commands, and packs results into $OUT.
# Usage: bash scripts/device_run.sh "suite=copy" "suite=collectives sizes=quick" ...
# XFERBENCH_TIMEOUT=S: each command is cut (Ctrl-C, as a user would) after S seconds.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# The image sets PYTHONDONTWRITEBYTECODE: each process (every rank) would compile the sources it
# imports, torch's too, about 3 s; an installed tool has its bytecode cached.
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out"
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch,pandas; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), pandas.__version__)'; } > "$out/machine.txt" 2>&1
rc=0
for args in "$@"; do
  echo "=== xferbench $args"
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  ${XFERBENCH_TIMEOUT:+timeout -s INT -k 30 $XFERBENCH_TIMEOUT} python3 -m bench out_dir=/tmp/results progress=false $args 2>&1 \
    | tee -a "$out/log.txt" | grep -v '^\s*$' | tail -60
  code=${PIPESTATUS[0]}; [ "$code" = 0 ] || rc=$code
  echo "=== exit $code, wall $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$out/log.txt"
done
tar -C /tmp -czf "$out/results.tgz" results 2>/dev/null
exit $rc
