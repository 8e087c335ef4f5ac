#!/bin/bash
# Lab, one device call: the converter's lanes along the rows (ws_lanes.py) against the tree: the e4m3 Gluon prefills
# (perf.lab.source_ab, production launches, checked on poisoned outputs, bit-compared with the tree), the token
# items (module copies beside the tree); then with the candidate in place: ncu of the token items' shared stores and
# the Gluon kernel's GPU tests.
set -u
export PYTHONPATH=$PWD
M=.fi/conv  # variants.py there: docs/data/candidates-h200-2026-12-01/token-items-time/variants.py with variants-warm-only.diff
t0=$(date +%s)
TOK=qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16,llama3-8b/decode/batch16-kv4096/block16/fp8/bf16
for f in base lanes; do
  for sc in ${TOK//,/ }; do
    WARM_ONLY=1 Q1_ONLY=1 timeout 200 python3 $M/variants.py $sc $M/ws_$f.py > /tmp/warm_${f}_${sc//\//_}.log 2>&1 &
  done
done
wait
echo "warmed at $(( $(date +%s) - t0 )) s"; grep -h "failed\|Error" /tmp/warm_*.log | cut -c1-200
timeout 260 python3 -m perf.lab.source_ab $M/ws_lanes.py llama3-8b/prefill/batch1-kv8192/block16/fp8/bf16,llama3-8b/prefill/batch4-kv2048/block16/fp8/bf16,llama3-8b/prefill/batch8-kv1024/block16/fp8/bf16,llama3-8b/prefill/batch8-kv1024/block16/fp8 --rounds 9 --out $OUT/source_ab 2>&1 | tail -12
echo "source_ab done at $(( $(date +%s) - t0 )) s"
Q1_ONLY=1 timeout 150 python3 $M/variants.py $TOK $M/ws_base.py,$M/ws_lanes.py 2>&1 | tee $OUT/variants.log
echo "variants done at $(( $(date +%s) - t0 )) s"
cp $M/ws_lanes.py kernels/paged_attention/warp_specialized.py
sc=qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16
timeout 100 ncu --clock-control none --section MemoryWorkloadAnalysis_Tables --section SpeedOfLight -k regex:ws_prefill \
  --launch-skip 1 --launch-count 1 python3 $M/one_call.py $sc > $OUT/ncu-lanes-b32.txt 2>&1
grep -i "bank\|Duration" $OUT/ncu-lanes-b32.txt | head
echo "ncu done at $(( $(date +%s) - t0 )) s"
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_warp_specialized.py 2>&1 | tail -5 | tee $OUT/gpu-tests.txt
echo "all done at $(( $(date +%s) - t0 )) s"
