#!/usr/bin/env bash
# [ws-short-prompts] and [short-prompt-tile] on nvidia-h200: GPU tests, then the latency gates of the working tree
# against f840965 over the anchor, pr and nightly suites (static_grid, graph replay). The device's git is at main,
# f840965, before both rules; the change is uncommitted there. Three calls ran it:
#   gates.sh                the Gluon kernel's GPU tests, then the gates of [ws-short-prompts] alone (its change
#                           plans on the CPU: 2, 0 and 0 cases): gpu-tests.txt, gate-*.md
#   gates.sh --gates-only   the gates: the first call's had named c6e3f0a, which the device's git lacks
#   TAG=2 K="tiles_of_32 or short_prompts" FILES="tests/kernels/test_heuristics.py tests/kernels/test_warp_specialized.py"
#   gates.sh                with [short-prompt-tile] too (plans: 3, 0 and 0): gpu-tests2.txt, gate2-*.md
# BASE (default f840965) and SUITES (default "anchor pr nightly") name another base and suites: [ws-large-batches]
# (main 3645557 on the device) ran it twice, its files in ../mixed-prompts/, with
#   BASE=3645557 SUITES="pr nightly" FILES="tests/kernels/test_warp_specialized.py tests/kernels/test_heuristics.py"
#   and TAG unset for the rule's first bounds (plans 5 of 27, 14 of 186; the gates failed), TAG=2 for the kept
#   bounds (plans 3 and 10); the anchor's plan was 0 of 27 both times, so it was not gated.
# SCENARIOS (fnmatch globs, `perf gate --scenarios`) gates a part of each suite: [ws-pack-gqa] (main 86e8215 on the
# device; plans 6 of 27 and 48 of 186) ran it in two calls, its files in ../pack-gqa/:
#   BASE=86e8215 SUITES="pr nightly" SCENARIOS="*/prefill/*" TAG=-prefill gates.sh --gates-only   (pr's 2 prefills)
#   BASE=86e8215 SUITES="pr nightly" SCENARIOS="*/mixed*/*" TAG=-mixed gates.sh --gates-only
set -u
export PYTHONPATH=$PWD
tag=${TAG:-}
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu$tag.txt"
git log --oneline -1 >> "$OUT/gpu$tag.txt"
if [ "${1:-}" != "--gates-only" ]; then
  # shellcheck disable=SC2086  # FILES: test files, one word each
  timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 --dist loadgroup \
    ${FILES:-tests/kernels/test_warp_specialized.py} ${K:+-k "$K"} 2>&1 | tail -4 > "$OUT/gpu-tests$tag.txt"
  cat "$OUT/gpu-tests$tag.txt"
fi
echo "tests done at $(( $(date +%s) - t0 )) s"
for s in ${SUITES:-anchor pr nightly}; do
  timeout $(( 570 - ($(date +%s) - t0) )) python3 -m perf gate --base-ref "${BASE:-f840965}" --allow-dirty --suite $s \
    --variants static_grid --metrics graph ${SCENARIOS:+--scenarios "$SCENARIOS"} --out /tmp/gate-$s \
    > "/tmp/gate-$s.log" 2>&1
  echo "gate $s rc=$? at $(( $(date +%s) - t0 )) s"
  cp /tmp/gate-$s/report.md "$OUT/gate$tag-$s.md" 2>/dev/null
  tail -n 3 "/tmp/gate-$s.log"
done
