# usage: bash .dev/callTG.sh TAG -- tests/gpu's collectives tests (graphs now held) bounded at 170 s, then nccl-tests
# broadcast/all_reduce with graphs of 10 and of 200 iterations beside one held-graph suite run
. .dev/env.sh
TAG=$1; R=/tmp/r; W=/tmp/w; mkdir -p $R $W /tmp/anchors; G=$(nvidia-smi -L | wc -l)
for f in .anx/*.xz; do python3 -c "import lzma,sys; open(sys.argv[2],\"wb\").write(lzma.open(sys.argv[1]).read())" $f /tmp/anchors/$(basename $f .xz); done; cp .anx/with-torch-nccl.sh /tmp/anchors/; chmod +x /tmp/anchors/*
pack() { tar -C /tmp -czf $OUT/w.tgz r w 2>/dev/null; }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'; } > $W/machine.txt 2>&1
grep host_id $W/machine.txt
s=$(date +%s); timeout 170 python3 -m pytest -v -p no:cacheprovider --durations=15 tests/gpu/test_gpu.py tests/gpu/test_nccl_gpu.py -k "collectives or nccl or graph or all_to_allv or mixing or ranks" > $W/tests-gpu-coll.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-s )) s"
grep -E "FAILED|ERROR" $W/tests-gpu-coll.txt | head; tail -3 $W/tests-gpu-coll.txt | grep -E "passed|failed"; pack
for g in 10 200; do for op in broadcast all_reduce; do timeout 20 /tmp/anchors/with-torch-nccl.sh ${op}_perf -b 8 -e 4K -f 8 -g $G -n 200 -w 50 -G $g -c 1 >> $W/nccl-tests-G$g.txt 2>&1; done; echo "== -G $g"; grep -E "^ +(8|4096) " $W/nccl-tests-G$g.txt | awk '{print $1, $6, $10}' | tr '\n' ';'; echo; done
timeout 40 python3 -m bench out_dir=$R run_id=$TAG-hgraph-1 progress=false suite=collectives sizes.max=4KiB launch=graph collectives.ops=[broadcast,all_reduce] > $W/log-hgraph-1.txt 2>&1; echo "hgraph rc=$?"
grep -E "broadcast|all_reduce" $W/log-hgraph-1.txt | head -12
pack
