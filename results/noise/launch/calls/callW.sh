# usage: bash .dev/callW.sh TAG -- the launch study (callL.sh), then two default sweeps with doctor and gate (callQ.sh)
bash .dev/callL.sh $1
bash .dev/callQ.sh $1 2 0
