#!/usr/bin/env bash
# The pipeline's quick default against its exhaustive sweep on one GPU host (issue 43), for the
# device machines (the wheels carried as scripts/device_run.sh expects). Each run is cut with
# Ctrl-C at its bound; every finished round is kept either way. Results land in $OUT/results.tgz.
#   bash scripts/pipeline_quick.sh compare     full, quick, then findings (about 6-9 minutes)
#   bash scripts/pipeline_quick.sh full        the plan and suite=pipeline-full (cut at 420 s)
#   bash scripts/pipeline_quick.sh quick       the plan and suite=pipeline (cut at 110 s)
#   bash scripts/pipeline_quick.sh findings    the two runs' walls and findings side by side
#   bash scripts/pipeline_quick.sh step        the JPEG example with its training step, quick default
#   bash scripts/pipeline_quick.sh allocator   the quick default with glibc's memory kept (the fix)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run() { XFERBENCH_TIMEOUT=$1 bash "$here/device_run.sh" "$2"; }
folder() { ls -d /tmp/results/*/"$1" 2>/dev/null | head -1; }
findings() { PYTHONPATH=/tmp/site:$PWD python3 "$here/pipeline_findings.py" "$@"; }
case ${1:-compare} in
  full) run 60 "suite=pipeline-full plan=true" && run 420 "suite=pipeline-full run_id=full" ;;
  quick) run 60 "suite=pipeline plan=true" && run 110 "suite=pipeline run_id=quick" ;;
  findings) findings "$(folder quick)" "$(folder full)" ;;
  compare) bash "$0" full; bash "$0" quick; bash "$0" findings ;;
  step)
    run 300 "suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset pipeline.step=bench.examples.jpeg:step run_id=step"
    findings "$(folder step)" ;;
  allocator)
    MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 run 110 "suite=pipeline run_id=kept"
    findings "$(folder kept)" "$(folder quick)" ;;
  *) echo "usage: $0 [compare|full|quick|findings|step|allocator]" >&2; exit 2 ;;
esac
