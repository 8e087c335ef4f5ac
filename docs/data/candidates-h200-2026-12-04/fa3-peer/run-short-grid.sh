#!/usr/bin/env bash
# Batches of short prompts (nvidia-h200): plan-short-grid.yaml in three processes beside FlashAttention-3.
set -uo pipefail
d=docs/data/candidates-h200-2026-12-04/fa3-peer
export PYTHONPATH=$PWD/.fi/fa3/pkg:$PWD
for p in 1 2 3; do
  timeout $(( (570 - SECONDS) / (4 - p) )) python -m perf.lab.candidates "$d/plan-short-grid.yaml" \
    --peers flash_attn_3 --out "$OUT/grid-$p" > "$OUT/grid-$p.txt" 2>&1
  grep "^candidates \[" "$OUT/grid-$p.txt" | tail -16
  rm -f "$OUT/grid-$p/candidates.md"
done
