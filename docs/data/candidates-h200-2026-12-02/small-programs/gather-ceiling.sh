#!/bin/bash
# Lab, one device call: perf/lab/gather_ceiling.py's new grid (segments, stages) on the 134 MB fp8 decodes and one of 268 MB.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 500 python3 -m perf.lab.gather_ceiling qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16 \
    qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16 llama3-8b/decode/batch16-kv4096/block16/fp8/bf16 \
    llama3-8b/decode/batch32-kv4096/block16/fp8/bf16 --out $OUT/gather-ceiling > $OUT/gather-ceiling.log 2>&1
echo "exit $?" >> $OUT/gather-ceiling.log
grep -v '^|' $OUT/gather-ceiling.log | cut -c1-400
