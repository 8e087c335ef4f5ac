#!/usr/bin/env bash
# The anchor beside FlashAttention-3 (nvidia-h200): plan-anchor.yaml in three processes, each a fresh
# `perf.lab.candidates` (5 rounds), the reduced build carried as .fi/fa3/pkg.
set -uo pipefail
d=docs/data/candidates-h200-2026-12-04/fa3-peer
export PYTHONPATH=$PWD/.fi/fa3/pkg:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu-anchor.txt"
for p in 1 2 3; do
  timeout $(( (585 - SECONDS) / (4 - p) )) python -m perf.lab.candidates "$d/plan-anchor.yaml" \
    --peers flash_attn_3 --out "$OUT/anchor-$p" > "$OUT/anchor-$p.txt" 2>&1
  grep "^candidates \[" "$OUT/anchor-$p.txt" | tail -30
  rm -f "$OUT/anchor-$p/candidates.md"  # the same table is in anchor-$p.txt; 8 files come back at most
done
