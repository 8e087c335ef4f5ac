#!/bin/bash
# Lab, one device call: the register decode's forms beside the tree and the token items on the 134 MB fp8 decodes.
set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
FORMS=${FORMS:-8:0:2:16,8:0:1:16,4:0:2:16,8:0:3:16} ROUNDS=${ROUNDS:-5} TAG=1 \
SCENARIOS=qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16,llama3-8b/decode/batch16-kv4096/block16/fp8/bf16,llama3-8b/decode/batch32-kv4096/block16/fp8/bf16 \
timeout ${LIMIT:-520} python3 .fi/reg/probe.py > $OUT/probe.log 2>&1
echo "exit $?" >> $OUT/probe.log
grep -v '^\s*$' $OUT/probe.log | cut -c1-220 | tail -60
