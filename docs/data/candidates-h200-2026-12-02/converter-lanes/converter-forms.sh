#!/bin/bash
# Lab, one device call: the Triton cache filled by parallel processes (compiles only), ncu of the token items (q in
# one e4m3 part) on the 134 MB decodes, then the converter's forms timed beside the tree and a copy of the tree's
# module (one process, graph replay, L2 flushed, 5 rounds).
set -u
export PYTHONPATH=$PWD
M=.fi/conv  # variants.py there: docs/data/candidates-h200-2026-12-01/token-items-time/variants.py with variants-warm-only.diff
ROWS=qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16
FORMS="base rows64 rows128 zeros loads idle"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
t0=$(date +%s)
for f in $FORMS; do
  for sc in ${ROWS//,/ }; do
    WARM_ONLY=1 Q1_ONLY=1 timeout 200 python3 $M/variants.py $sc $M/ws_$f.py > /tmp/warm_${f}_${sc//\//_}.log 2>&1 &
  done
done
for b in 16 32; do timeout 200 python3 $M/one_call.py qwen2.5-7b/decode/batch32-kv4096/block$b/fp8/bf16 > /tmp/warm_one_$b.log 2>&1 & done
wait
echo "warmed in $(( $(date +%s) - t0 )) s"; grep -h "warmed\|failed\|Error" /tmp/warm_*.log | cut -c1-200
for b in 16 32; do
  sc=qwen2.5-7b/decode/batch32-kv4096/block$b/fp8/bf16
  timeout 150 ncu --clock-control none --set full --import-source yes -k regex:ws_prefill --launch-skip 1 \
    --launch-count 1 -o /tmp/tok_b$b python3 $M/one_call.py $sc > /tmp/ncu_b$b.log 2>&1
  tail -3 /tmp/ncu_b$b.log
  ncu --import /tmp/tok_b$b.ncu-rep --page details > $OUT/ncu-details-b$b.txt 2>&1
  ncu --import /tmp/tok_b$b.ncu-rep --page source --csv --print-source sass > $OUT/ncu-source-b$b.csv 2>&1
  echo "ncu b$b done at $(( $(date +%s) - t0 )) s"
done
Q1_ONLY=1 timeout 240 python3 $M/variants.py $ROWS $(for f in $FORMS; do printf "$M/ws_$f.py,"; done | sed 's/,$//') 2>&1 | tee $OUT/variants.log
echo "all done at $(( $(date +%s) - t0 )) s"
