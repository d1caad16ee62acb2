. .dev/env.sh
W=/tmp/w; mkdir -p $W; pack() { tar -C /tmp -czf $OUT/w.tgz w 2>/dev/null; }
python3 -c 'from bench.driver.inventory import host, Topology; print("host_id", host(True, Topology())["host_id"])'
timeout 75 python3 -m pytest -v -p no:cacheprovider tests/gpu/test_gpu.py -k "mixing" > $W/tests-mixing.txt 2>&1; echo "tests rc=$?"
grep -E "PASSED|FAILED|ERROR|passed|failed" $W/tests-mixing.txt | tail -4; pack
