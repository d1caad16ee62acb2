#!/usr/bin/env bash
# The pipeline's quick default against its exhaustive sweep on one GPU host (issue 43), for the
# device machines (the wheels carried as scripts/device_run.sh expects). Each run is cut with
# Ctrl-C at its bound; every finished round is kept either way. Results land in $OUT/results.tgz.
#   bash scripts/pipeline_quick.sh compare     the plans, suite=pipeline-full then suite=pipeline
#                                              (walls and both findings side by side), ~6 min on H200
#   bash scripts/pipeline_quick.sh step        the JPEG example with its training step, quick default
#   bash scripts/pipeline_quick.sh allocator   the quick default with glibc's memory kept (the fix)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run() { XFERBENCH_TIMEOUT=$1 bash "$here/device_run.sh" "$2"; }
findings() { python3 "$here/pipeline_findings.py" "$@"; }
folder() { ls -d /tmp/results/*/"$1" 2>/dev/null | head -1; }
export PYTHONPATH=/tmp/site:$PWD
case ${1:-compare} in
  compare)
    run 60 "suite=pipeline plan=true" && run 60 "suite=pipeline-full plan=true"
    run 420 "suite=pipeline-full run_id=full"
    run 110 "suite=pipeline run_id=quick"
    findings "$(folder quick)" "$(folder full)" ;;
  step)
    run 300 "suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset pipeline.step=bench.examples.jpeg:step run_id=step"
    findings "$(folder step)" ;;
  allocator)
    MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 run 110 "suite=pipeline run_id=kept"
    findings "$(folder kept)" ;;
  *) echo "usage: $0 [compare|step|allocator]" >&2; exit 2 ;;
esac
