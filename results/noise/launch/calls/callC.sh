# usage: bash .dev/callC.sh -- nvidia-h200: the pipeline's quick default and its exhaustive sweep on one host, findings side by side, the example step, the pipeline GPU test
. .dev/env.sh
T0=$(date +%s)
python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])' | tee /tmp/host.txt
bash scripts/pipeline_quick.sh quick 2>&1 | grep -E "^===|total" 
bash scripts/pipeline_quick.sh full 2>&1 | grep -E "^===|total"
PYTHONPATH=/tmp/site:$PWD python3 scripts/pipeline_findings.py /tmp/results/*/quick /tmp/results/*/full > $OUT/findings.txt 2>&1; grep -E "quick against full" $OUT/findings.txt
left=$(( 545 - ($(date +%s)-T0) )); echo "left $left s"
[ $left -gt 60 ] && XFERBENCH_TIMEOUT=$(( left - 45 )) bash scripts/device_run.sh "suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset pipeline.step=bench.examples.jpeg:step run_id=step" 2>&1 | grep -E "^===|waits|step" | head -20
cp /tmp/host.txt $OUT/; tar -C /tmp -czf $OUT/results.tgz results 2>/dev/null
left=$(( 560 - ($(date +%s)-T0) )); echo "left $left s"
[ $left -gt 40 ] && timeout $left python3 -m pytest -q -p no:cacheprovider tests/gpu/test_overlap_pipeline_gpu.py -k "loops_stages" 2>&1 | tail -3
