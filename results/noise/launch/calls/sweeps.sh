# usage: bash .dev/sweeps.sh TAG [TESTS...]  -- machine record, [pytest TESTS], 2 default sweeps, small sweep, busy small sweep
# Everything lands in /tmp/w (logs) and /tmp/r (runs), packed into $OUT/w.tgz after each step (one file back).
. .dev/env.sh
TAG=$1; shift
R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'import torch;print(torch.__version__, torch.cuda.device_count())'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt; pack
if [ $# -gt 0 ]; then
  s=$(date +%s); timeout 200 python3 -m pytest -q "$@" -p no:cacheprovider --durations=10 > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"; grep -E "passed|failed|FAILED|Error" $W/tests-gpu.txt | tail -8; pack
fi
SMALL="sizes.max=64KiB copy.gpus=[each] copy.ops=[h2d,d2h,bidir,d2d] copy.memory=[pinned] p2p.ops=[uni,bidir] copy.engine=[ce] p2p.engine=[ce]"
for k in 1 2; do
  s=$(date +%s); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? $(( $(date +%s)-s )) s"; grep -m2 "points\|^result" $W/log-default-$k.txt; pack
done
s=$(date +%s); timeout 90 python3 -m bench out_dir=$R run_id=$TAG-small-3 progress=false $SMALL > $W/log-small.txt 2>&1; echo "small-3 rc=$? $(( $(date +%s)-s )) s"
for i in $(seq $(nproc)); do ( timeout 130 python3 -c 'while True: pass' & ); done; sleep 1
s=$(date +%s); timeout 120 python3 -m bench out_dir=$R run_id=$TAG-small-busy progress=false $SMALL > $W/log-busy.txt 2>&1; echo "busy rc=$? $(( $(date +%s)-s )) s"
pkill -f 'while True: pass'; pack
python3 scripts/launch_study.py $R/*/$TAG-default-1 $R/*/$TAG-default-2 $R/*/$TAG-small-3 $R/*/$TAG-small-busy > $W/launch-study.md 2>&1; echo "study rc=$?"; tail -2 $W/launch-study.md
for k in 1 2; do python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$?"; done
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate.txt 2>&1; echo "gate rc=$?"
pack
