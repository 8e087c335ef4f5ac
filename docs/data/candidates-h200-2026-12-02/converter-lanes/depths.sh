#!/bin/bash
# Lab, one device call: the token items' depths apart (K stages / V staging slots / fp16 V stages; mk_deep.py of
# 2026-12-01) on the converter's new lanes, module copies beside the tree (one process, 5 rounds, q in one part).
set -u
export PYTHONPATH=$PWD
M=.fi/conv  # variants.py there: docs/data/candidates-h200-2026-12-01/token-items-time/variants.py with variants-warm-only.diff; ws_deepKSV.py: mk_deep.py of that folder, K S V
t0=$(date +%s)
TOK=qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16,llama3-8b/decode/batch16-kv4096/block16/fp8/bf16
FORMS="lanes deep442 deep433 deep542 deep343"
for f in $FORMS; do
  for sc in ${TOK//,/ }; do
    WARM_ONLY=1 Q1_ONLY=1 timeout 200 python3 $M/variants.py $sc $M/ws_$f.py > /tmp/warm_${f}_${sc//\//_}.log 2>&1 &
  done
done
wait
echo "warmed at $(( $(date +%s) - t0 )) s"; grep -h "failed\|Error" /tmp/warm_*.log | cut -c1-200
Q1_ONLY=1 timeout 200 python3 $M/variants.py $TOK $(for f in $FORMS; do printf "$M/ws_$f.py,"; done | sed 's/,$//') 2>&1 | tee $OUT/variants.log
echo "done at $(( $(date +%s) - t0 )) s"
