#!/bin/bash
# Lab, one device call: the token items' loader forms (ids of a tile read as one vector before the stage waits,
# the loader at 32 registers, the first tile's copies before the hand-on) beside the tree and a copy of it, and the
# TMA stream probe (one process, graph replay, L2 flushed, 5 rounds).
set -u
export PYTHONPATH=$PWD
M=.fi/ld
ROWS=qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16,llama3-8b/decode/batch16-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096-var/block16/fp8/bf16
FORMS="base ids reg32 early"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
t0=$(date +%s)
for f in $FORMS; do
  for sc in ${ROWS//,/ }; do
    WARM_ONLY=1 Q1_ONLY=1 timeout 200 python3 .fi/conv/variants.py $sc $M/ws_$f.py > /tmp/warm_${f}_${sc//\//_}.log 2>&1 &
  done
done
wait
echo "warmed in $(( $(date +%s) - t0 )) s"; grep -h "failed\|Error" /tmp/warm_*.log | cut -c1-200
PROBE=1 Q1_ONLY=1 timeout 300 python3 .fi/conv/variants.py $ROWS $(for f in $FORMS; do printf "$M/ws_$f.py,"; done | sed 's/,$//') 2>&1 | tee $OUT/variants.log
echo "all done at $(( $(date +%s) - t0 )) s"
