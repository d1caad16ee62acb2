. .dev/env.sh
{ nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'import torch;print(torch.__version__, torch.cuda.device_count())'; python3 -c 'from bench.hosts import this_host; from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt | tail -4
for t in 1 2; do timeout 100 python3 .dev/probe_latency.py p$t $OUT > $OUT/probe-p$t.txt 2>&1; echo "probe $t rc=$?"; done
# every CPU busy
for i in $(seq $(nproc)); do ( timeout 120 python3 -c 'while True: pass' & ) ; done
sleep 2; timeout 100 python3 .dev/probe_latency.py busy $OUT > $OUT/probe-busy.txt 2>&1; echo "busy rc=$?"
pkill -f 'while True: pass'
timeout 100 python3 .dev/probe_latency.py p3 $OUT > $OUT/probe-p3.txt 2>&1; echo "probe 3 rc=$?"
G=$(python3 -c 'import torch;print(torch.cuda.device_count())')
{ timeout 60 .anchors/p2pBandwidthLatencyTest; for g in "" "-G 10"; do timeout 60 .anchors/with-torch-nccl.sh all_reduce_perf -b 8 -e 64K -f 8 -g $G -c 1 -n 200 $g; done; } > $OUT/anchors.txt 2>&1; echo anchors rc=$?
cd $OUT && tar czf probes.tgz *.txt *.json && rm -f *.json
