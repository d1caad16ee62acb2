# usage: bash .dev/callD2.sh TAG -- warm after callD1: the pipeline GPU test alone, then a third default sweep, doctor
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w2; mkdir -p $R $W/ph; T0=$(date +%s)
pack() { (cd /tmp && tar -czf $OUT/w2.tgz w2 r/*/$TAG-default-3) 2>/dev/null; }
python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; uptime
s=$(date +%s); timeout 300 python3 -m pytest -v -p no:cacheprovider -rA --tb=short --basetemp=/tmp/tp tests/gpu/test_overlap_pipeline_gpu.py::test_pipeline_loops_stages_and_their_bottlenecks > $W/pipeline-test.txt 2>&1; echo "pipeline test rc=$? $(( $(date +%s)-s )) s"; tail -1 $W/pipeline-test.txt; pack
s=$(date +%s%N); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-3 progress=false > $W/log-default-3.txt 2>&1; echo "default-3 rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"
python3 -m bench.cli.doctor $R/*/$TAG-default-3 > $W/doctor-3.txt 2>&1; echo "doctor-3 rc=$? $(grep -m1 judged $W/doctor-3.txt | cut -c1-160)"; grep -E "^  (LOW|HIGH)" $W/doctor-3.txt | cut -c1-220; pack
echo "call $(( $(date +%s)-T0 )) s"
