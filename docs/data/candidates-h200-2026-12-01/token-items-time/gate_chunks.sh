#!/usr/bin/env bash
# device: the nightly's changed rows gated in slices of one CPU-made plan (gate-nightly-plan.json beside this
# script, or $PLAN), each slice a gate process, its report and log copied to $OUT as it ends.
# Usage: bash gate_chunks.sh 0:13 13:25 5,6,11 ...  (slices, or comma lists of indices, of the plan's rows to
# time, one gate process each, in order); where HEAD is no longer the plan's head (37c5331), HEAD_REF=37c5331
# checks that out as head; REPEATS=N times N paired rounds a process in place of the thresholds' default.
set -u
export PYTHONPATH=.
PLAN=${PLAN:-$(dirname "$0")/gate-nightly-plan.json}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
for chunk in "$@"; do
  rows=$(python3 - "$chunk" "$PLAN" <<'PY'
import json, sys
rows = json.load(open(sys.argv[2]))["measure"]
if ":" in sys.argv[1]:
    lo, hi = map(int, sys.argv[1].split(":"))
    rows = rows[lo:hi]
else:
    rows = [rows[int(i)] for i in sys.argv[1].split(",")]
print(",".join(r["scenario"] for r in rows))
PY
)
  d=/tmp/gate-$chunk
  start=$(date +%s)
  echo "== chunk $chunk: $rows" >> "$OUT/log.txt"
  python3 -m perf gate --base-ref b5a716c --suite nightly --variants static_grid --metrics graph \
      --plan "$PLAN" ${HEAD_REF:+--head-ref "$HEAD_REF"} ${REPEATS:+--repeats "$REPEATS"} --scenarios "$rows" --out "$d" >> "$OUT/log.txt" 2>&1
  echo "chunk $chunk rc=$? $(( $(date +%s) - start ))s" >> "$OUT/gpu.txt"
  n=${chunk//[:,]/-}
  cp "$d/report.md" "$OUT/gate-$n.md"
  python3 - "$d/findings.json" "$OUT/gate-findings.json" <<'PY'
import json, os, sys
src, dst = sys.argv[1:]
have = json.load(open(dst)) if os.path.exists(dst) else []
have.append(json.load(open(src)))
json.dump(have, open(dst, "w"), indent=1)
PY
done
