# usage: bash .dev/callT3.sh TAG -- on a warm host: the socket collectives test alone (NCCL warnings on), the files
# after test_nccl_gpu.py, then one more default sweep
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W; T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w3.tgz w/tests-socket.txt w/tests-rest.txt w/log-default-2.txt w/doctor-2.txt w/gate12.md w/gate21.md r/*/$TAG-default-2 2>/dev/null; }
s=$(date +%s); NCCL_DEBUG=WARN timeout 150 python3 -m pytest -v -p no:cacheprovider -rA --tb=long "tests/gpu/test_gpu.py::test_nccl_collectives" > $W/tests-socket.txt 2>&1; echo "socket rc=$? $(( $(date +%s)-s )) s"; tail -1 $W/tests-socket.txt; pack
s=$(date +%s); timeout 330 python3 -m pytest -v -p no:cacheprovider -rA --tb=short --durations=30 $(ls tests/gpu/test_*.py | grep -vE "test_(cache_gpu|gpu|h2d_load_gpu|nccl_gpu)\.py") > $W/tests-rest.txt 2>&1; echo "rest rc=$? $(( $(date +%s)-s )) s"; grep -E "FAILED|ERROR" $W/tests-rest.txt | head; tail -1 $W/tests-rest.txt; pack
left=$(( 560 - ($(date +%s)-T0) ))
if [ $left -gt 90 ]; then
  s=$(date +%s%N); timeout $(( left - 20 )) python3 -m bench out_dir=$R run_id=$TAG-default-2 progress=false > $W/log-default-2.txt 2>&1; echo "default-2 rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"
  python3 -m bench.cli.doctor $R/*/$TAG-default-2 > $W/doctor-2.txt 2>&1; echo "doctor-2 rc=$? $(grep -m1 judged $W/doctor-2.txt | cut -c1-200)"
  python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate12.md 2>&1; echo "gate 1v2 rc=$?"
  python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-1 > $W/gate21.md 2>&1; echo "gate 2v1 rc=$?"; pack
fi
echo "call $(( $(date +%s)-T0 )) s"
