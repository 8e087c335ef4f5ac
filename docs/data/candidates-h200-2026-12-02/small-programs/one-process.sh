#!/bin/bash
# Lab, one device call: the best bare reads of ceiling.sh beside the tree, the token items and the bf16 decode
# of the same lengths, in one process a scenario, 7 rounds.
set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
i=0
for sc in qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16 qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16 \
          llama3-8b/decode/batch16-kv4096/block16/fp8/bf16 llama3-8b/decode/batch32-kv4096/block16/fp8/bf16; do
    i=$((i+1))
    KEEP="paged s8 t32 w4 st2,paged s4 t32 w4 st3,paged s1 t128 w4 st4,paged s2 t64 w4 st3,dense s2 t128 w4 st3,dense s1 t128 w4 st3" \
    PEERS_OF_TREE=1 TAG=one-process-$i SCENARIO=$sc ROUNDS=7 timeout 130 python3 .fi/split/ceiling.py >> $OUT/ceiling2.log 2>&1
    echo "exit $? $sc" >> $OUT/ceiling2.log
done
grep -v '^\s*$' $OUT/ceiling2.log | cut -c1-200 | tail -60
