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
# TESTS (pytest arguments: run first, their tail in $OUT/tests-NAME.txt), PROCS (default "1 2 3") and BUDGET (s,
# default 585, shared by the tests and the processes) let a call test the tree first and run only some processes:
#   TESTS="tests/kernels/test_warp_specialized.py" PROCS="1 2" candidates.sh ../pack-gqa/plan.yaml pack   ../pack-gqa/
#   PROCS=3 candidates.sh ../pack-gqa/plan.yaml pack                                                    (the third)
set -uo pipefail
plan=${1:?usage: candidates.sh PLAN NAME}
name=${2:?usage: candidates.sh PLAN NAME}
export PYTHONPATH=$PWD/.fi/fa3/pkg:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu-$name.txt"
git log --oneline -1 >> "$OUT/gpu-$name.txt"
if [ -n "${TESTS:-}" ]; then
  # shellcheck disable=SC2086  # TESTS: pytest's arguments, one word each
  timeout 300 python -m pytest -q -p no:cacheprovider -n 8 --dist loadgroup $TESTS 2>&1 | tail -n 6 \
    > "$OUT/tests-$name.txt"
  cat "$OUT/tests-$name.txt"
fi
procs=(${PROCS:-1 2 3})
for i in "${!procs[@]}"; do
  p=${procs[$i]}
  timeout $(( (${BUDGET:-585} - SECONDS) / (${#procs[@]} - i) )) python -m perf.lab.candidates "$plan" \
    --peers flash_attn_3 --out "$OUT/$name-$p" > "$OUT/$name-$p.txt" 2>&1
  grep "^candidates \[" "$OUT/$name-$p.txt" | tail -n 30
  rm -f "$OUT/$name-$p/candidates.md"  # the same table is in the log; 8 files come back at most
done
