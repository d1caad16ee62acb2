# usage: bash .dev/callT7.sh TAG -- warm 4x after callT6, the bound reverted: two default sweeps (phase-timed), doctor, gate both ways
. .dev/env.sh
TAG=$1; R=/tmp/r7; W=/tmp/w7; mkdir -p $R $W/ph; T0=$(date +%s)
pack() { tar -C /tmp -czf $OUT/w7.tgz r7 w7 2>/dev/null; }
cp /tmp/w/machine.txt $W/machine.txt
python3 -m bench plan=true > $W/plan.txt 2>&1; grep -m1 total $W/plan.txt
for k in 2 3; do
  s=$(date +%s%N); XB_PHASES=$W/ph/s$k PYTHONPATH=$PWD/.dev/phases:$PYTHONPATH timeout 120 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? wall $(( ($(date +%s%N)-s)/1000000 )) ms"
  python3 -m bench.cli.doctor $R/*/$TAG-default-$k > $W/doctor-$k.txt 2>&1; echo "doctor-$k rc=$? $(grep -m1 judged $W/doctor-$k.txt | cut -c1-200)"; grep -E "^  (LOW|HIGH)" $W/doctor-$k.txt | cut -c1-150; pack
done
python3 -m bench.cli.compare $R/*/$TAG-default-2 $R/*/$TAG-default-3 > $W/gate23.md 2>&1; echo "gate 2v3 rc=$? $(grep -m1 'regression(s)' $W/gate23.md | cut -c1-160)"
python3 -m bench.cli.compare $R/*/$TAG-default-3 $R/*/$TAG-default-2 > $W/gate32.md 2>&1; echo "gate 3v2 rc=$? $(grep -m1 'regression(s)' $W/gate32.md | cut -c1-160)"
grep -h -m2 "not gated" $W/gate23.md $W/gate32.md | cut -c1-200
pack; echo "call $(( $(date +%s)-T0 )) s"
