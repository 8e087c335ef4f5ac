#!/bin/bash
# Lab, one device call: the token items without the count-out where the grid covers the items (ws_noleave.py), and
# with the tile's ids read as one vector too (ws_ids_noleave.py), beside the tree and a copy of main's module (one
# process, graph replay, L2 flushed, 5 rounds); then the Gluon kernel's GPU tests with the change in place.
# (As it ran: the working tree held ws_noleave.py's kernel, so main's module was put back for the timing.)
set -u
export PYTHONPATH=$PWD
git log --oneline -1 > $OUT/device-git.txt 2>&1
M=.fi/ld
cp kernels/paged_attention/warp_specialized.py /tmp/ws_change.py
cp $M/ws_base.py kernels/paged_attention/warp_specialized.py
ROWS=qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16,llama3-8b/decode/batch16-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096-var/block16/fp8/bf16
FORMS="base noleave ids_noleave"
t0=$(date +%s)
for f in $FORMS; do
  for sc in ${ROWS//,/ }; do
    WARM_ONLY=1 Q1_ONLY=1 timeout 200 python3 .fi/conv/variants.py $sc $M/ws_$f.py > /tmp/warm_${f}_${sc//\//_}.log 2>&1 &
  done
done
wait
echo "warmed in $(( $(date +%s) - t0 )) s"; grep -h "failed\|Error" /tmp/warm_*.log | cut -c1-200
PROBE=1 Q1_ONLY=1 timeout 200 python3 .fi/conv/variants.py $ROWS $(for f in $FORMS; do printf "$M/ws_$f.py,"; done | sed 's/,$//') 2>&1 | tee $OUT/variants.log
cp /tmp/tok_time.json $OUT/ 2>/dev/null
echo "variants done at $(( $(date +%s) - t0 )) s"
cp /tmp/ws_change.py kernels/paged_attention/warp_specialized.py
timeout 330 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_warp_specialized.py 2>&1 | tail -5 | tee $OUT/gpu-tests.txt
echo "all done at $(( $(date +%s) - t0 )) s"
