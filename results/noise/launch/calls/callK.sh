# usage: bash .dev/callK.sh TESTS_S -- the clock probe (three processes, one with every CPU busy), then tests/gpu
. .dev/env.sh
W=/tmp/w; mkdir -p $W
pack() { tar -C /tmp -czf $OUT/w.tgz w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; nvidia-smi -q -d CLOCK,PERFORMANCE,TEMPERATURE,POWER; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt; pack
P=results/noise/launch/calls/clock_probe.py
for k in 1 2 3; do timeout 60 python3 $P p$k >> $W/clock.txt 2>&1; pack; done
for i in $(seq $(nproc)); do ( timeout 70 python3 -c 'while True: pass' & ); done; sleep 1
timeout 60 python3 $P busy >> $W/clock.txt 2>&1; pkill -f 'while True: pass'; pack
grep -E "round|Error|error" $W/clock.txt | sed 's/ max=1980//'
if [ "${1:-0}" -gt 0 ]; then
  s=$(date +%s); timeout $1 python3 -m pytest -v -p no:cacheprovider --durations=30 tests/gpu > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
  grep -E "FAILED|ERROR" $W/tests-gpu.txt | head; tail -35 $W/tests-gpu.txt | grep -E "passed|failed"; pack
fi
