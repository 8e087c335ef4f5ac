#!/usr/bin/env bash
# The device command of 2026-12-04 (nvidia-h200): flashinfer 0.7.4 unpacked from .fi/bundle (carried), its
# kernels compiled for sm_90a into .fi/jit (kept on a warm machine), then the candidates' timing.
set -uo pipefail
d=docs/data/candidates-h200-2026-12-04/xqa
mkdir -p .fi/site && tar xJf .fi/bundle/flashinfer-site.tar.xz -C .fi/site --strip-components=1
export PYTHONPATH=$PWD/.fi/site:$PWD FLASHINFER_WORKSPACE_BASE=$PWD/.fi/jit TVM_FFI_CACHE_DIR=$PWD/.fi/tvmffi \
  FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt"
if [ "${1:-}" != "--timed-only" ]; then
  i=0
  for s in qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16 qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16 \
           llama3-8b/decode/batch16-kv4096/block16/fp8/bf16 llama3-8b/decode/batch64-kv4096/block32/fp8/bf16; do
    i=$((i + 1))
    timeout 330 python "$d/warm.py" "$s" > "$OUT/warm-$i.txt" 2>&1 &
  done
  wait
  cat "$OUT"/warm-*.txt | grep -v "^ *$" | tail -40
fi
timeout $((585 - SECONDS)) python -m perf.lab.candidates "$d/plan.yaml" --peers flashinfer_paged,flashinfer_xqa --out "$OUT/cand" \
  > "$OUT/candidates.txt" 2>&1
tail -45 "$OUT/candidates.txt"
