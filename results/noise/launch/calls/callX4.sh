# usage: bash .dev/callX4.sh TAG -- held-4 on 4 GPUs: one default sweep (callQ.sh TAG 1 0), then tests/gpu's collective tests
. .dev/env.sh
T0=$(date +%s)
timeout 120 bash .dev/callQ.sh $1 1 0
s=$(date +%s); timeout 120 python3 -m pytest -q -p no:cacheprovider -k "collectives or graph_mixing or all_to_allv or every_op" tests/gpu/test_gpu.py tests/gpu/test_nccl_gpu.py > /tmp/w/tests-gpu-collectives.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"; tail -3 /tmp/w/tests-gpu-collectives.txt
tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null
echo "callX4 $(( $(date +%s)-T0 )) s"
