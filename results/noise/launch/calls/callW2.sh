# usage: bash .dev/callW2.sh TAG -- a held-out host: machine.txt, two default sweeps, doctor, gate both ways, then the pipeline GPU test
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; lscpu | head -20; env | grep -E '^(PYTHON|NCCL|TORCH_SYMM|NVSHMEM)'; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
python3 -c "import torch, torch.distributed, pandas, pyarrow, hydra, triton, numpy, tqdm, pynvml; import bench.driver.app, bench.suites, bench.analysis.judge, bench.analysis.tables" > /dev/null 2>&1
python3 -m bench plan=true > $W/plan.txt 2>&1; grep -m1 total $W/plan.txt
for k in 1 2; do
  s=$(date +%s%N); timeout 70 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"; grep -m1 "^result" $W/log-default-$k.txt; pack
done
for k in 1 2; do python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$? $(grep -m1 judged $W/doctor-$k.txt | cut -c1-200)"; done
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate12.md 2>&1; echo "gate 1v2 rc=$? $(grep -m1 'regression(s)' $W/gate12.md | cut -c1-100)"
python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-1 > $W/gate21.md 2>&1; echo "gate 2v1 rc=$? $(grep -m1 'regression(s)' $W/gate21.md | cut -c1-100)"
pack
timeout 70 python3 -m pytest -q -p no:cacheprovider "tests/gpu/test_overlap_pipeline_gpu.py::test_pipeline_loops_stages_and_their_bottlenecks" > $W/tests-pipeline.txt 2>&1; echo "pipeline test rc=$?"; tail -2 $W/tests-pipeline.txt; pack
