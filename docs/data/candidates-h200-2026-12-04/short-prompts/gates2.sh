#!/usr/bin/env bash
# [ws-short-prompts] and [short-prompt-tile] together on nvidia-h200: the heuristics' GPU tests of both (bf16, as
# chosen), then the latency gates of the working tree against f840965 (main on the device, before both rules) over
# the anchor, pr and nightly suites (static_grid, graph replay); on the CPU their change plans time 3, 0 and 0 cases.
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu2.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_heuristics.py \
  tests/kernels/test_warp_specialized.py -k "tiles_of_32 or short_prompts" 2>&1 | tail -3 > "$OUT/gpu-tests2.txt"
cat "$OUT/gpu-tests2.txt"; echo "tests done at $(( $(date +%s) - t0 )) s"
for s in anchor pr nightly; do
  timeout $(( 570 - ($(date +%s) - t0) )) python3 -m perf gate --base-ref f840965 --allow-dirty --suite $s \
    --variants static_grid --metrics graph --out /tmp/gate-$s > "/tmp/gate-$s.log" 2>&1
  echo "gate $s rc=$? at $(( $(date +%s) - t0 )) s"
  cp /tmp/gate-$s/report.md "$OUT/gate2-$s.md" 2>/dev/null
  tail -n 3 "/tmp/gate-$s.log"
done
