#!/bin/bash
# Lab, one device call: regt_decode's forms beside the tree and the token items on the 134 MB fp8 decodes.
set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
FORMS=${FORMS:-16:1:0:1,8:1:1:1,8:1:0:1,4:1:1:1,16:1:1:1,16:0:0:1} ROUNDS=${ROUNDS:-5} TAG=${TAG:-1} \
SCENARIOS=${SCENARIOS:-qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16,llama3-8b/decode/batch16-kv4096/block16/fp8/bf16,llama3-8b/decode/batch32-kv4096/block16/fp8/bf16} \
timeout ${LIMIT:-500} python3 .fi/regt/probe.py > $OUT/probe.log 2>&1
echo "exit $?" >> $OUT/probe.log
grep -v '^\s*$' $OUT/probe.log | cut -c1-220 | tail -70
