# usage: bash .dev/callM.sh TAG -- two default sweeps (callQ.sh), then held bidirectional peer copies idle and busy,
# at the latch's margin and at a 20 ms one
bash .dev/callQ.sh $1 2 0
. .dev/env.sh
R=/tmp/r; W=/tmp/w; pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
P2P="suite=p2p p2p.ops=[bidir] p2p.modes=[peer] p2p.engine=[ce] timing.launch=[held] sizes.max=64KiB progress=false out_dir=$R"
one() {  # NAME MARGIN BUSY
  [ $3 = 1 ] && { for i in $(seq $(nproc)); do ( timeout 60 python3 -c 'while True: pass' & ); done; sleep 1; }
  s=$(date +%s); XB_HOLD_MARGIN_S=$2 timeout 55 python3 .dev/run_patched.py $P2P run_id=$1-$4 > $W/log-$1-$4.txt 2>&1; echo "$4 rc=$? $(( $(date +%s)-s )) s"
  [ $3 = 1 ] && pkill -f 'while True: pass'; pack
}
one $1 0.0002 0 m-idle; one $1 0.0002 1 m-busy; one $1 0.02 1 m-busy20; one $1 0.02 0 m-idle20
python3 - $R $1 > $W/margin.txt 2>&1 <<'PY'
import sys, glob, pandas as pd
rows = []
for v in ("m-idle", "m-busy", "m-busy20", "m-idle20"):
    for f in glob.glob(f"{sys.argv[1]}/*/{sys.argv[2]}-{v}/samples.parquet"):
        d = pd.read_parquet(f); d = d[(d.part.astype(str) == "total") & (d.status.astype(str) == "ok")] if "status" in d else d
        d = d.assign(pair=d.src.astype(str) + ">" + d.dst.astype(str), us=d.time_s * 1e6)
        rows.append(d.groupby(["pair", "size_bytes"]).us.median().rename(v))
t = pd.concat(rows, axis=1); print(t.round(2).to_string()); print((t.div(t["m-idle"], axis=0)).median().round(3).to_string())
PY
cat $W/margin.txt; pack
