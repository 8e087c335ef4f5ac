#!/usr/bin/env bash
# Mixed batches, chunks and fp8 short prompts (nvidia-h200): plan.yaml in three processes beside
# FlashAttention-3 (its build from ../fa3-peer/build.sh, carried as .fi/fa3/pkg). Each process's
# candidates.json is kept here as grid-<p>.json, run-<p>.txt its log; table.md is
# `python ../fa3-peer/summarize.py grid ../mixed-prompts` over them.
set -uo pipefail
d=docs/data/candidates-h200-2026-12-04/mixed-prompts
export PYTHONPATH=$PWD/.fi/fa3/pkg:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt"
for p in 1 2 3; do
  timeout $(( (580 - SECONDS) / (4 - p) )) python -m perf.lab.candidates "$d/plan.yaml" \
    --peers flash_attn_3 --out "$OUT/run-$p" > "$OUT/run-$p.txt" 2>&1
  grep "^candidates \[" "$OUT/run-$p.txt" | tail -22
  rm -f "$OUT/run-$p/candidates.md"
done
