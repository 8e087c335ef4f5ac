#!/bin/bash
# Lab, one device call: the TMA stream probe bridged toward the token items' loader (.fi/bridge/bridge.py).
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
ROWS=qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16
for sc in ${ROWS//,/ }; do WARM_ONLY=1 timeout 200 python3 .fi/bridge/bridge.py $sc > /tmp/warm_${sc//\//_}.log 2>&1 & done
wait
echo "warmed at $(( $(date +%s) - t0 )) s"; grep -h "failed\|Error\|warmed" /tmp/warm_*.log | cut -c1-300
timeout 200 python3 .fi/bridge/bridge.py $ROWS 2>&1 | tee $OUT/bridge.log
echo "all done at $(( $(date +%s) - t0 )) s"
