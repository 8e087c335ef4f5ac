#!/usr/bin/env bash
# [ws-short-prompts] on nvidia-h200: the Gluon kernel's GPU tests (its batches of short prompts among them), then
# the latency gates of the working tree against f840965 (the device's git is at main, f840965, whose kernels are
# those of c6e3f0a, the rule's parent; the change is uncommitted there) over the anchor, pr and nightly suites
# (static_grid, graph replay); on the CPU their change plans time 2, 0 and 0 cases. --gates-only: no tests.
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
git log --oneline -1 >> "$OUT/gpu.txt"
[ "${1:-}" = "--gates-only" ] || timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 --dist loadgroup \
  tests/kernels/test_warp_specialized.py 2>&1 | tail -4 > "$OUT/gpu-tests.txt"
cat "$OUT/gpu-tests.txt"; echo "tests done at $(( $(date +%s) - t0 )) s"
for s in anchor pr nightly; do
  timeout $(( 570 - ($(date +%s) - t0) )) python3 -m perf gate --base-ref f840965 --allow-dirty --suite $s \
    --variants static_grid --metrics graph --out /tmp/gate-$s > "/tmp/gate-$s.log" 2>&1
  echo "gate $s rc=$? at $(( $(date +%s) - t0 )) s"
  cp /tmp/gate-$s/report.md "$OUT/gate-$s.md" 2>/dev/null
  tail -n 3 "/tmp/gate-$s.log"
done
