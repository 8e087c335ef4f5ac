#!/usr/bin/env bash
# A plan in three processes on nvidia-h200, each a fresh `perf.lab.candidates` (5 rounds) beside FlashAttention-3
# (the reduced build of build.sh, carried as .fi/fa3/pkg):
#   candidates.sh PLAN NAME    $OUT/NAME-<p>.txt (the log) and $OUT/NAME-<p>/candidates.json, p = 1-3
# Four calls ran it, each from the repository root:
#   plan-anchor.yaml anchor           this folder's anchor-<p>.* (its GPU in gpu-anchor.txt)
#   plan-short-grid.yaml grid         this folder's grid-<p>.*
#   ../mixed-prompts/plan.yaml run    ../mixed-prompts/: run-<p>.txt, each candidates.json kept as grid-<p>.json
#   ../mixed-prompts/fp16-e4m3/plan.yaml fp16   ../mixed-prompts/fp16-e4m3/, kept as there (plan-fp16-e4m3.yaml
#                                     when it ran)
set -uo pipefail
plan=${1:?usage: candidates.sh PLAN NAME}
name=${2:?usage: candidates.sh PLAN NAME}
export PYTHONPATH=$PWD/.fi/fa3/pkg:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu-$name.txt"
for p in 1 2 3; do
  timeout $(( (585 - SECONDS) / (4 - p) )) python -m perf.lab.candidates "$plan" \
    --peers flash_attn_3 --out "$OUT/$name-$p" > "$OUT/$name-$p.txt" 2>&1
  grep "^candidates \[" "$OUT/$name-$p.txt" | tail -n 30
  rm -f "$OUT/$name-$p/candidates.md"  # the same table is in the log; 8 files come back at most
done
