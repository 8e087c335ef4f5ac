#!/bin/bash
# Lab, one device call: module copies of the Gluon kernel (.fi/ld/ws_<form>.py: main 1ee71cb's warp_specialized.py
# with the edits of variants.diff) timed beside the tree as token items with q in one e4m3 part, by 2026-12-01's
# variants.py with the WARM_ONLY edit (.fi/conv/variants.py): the Triton cache filled by parallel processes first,
# then one process, graph replay, L2 flushed, 5 rounds, outputs not checked. Optionally the TMA stream probe beside
# them, and the Gluon kernel's GPU tests with one form in place. The calls as they ran: calls.md.
#   FORMS="base ids" ROWS=scenario,scenario [PROBE=1] [TESTED=form TESTS=pytest-k-expression|all] module-forms.sh
set -u
export PYTHONPATH=$PWD
M=.fi/ld
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
git log --oneline -1 > $OUT/device-git.txt 2>&1
t0=$(date +%s)
for f in $FORMS; do
  for sc in ${ROWS//,/ }; do
    WARM_ONLY=1 Q1_ONLY=1 timeout 200 python3 .fi/conv/variants.py $sc $M/ws_$f.py > /tmp/warm_${f}_${sc//\//_}.log 2>&1 &
  done
done
wait
echo "warmed in $(( $(date +%s) - t0 )) s"; grep -h "failed\|Error" /tmp/warm_*.log | cut -c1-200
PROBE=${PROBE:-} Q1_ONLY=1 timeout 300 python3 .fi/conv/variants.py $ROWS \
  $(for f in $FORMS; do printf "$M/ws_$f.py,"; done | sed 's/,$//') 2>&1 | tee $OUT/variants.log
cp /tmp/tok_time.json $OUT/ 2>/dev/null
echo "variants done at $(( $(date +%s) - t0 )) s"
if [ -n "${TESTED:-}" ]; then
  cp $M/ws_$TESTED.py kernels/paged_attention/warp_specialized.py
  select=(); [ "$TESTS" != all ] && select=(-k "$TESTS")
  timeout 330 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_warp_specialized.py "${select[@]}" 2>&1 \
    | tail -5 | tee $OUT/gpu-tests.txt
fi
echo "all done at $(( $(date +%s) - t0 )) s"
