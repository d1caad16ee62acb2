# usage: bash .dev/two.sh TAG -- machine record and two default sweeps, packed into $OUT/w.tgz
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
for k in 1 2; do
  s=$(date +%s); timeout 150 python3 -m bench out_dir=$R run_id=$TAG-default-$k progress=false > $W/log-default-$k.txt 2>&1; echo "default-$k rc=$? $(( $(date +%s)-s )) s"; grep -m1 "^result" $W/log-default-$k.txt; pack
done
python3 -m bench.cli.compare $R/*/$TAG-default-1 $R/*/$TAG-default-2 > $W/gate.txt 2>&1; echo "gate rc=$?"; pack
