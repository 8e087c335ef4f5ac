#!/usr/bin/env bash
# The second device command of 2026-12-04 (nvidia-h200): flashinfer 0.7.4's kernels compiled for sm_90a (four
# processes at once), then plan-anchor.yaml timed in two processes, each a fresh `perf.lab.candidates`.
set -uo pipefail
d=docs/data/candidates-h200-2026-12-04/xqa
mkdir -p .fi/site && tar xJf .fi/bundle/flashinfer-site.tar.xz -C .fi/site --strip-components=1
export PYTHONPATH=$PWD/.fi/site:$PWD FLASHINFER_WORKSPACE_BASE=$PWD/.fi/jit TVM_FFI_CACHE_DIR=$PWD/.fi/tvmffi \
  FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt"
i=0
for s in llama3-8b/decode/batch1-kv1024/block16/bf16 qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16 \
         qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16 llama3-8b/decode/batch16-kv4096/block16/fp8/bf16; do
  i=$((i + 1))
  timeout 240 python "$d/warm.py" "$s" > "$OUT/warm-anchor-$i.txt" 2>&1 &
done
wait
grep -h "set up" "$OUT"/warm-anchor-*.txt
for p in 1 2; do
  timeout $(( (585 - SECONDS) / (3 - p) )) python -m perf.lab.candidates "$d/plan-anchor.yaml" \
    --peers flashinfer_paged,flashinfer_xqa --out "$OUT/anchor-$p" > "$OUT/anchor-$p.txt" 2>&1
  grep "^candidates \[" "$OUT/anchor-$p.txt" | tail -20
done
