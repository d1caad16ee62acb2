# usage: bash .dev/callV.sh TAG TESTS_S [PYTEST ARGS] -- the launch study (callL.sh), then tests/gpu (or the tests named), bounded
. .dev/env.sh
TAG=$1; T=$2; shift 2
bash .dev/callL.sh $TAG
W=/tmp/w; pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
[ $# -eq 0 ] && set -- tests/gpu
s=$(date +%s); timeout $T python3 -m pytest -v -p no:cacheprovider --durations=20 "$@" > $W/tests-gpu.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
grep -E "FAILED|ERROR" $W/tests-gpu.txt | head; tail -25 $W/tests-gpu.txt | grep -E "passed|failed"; pack
