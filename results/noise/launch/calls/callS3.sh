# usage: bash .dev/callS3.sh N -- on the warm host: keep the earlier pytest runs' socket-test folders (rank logs),
# then the socket collectives test N times with NCCL warnings on
. .dev/env.sh
mkdir -p $OUT/s; T0=$(date +%s)
ls -d /tmp/pytest-of-*/pytest-*/ > $OUT/s/pytest-dirs.txt 2>&1
for d in /tmp/pytest-of-*/pytest-*/test_nccl_collectives_socket*; do n=$(echo $d | tr '/' '_'); tar -czf $OUT/s/$n.tgz -C $d . 2>/dev/null; done
for k in $(seq 1 $1); do
  s=$(date +%s); NCCL_DEBUG=WARN timeout 100 python3 -m pytest -x -q -p no:cacheprovider -rA --tb=long --basetemp=/tmp/sock$k "tests/gpu/test_gpu.py::test_nccl_collectives[socket]" > $OUT/s/socket-$k.txt 2>&1; rc=$?
  echo "socket-$k rc=$rc $(( $(date +%s)-s )) s"; [ $rc -ne 0 ] && tar -czf $OUT/s/sock$k.tgz -C /tmp sock$k 2>/dev/null
done
echo "call $(( $(date +%s)-T0 )) s"
