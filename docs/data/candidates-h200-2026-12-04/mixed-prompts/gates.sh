#!/usr/bin/env bash
# [ws-large-batches] on nvidia-h200: the Gluon kernel's GPU tests and the rule's own, then the latency gates of
# the working tree against main 3645557 (the device's git; the change uncommitted there) over the pr and nightly
# suites (static_grid, graph replay); the anchor's change plan on the CPU is 0 of 27 (identical launches), so it
# is not gated here. Two calls ran it, TAG naming the second's files:
#   gates.sh          the rule's first bounds (>= 256 queries in the longest sequence, >= 4096 tokens, the longest
#                     <= 4x the mean): plans 5 of 27 and 14 of 186; gate-pr.md, gate-nightly.md (they failed)
#   TAG=2 gates.sh    the kept bounds (>= 256 queries a sequence on average, >= 4096 tokens): plans 3 and 10
set -u
export PYTHONPATH=$PWD
tag=${TAG:-}
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu$tag.txt"
git log --oneline -1 >> "$OUT/gpu$tag.txt"
timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 --dist loadgroup tests/kernels/test_warp_specialized.py \
  tests/kernels/test_heuristics.py 2>&1 | tail -4 > "$OUT/gpu-tests$tag.txt"
cat "$OUT/gpu-tests$tag.txt"
echo "tests done at $(( $(date +%s) - t0 )) s"
for s in pr nightly; do
  timeout $(( 580 - ($(date +%s) - t0) )) python3 -m perf gate --base-ref 3645557 --allow-dirty --suite $s \
    --variants static_grid --metrics graph --out /tmp/gate-$s > "/tmp/gate-$s.log" 2>&1
  echo "gate $s rc=$? at $(( $(date +%s) - t0 )) s"
  cp /tmp/gate-$s/report.md "$OUT/gate$tag-$s.md" 2>/dev/null
  tail -n 3 "/tmp/gate-$s.log"
done
