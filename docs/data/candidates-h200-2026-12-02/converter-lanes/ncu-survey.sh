#!/bin/bash
# Lab, one device call: ncu (--set full, clocks uncontrolled) of the production entry's kernels on a survey of rows,
# each kernel's shared-memory wavefronts and the instructions that hold any excess over ideal (bank conflicts).
set -u
export PYTHONPATH=$PWD
M=.fi/conv  # variants.py there: docs/data/candidates-h200-2026-12-01/token-items-time/variants.py with variants-warm-only.diff
t0=$(date +%s)
mkdir -p /tmp/survey
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > /tmp/survey/gpu.txt
K='regex:q_block_kernel|ws_prefill_kernel|reduce_segments_kernel'
args=()
prof() {
  label=$1; shift
  timeout 120 ncu --clock-control none --set full --import-source yes -k "$K" --launch-count 2 -o /tmp/survey/$label \
    python3 "$@" > /tmp/survey/$label.log 2>&1
  ncu --import /tmp/survey/$label.ncu-rep --page source --csv --print-source sass > /tmp/survey/$label.csv 2>&1
  ncu --import /tmp/survey/$label.ncu-rep --page details > /tmp/survey/$label-details.txt 2>&1
  rm -f /tmp/survey/$label.ncu-rep
  args+=("$label=/tmp/survey/$label.csv")
  echo "$label done at $(( $(date +%s) - t0 )) s"
}
prof tokens-fp8-decode-134mb-b32 $M/one_call.py qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16
prof fp8-decode-134mb-b16 $M/prod_call.py qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16
prof bf16-decode-32x8k $M/prod_call.py llama3-8b/decode/batch32-kv8192/block16/bf16
prof spec-decode-32x8k-q4 $M/prod_call.py llama3-8b/decode/batch32-kv8192-q4/block16/bf16
prof bf16-prefill-1x8k $M/prod_call.py llama3-8b/prefill/batch1-kv8192/block16/bf16
prof fp8-prefill-1x8k $M/prod_call.py llama3-8b/prefill/batch1-kv8192/block16/fp8/bf16
prof bf16-prefill-32x256 $M/prod_call.py llama3-8b/prefill/batch32-kv256/block16/bf16
python3 $M/ncu_survey.py "${args[@]}" > $OUT/ncu-survey.txt 2>&1
cat $OUT/ncu-survey.txt | cut -c1-200
tar -C /tmp -czf $OUT/ncu-survey.tar.gz survey
ls -la $OUT
