# usage: bash .dev/callZ.sh TAG -- held staged copies (suite=p2p, staged, 4-64 KiB) with the default trials (8: the
# ring of streams) and with 24, in five slots (three quiet, one with every CPU busy, a fourth quiet); then two
# default sweeps (callQ.sh)
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
ST="suite=p2p p2p.modes=[staged] p2p.ops=[uni,bidir] p2p.engine=[ce] sizes.max=64KiB"
one() {
  for t in 8 24; do s=$(date +%s); timeout 60 python3 -m bench out_dir=$R run_id=$TAG-staged$t-$1 progress=false $ST timing.trials=$t > $W/log-staged$t-$1.txt 2>&1; echo "staged$t-$1 rc=$? $(( $(date +%s)-s )) s"; done; pack
}
for k in 1 2 3; do one $k; done
for i in $(seq $(nproc)); do ( timeout 100 python3 -c 'while True: pass' & ); done; sleep 1
one busy; pkill -f 'while True: pass'; sleep 2
one 4
for t in 8 24; do python3 scripts/launch_study.py $R/*/$TAG-staged$t-1 $R/*/$TAG-staged$t-2 $R/*/$TAG-staged$t-3 $R/*/$TAG-staged$t-busy $R/*/$TAG-staged$t-4 > $W/staged$t-study.md 2>&1; echo "== trials $t"; grep -E "\| held|^held" $W/staged$t-study.md | cut -c1-200; done
pack
bash .dev/callQ.sh $TAG 2 0
