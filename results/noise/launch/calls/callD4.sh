# usage: bash .dev/callD4.sh TAG LIMIT -- fresh machine: as callD1's sweeps (machine.txt, warm-up, plan, two default
# sweeps, doctor, gate both ways); then SM and CE peer copies of pairs 0-1 and 2-3 in one process after another
# (nvidia-smi sampling clocks and power beside them) until LIMIT s: is the slow bidirectional SM mode per process?
. .dev/env.sh
TAG=$1; LIMIT=${2:-560}; R=/tmp/r; W=/tmp/w; mkdir -p $R $W/ph; T0=$(date +%s)
pack() { (cd /tmp && tar -czf $OUT/w.tgz w r) 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -20; uptime; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt; uptime
s=$(date +%s%N); python3 -c "import torch, torch.distributed, pandas, pyarrow, hydra, triton, numpy, tqdm, pynvml; import bench.driver.app, bench.suites, bench.analysis.judge, bench.analysis.tables, bench.analysis.compare" > /dev/null 2>&1; echo "bytecode warm-up $(( ($(date +%s%N)-s)/1000000 )) ms"
python3 -m bench plan=true > $W/plan.txt 2>&1; grep -m1 total $W/plan.txt; grep "scaled" $W/plan.txt
for k in 1 2; do
  s=$(date +%s%N); XB_PHASES=$W/ph/s$k PYTHONPATH=$PWD/.dev/phases:$PYTHONPATH timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"
  python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$? $(grep -m1 judged $W/doctor-$k.txt | cut -c1-160)"; grep -E "^  (LOW|HIGH)" $W/doctor-$k.txt | cut -c1-220; pack
done
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate12.md 2>&1; echo "gate 1v2 rc=$? $(grep -m1 'regression(s)' $W/gate12.md | cut -c1-120)"
python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-1 > $W/gate21.md 2>&1; echo "gate 2v1 rc=$? $(grep -m1 'regression(s)' $W/gate21.md | cut -c1-120)"
uptime; pack
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 250 > $W/smi-probe.csv 2>&1 &
SMI=$!
k=0; while [ $(( $(date +%s)-T0 )) -lt $(( LIMIT - 25 )) ]; do k=$((k+1))
  s=$(date +%s%N); timeout 60 python3 -m bench out_dir=$R/probe run_id=sm-$k progress=false suite=p2p "p2p.ops=[uni,bidir]" "p2p.modes=[peer]" "p2p.engine=[sm,ce]" "p2p.pairs=[[0,1],[2,3]]" launch=eager > $W/log-sm-$k.txt 2>&1; echo "sm-$k rc=$? $(( ($(date +%s%N)-s)/1000000 )) ms $(date +%T)"
  pack
done
kill $SMI; pack; echo "call $(( $(date +%s)-T0 )) s"
