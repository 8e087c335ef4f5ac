#!/usr/bin/env bash
# The short-prefill batches' launch knobs beside FlashAttention-3 (nvidia-h200): plan-short.yaml in one process.
set -uo pipefail
d=docs/data/candidates-h200-2026-12-04/fa3-peer
export PYTHONPATH=$PWD/.fi/fa3/pkg:$PWD
timeout 560 python -m perf.lab.candidates "$d/plan-short.yaml" --peers flash_attn_3 --out "$OUT/short" \
  > "$OUT/short.txt" 2>&1
tail -45 "$OUT/short.txt"
