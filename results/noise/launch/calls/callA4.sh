# usage: bash .dev/callA4.sh TAG -- held-4 on a new host: the staged-graph probe (five slots), then the launch
# study (five slots, nccl-tests beside) and two default sweeps (callL2.sh)
T0=$(date +%s)
timeout 150 bash .dev/callSG.sh $1
echo "probe done $(( $(date +%s)-T0 )) s"
bash .dev/callL2.sh $1
echo "callA4 $(( $(date +%s)-T0 )) s"
