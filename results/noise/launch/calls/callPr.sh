# usage: bash .dev/callPr.sh TAG -- a default sweep, then one under cProfile (main process), its stats by cumulative and own time
. .dev/env.sh
TAG=$1; R=/tmp/r$TAG; W=/tmp/w$TAG; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r$TAG w$TAG 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -20; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
python3 -c "import torch, torch.distributed, pandas, pyarrow, hydra, triton, numpy, pynvml; import bench.driver.app, bench.suites, bench.analysis.judge, bench.analysis.tables" > /dev/null 2>&1
python3 -m bench plan=true > $W/plan.txt 2>&1; grep -E "total|scaled" $W/plan.txt
s=$(date +%s%N); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-1 progress=false > $W/log-1.txt 2>&1; echo "default-1 rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; pack
s=$(date +%s%N); timeout 200 python3 -m cProfile -o $W/prof.out -m bench out_dir=$R run_id=$TAG-prof progress=false > $W/log-prof.txt 2>&1; echo "prof rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; pack
python3 - $W/prof.out > $W/prof.txt 2>&1 <<'PY'
import pstats, sys
p = pstats.Stats(sys.argv[1]); p.sort_stats("cumulative").print_stats(120); p.sort_stats("tottime").print_stats(60)
PY
pack; echo done
