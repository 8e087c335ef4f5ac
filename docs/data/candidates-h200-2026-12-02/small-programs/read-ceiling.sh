#!/bin/bash
# Lab, one device call: the paged read's ceiling at 134 MB for grids of many small programs (ceiling.py).
set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
i=0
for sc in qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16 qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16 \
          llama3-8b/decode/batch16-kv4096/block16/fp8/bf16; do
    i=$((i+1))
    TAG=$i SCENARIO=$sc ROUNDS=3 timeout 200 python3 .fi/split/ceiling.py >> $OUT/ceiling.log 2>&1
    echo "exit $? $sc" >> $OUT/ceiling.log
done
grep -v '^\s*$' $OUT/ceiling.log | cut -c1-200 | tail -100
