# usage: bash .dev/callQ.sh TAG SWEEPS TESTS_S -- a new host: machine.txt, bytecode warm-up (pip's install-time
# compile, which this image skips), plan, SWEEPS default sweeps (phase-timed, polled), doctor, gate both orders,
# then tests/gpu whole within TESTS_S seconds (0: none)
. .dev/env.sh
TAG=$1; N=${2:-2}; TESTS=${3:-0}; TARGET=${4:-tests/gpu}; R=/tmp/r; W=/tmp/w; mkdir -p $R $W/ph
T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -20; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
ls /opt/torch/.venv/lib/python3.12/site-packages/torch/__pycache__ 2>&1 | head -2 > $W/pyc-probe.txt
s=$(date +%s%N); python3 -c "import torch, torch.distributed, pandas, pyarrow, hydra, triton, numpy, tqdm, pynvml; import bench.driver.app, bench.suites, bench.analysis.judge, bench.analysis.tables" >> $W/pyc-probe.txt 2>&1; echo "bytecode warm-up $(( ($(date +%s%N)-s)/1000000 )) ms"
python3 .dev/pace_probe.py | tee $W/pace-probe.txt; python3 -m bench plan=true > $W/plan.txt 2>&1; grep -m1 total $W/plan.txt; grep "pace" $W/plan.txt
for k in $(seq 1 $N); do
  ( while sleep 0.1; do f=$(ls $R/*/$TAG-default-$k/samples.csv 2>/dev/null); [ -n "$f" ] && echo "$(date +%s.%N) $(wc -l < $f)"; done ) > $W/poll-$k.txt &
  P=$!
  python3 .dev/pace_probe.py >> $W/pace-probe.txt; s=$(date +%s%N); echo "start $s" > $W/start-$k.txt
  XB_PHASES=$W/ph/s$k PYTHONPATH=$PWD/.dev/phases:$PYTHONPATH timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; kill $P
  grep -m1 "^result" $W/log-default-$k.txt; pack
done
for k in $(seq 1 $N); do python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$? $(grep -m1 judged $W/doctor-$k.txt | cut -c1-220)"; done
if [ $N -ge 2 ]; then
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate12.md 2>&1; echo "gate 1v2 rc=$? $(grep -m1 'regression(s)' $W/gate12.md | cut -c1-160)"
python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-1 > $W/gate21.md 2>&1; echo "gate 2v1 rc=$? $(grep -m1 'regression(s)' $W/gate21.md | cut -c1-160)"
grep -h -m2 "not gated" $W/gate12.md $W/gate21.md | cut -c1-200
fi
pack; echo "sweeps done $(( $(date +%s)-T0 )) s"
if [ $TESTS -gt 0 ]; then
  s=$(date +%s); timeout $TESTS python3 -m pytest -v -p no:cacheprovider --durations=30 $TARGET > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
  grep -E "FAILED|ERROR" $W/tests-gpu.txt | head; tail -40 $W/tests-gpu.txt | grep -E "passed|failed" | tail -2; pack
fi
echo "call $(( $(date +%s)-T0 )) s"
