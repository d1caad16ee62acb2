# usage: bash .dev/callF.sh TAG -- two default sweeps (callQ.sh), then held bidirectional peer copies as main queues them
# and queued fast (run_patched.py, XB_FAST_HELD=1), idle and with every CPU busy
bash .dev/callQ.sh $1 2 0
. .dev/env.sh
R=/tmp/r; W=/tmp/w; pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
P2P="suite=p2p p2p.ops=[bidir] p2p.modes=[peer] p2p.engine=[ce] timing.launch=[held] sizes.max=64KiB progress=false out_dir=$R"
one() {  # NAME FAST BUSY
  [ $3 = 1 ] && { for i in $(seq $(nproc)); do ( timeout 40 python3 -c 'while True: pass' & ); done; sleep 1; }
  s=$(date +%s); XB_FAST_HELD=$2 timeout 35 python3 .dev/run_patched.py $P2P run_id=$TAG-$1 > $W/log-$1.txt 2>&1; echo "$1 rc=$? $(( $(date +%s)-s )) s"
  [ $3 = 1 ] && pkill -f 'while True: pass'; pack
}
TAG=$1
one base-idle 0 0; one fast-idle 1 0; one base-busy 0 1; one fast-busy 1 1; one base-busy2 0 1; one fast-busy2 1 1
python3 - $R $1 > $W/fast.txt 2>&1 <<'PY'
import sys, glob, pandas as pd
rows = []
for v in ("base-idle", "fast-idle", "base-busy", "fast-busy", "base-busy2", "fast-busy2"):
    for f in glob.glob(f"{sys.argv[1]}/*/{sys.argv[2]}-{v}/samples.parquet"):
        d = pd.read_parquet(f); d = d[(d.part.astype(str) == "total") & (d.status.astype(str) == "ok")]
        d = d.assign(pair=d.src.astype(str) + ">" + d.dst.astype(str), us=d.time_s * 1e6)
        rows.append(d.groupby(["pair", "size_bytes"]).us.median().rename(v))
t = pd.concat(rows, axis=1); print(t.round(2).to_string())
r = t.div(t["base-idle"], axis=0); print(r.median().round(3).to_string()); print("points over 1.15x base-idle:"); print((r > 1.15).sum().to_string())
PY
cat $W/fast.txt; pack
