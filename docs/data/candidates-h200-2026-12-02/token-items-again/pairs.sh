#!/bin/bash
# Lab, one device call: the token consumer taking its tiles in pairs (ws_pair.py: one softmax, one barrier chain for
# two tiles) beside the tree and main's module (one process, 5 rounds); then the token items' GPU tests with it.
set -u
export PYTHONPATH=$PWD
M=.fi/ld
ROWS=qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16,llama3-8b/decode/batch16-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096-var/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096-var/block32/fp8/bf16,llama3-8b/decode/batch16-kv8192-var/block16/fp8/bf16,qwen2.5-7b/decode/batch28-kv8192-var/block16/fp8/bf16
FORMS="base pair"
t0=$(date +%s)
for f in $FORMS; do
  for sc in ${ROWS//,/ }; do
    WARM_ONLY=1 Q1_ONLY=1 timeout 200 python3 .fi/conv/variants.py $sc $M/ws_$f.py > /tmp/warm_${f}_${sc//\//_}.log 2>&1 &
  done
done
wait
echo "warmed in $(( $(date +%s) - t0 )) s"; grep -h "failed\|Error" /tmp/warm_*.log | cut -c1-200
Q1_ONLY=1 timeout 200 python3 .fi/conv/variants.py $ROWS $(for f in $FORMS; do printf "$M/ws_$f.py,"; done | sed 's/,$//') 2>&1 | tee $OUT/variants.log
cp /tmp/tok_time.json $OUT/ 2>/dev/null
echo "variants done at $(( $(date +%s) - t0 )) s"
cp $M/ws_pair.py kernels/paged_attention/warp_specialized.py
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_warp_specialized.py -k "token" 2>&1 | tail -4 | tee $OUT/gpu-tests.txt
echo "all done at $(( $(date +%s) - t0 )) s"
