# usage: bash .dev/callB.sh SECONDS -- the whole of tests/gpu, bounded
. .dev/env.sh
W=/tmp/w; mkdir -p $W
pack() { tar -C /tmp -czf $OUT/w.tgz w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt; git log --oneline -1 2>/dev/null
s=$(date +%s); timeout $1 python3 -m pytest -v -p no:cacheprovider --durations=30 tests/gpu > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
grep -E "FAILED|ERROR" $W/tests-gpu.txt | head; tail -35 $W/tests-gpu.txt | grep -E "^[0-9.]+s |passed|failed"; pack
