#!/bin/bash
# Lab, one device call: many small programs over the 134 MB fp8 decodes (probe.py's rungs beside static_grid).
set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
i=0
for sc in qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16 qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16 \
          llama3-8b/decode/batch16-kv4096/block16/fp8/bf16; do
    i=$((i+1))
    checks=0; [ $i -eq 1 ] && checks=1
    SEGS=4,8,16 TILES=32,64 WARPS=2,4 STAGES=2,3 MODES=0,3,4 ROUNDS=3 SMALL_CHECKS=$checks TAG=$i SCENARIOS=$sc timeout 240 python3 .fi/split/probe.py >> $OUT/probe.log 2>&1
    echo "exit $? $sc" >> $OUT/probe.log
done
grep -v '^\s*$' $OUT/probe.log | cut -c1-200 | tail -150
