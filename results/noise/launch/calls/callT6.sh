# usage: bash .dev/callT6.sh TAG -- warm after callT5: what the pipeline test left in /tmp/tg; the held A/B with
# the old code run from its own folder; tests/gpu after the 18 that passed; the pipeline test alone, timed
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w6; mkdir -p $W; T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w6.tgz w6 2>/dev/null; }
ls -la /tmp/tg > $W/tg-ls.txt 2>&1; find /tmp/tg -path '*pipeline_loops*' -maxdepth 6 > $W/tg-pipeline-find.txt 2>&1
for f in $(find /tmp/tg -path '*pipeline_loops*' \( -name '*.log' -o -name 'meta.json' -o -name '*.csv' \) 2>/dev/null | head -20); do echo "== $f"; tail -c 3000 $f; done > $W/tg-pipeline.txt 2>&1
ps aux --sort=-%cpu | head -15 > $W/ps.txt; pack
HELD="suite=collectives launch=held progress=false"
for k in 3 4; do
  s=$(date +%s); (cd .dev/old && PYTHONPATH=/tmp/site:$PWD timeout 90 python3 -c 'import bench,sys; print(bench.__file__, file=sys.stderr)' ; PYTHONPATH=/tmp/site:$PWD timeout 90 python3 -m bench out_dir=$R/ab run_id=old-$k $HELD) > $W/log-held-old-$k.txt 2>&1; echo "held old-$k rc=$? $(( $(date +%s)-s )) s $(head -1 $W/log-held-old-$k.txt)"
  s=$(date +%s); timeout 90 python3 -m bench out_dir=$R/ab run_id=new-$k $HELD > $W/log-held-new-$k.txt 2>&1; echo "held new-$k rc=$? $(( $(date +%s)-s )) s"
done
python3 .dev/ab_held.py $R/ab/*/new-1 $R/ab/*/new-2 $R/ab/*/new-3 $R/ab/*/new-4 -- $R/ab/*/old-3 $R/ab/*/old-4 > $W/ab-held.md 2>&1; tail -1 $W/ab-held.md; pack
s=$(date +%s); timeout 150 python3 -m pytest -q -p no:cacheprovider -rA --tb=short --basetemp=/tmp/tp -o log_cli=false "tests/gpu/test_overlap_pipeline_gpu.py::test_pipeline_loops_stages_and_their_bottlenecks" > $W/pipeline-test.txt 2>&1; echo "pipeline test rc=$? $(( $(date +%s)-s )) s"; tail -3 $W/pipeline-test.txt; pack
s=$(date +%s); timeout 280 python3 -m pytest -v -p no:cacheprovider -rA --tb=short --durations=30 --basetemp=/tmp/tg2 tests/gpu --deselect tests/gpu/test_overlap_pipeline_gpu.py::test_pipeline_loops_stages_and_their_bottlenecks --deselect "tests/gpu/test_gpu.py::test_nccl_collectives[socket]" > $W/tests-gpu-rest.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
grep -E "FAILED|ERROR" $W/tests-gpu-rest.txt | head; tail -1 $W/tests-gpu-rest.txt; pack
echo "call $(( $(date +%s)-T0 )) s"
