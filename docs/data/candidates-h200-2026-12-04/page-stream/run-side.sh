#!/bin/bash
# Lab, one device call: Triton's plain-load paged read (perf.lab.gather_ceiling, a program an item and 8 segments)
# beside the TMA stream probe's per-head and paired forms, the same rows, one call.
# The device call: nvidia-h200, 2026-12-04 07:43-07:44 UTC, main f47be0a; the probe ran from the scratch folder .fi/page/ as probe.py (page-stream-probe.py)
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt
ROWS="qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16 qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16 llama3-8b/decode/batch16-kv4096/block16/fp8/bf16 llama3-8b/decode/batch32-kv4096/block16/fp8/bf16"
timeout 300 python3 -m perf.lab.gather_ceiling $ROWS --segments 1,8 --tiles 32,128 --warps 4 --stages 2,3,4 \
    --out $OUT/gather-ceiling > $OUT/gather-ceiling.log 2>&1
echo "gather_ceiling exit $? at $(( $(date +%s) - t0 )) s"
for tag in 5 6; do
  timeout 100 python3 .fi/page/probe.py $tag > $OUT/probe-$tag.log 2>&1
done
echo "done at $(( $(date +%s) - t0 )) s"
grep -v '^|' $OUT/gather-ceiling.log | tail -15 | cut -c1-300
